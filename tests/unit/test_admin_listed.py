"""Topic creation returns once the metadata lists the new topics with a leader for each partition
(on a cluster a node's metadata lags the controller's acknowledgement)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from inferq.messaging.admin import _await_listed
from inferq.messaging.errors import MessagingError


@dataclass
class _Partition:
    leader: int


@dataclass
class _Topic:
    partitions: dict[int, _Partition]
    error: Any = None


@dataclass
class _Metadata:
    topics: dict[str, _Topic] = field(default_factory=dict)


class _LaggingAdmin:
    """Lists nothing for `lag` calls, then the topic without a leader once, then the topic led."""

    def __init__(self, lag: int) -> None:
        self.lag = lag
        self.calls = 0

    def list_topics(self, timeout: float) -> _Metadata:
        self.calls += 1
        if self.calls <= self.lag:
            return _Metadata()
        leader = -1 if self.calls == self.lag + 1 else 2
        return _Metadata({"t.requests.high": _Topic({0: _Partition(leader), 1: _Partition(2)})})


def test_creation_waits_until_the_topic_is_listed_with_a_leader_for_each_partition() -> None:
    admin = _LaggingAdmin(lag=3)
    _await_listed(admin, ["t.requests.high"], "b:9092", time.monotonic() + 10)  # type: ignore[arg-type]
    assert admin.calls == 5  # 3 without it, 1 without a leader, then listed


def test_a_topic_never_listed_is_an_error_at_the_deadline() -> None:
    admin = _LaggingAdmin(lag=10**9)
    with pytest.raises(MessagingError, match=r"created t.requests.high but does not list them"):
        _await_listed(admin, ["t.requests.high"], "b:9092", time.monotonic() + 0.3)  # type: ignore[arg-type]


def test_nothing_created_asks_nothing() -> None:
    admin = _LaggingAdmin(lag=10**9)
    _await_listed(admin, [], "b:9092", time.monotonic())  # type: ignore[arg-type]
    assert admin.calls == 0
