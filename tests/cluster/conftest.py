"""One local three-node cluster for the tests of this package (512 MB of heap per node), stopped
once they are done: other cluster tests (MirrorMaker's) start brokers of their own after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from inferq.tools.broker.cluster import LocalCluster
from inferq.tools.broker.fixture import kafka_cluster_for_tests


@pytest.fixture(scope="package")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Never skips: a cluster that does not start fails the tests."""
    with kafka_cluster_for_tests(tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster
