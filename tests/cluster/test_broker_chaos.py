"""Broker faults on the three-node cluster with traffic flowing through the whole pipeline:
whatever breaks, every accepted request has exactly one outcome its caller can see.

The figures (refusals, their longest run, how long throughput took to recover) are printed here
(`-s`) and measured properly by `inferq bench cluster-chaos`; nothing here asserts a duration.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from inferq.tools.broker.cluster import LocalCluster
from inferq.tools.chaos.cluster_faults import CaseSpec, Fault, run_case

pytestmark = [pytest.mark.cluster, pytest.mark.kafka, pytest.mark.slow]

# Short, to keep `make test-cluster` within its time: the bench runs longer windows.
SPEC = CaseSpec(warmup_s=6.0, down_s=12.0, after_s=6.0, threads=4, interval_s=0.2)


@pytest.mark.parametrize("fault", list(Fault))
def test_a_broker_fault_under_load_loses_nothing_and_answers_once(
    kafka_cluster: LocalCluster, tmp_path: Path, fault: Fault
) -> None:
    report = run_case(kafka_cluster, fault, tmp_path, SPEC)
    account = report.account
    assert account.accepted >= 50, f"too little traffic was accepted to mean anything: {account.accepted}"
    assert report.services_alive, f"a service died during the fault (logs in {tmp_path / 'logs'})"
    assert set(report.exit_codes.values()) == {0}, f"unclean exits: {report.exit_codes}"
    assert not account.lost, f"{len(account.lost)} accepted requests have no outcome, e.g. {account.lost[:5]}"
    assert account.caller_duplicates == 0, "a caller saw a second outcome"
    assert set(account.statuses) == {"OK"}, account.statuses
    assert kafka_cluster.brokers_seen() == {1, 2, 3}, "the cluster is not whole again after the case"
    assert all(event.back_ms > event.at_ms for event in report.events)
