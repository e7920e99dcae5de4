"""`inferq topics create`'s replication: from the cluster's size, or as the operator says."""

from __future__ import annotations

import pytest

from inferq.messaging.replication import Replication


@pytest.mark.parametrize(
    ("brokers", "factor", "min_insync"), [(1, 1, None), (2, 1, None), (3, 3, 2), (5, 3, 2)]
)
def test_the_default_follows_the_cluster_size(brokers: int, factor: int, min_insync: int | None) -> None:
    chosen = Replication.for_brokers(brokers)
    assert (chosen.factor, chosen.min_insync) == (factor, min_insync)


def test_a_single_node_adds_no_topic_setting() -> None:
    assert Replication.for_brokers(1).topic_config() == {}
    assert Replication.for_brokers(3).topic_config() == {"min.insync.replicas": "2"}


@pytest.mark.parametrize(
    ("brokers", "factor", "min_insync", "expected"),
    [
        (3, 2, None, (2, 2)),
        (3, 1, None, (1, None)),
        (3, 3, 3, (3, 3)),
        (3, 3, 1, (3, 1)),
        (1, None, 1, (1, 1)),
        (2, 2, 1, (2, 1)),
    ],
)
def test_flags_override_the_default(
    brokers: int, factor: int | None, min_insync: int | None, expected: tuple[int, int | None]
) -> None:
    chosen = Replication.for_brokers(brokers, factor=factor, min_insync=min_insync)
    assert (chosen.factor, chosen.min_insync) == expected


@pytest.mark.parametrize(
    ("brokers", "factor", "min_insync", "message"),
    [
        (3, 4, None, "needs at least 4 brokers"),
        (1, 3, None, "needs at least 3 brokers"),
        (3, 3, 4, "min.insync.replicas must be 1 to"),
        (3, 3, 0, "min.insync.replicas must be 1 to"),
        (3, 0, None, "at least 1"),
        (3, -2, None, "at least 1"),
    ],
)
def test_impossible_replication_is_refused(
    brokers: int, factor: int | None, min_insync: int | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Replication.for_brokers(brokers, factor=factor, min_insync=min_insync)
