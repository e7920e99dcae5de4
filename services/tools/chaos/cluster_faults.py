"""Broker faults on a local three-node cluster while traffic flows through the whole pipeline.

Three cases (`Fault`): SIGKILL the leader of a request partition; SIGKILL the active controller
(the quorum's leader; in this combined-mode cluster also a broker); a rolling restart, one node at a
time, each back and every partition fully replicated before the next. A killed node stays down for
`down_s` with traffic flowing, is started again, and the case waits until every partition is fully
replicated once more, so the next case starts on a whole cluster.

`run_case` starts a pipeline (fresh topics, free ports), sends steady traffic (`traffic.py`), breaks
the cluster, stops the traffic, and accounts for every accepted request (`account.py`): the
figures are in `CaseReport`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from inferq.clock import wall_ms
from inferq.messaging.admin import create_topics
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.tiers import Tier
from inferq.tools.broker.broker import pick_free_ports
from inferq.tools.broker.cluster import LocalCluster
from inferq.tools.chaos.account import Account, account
from inferq.tools.chaos.figures import Recovery, Refusals, recovery, refusals
from inferq.tools.chaos.traffic import Traffic
from inferq.tools.stack.pipeline import Pipeline, PipelinePorts

Log = Callable[[str], None]
REPLICATED_TIMEOUT_S = 120.0
OFFSETS_TOPIC = "__consumer_offsets"


class Fault(StrEnum):
    LEADER_KILL = "leader-kill"
    CONTROLLER_KILL = "controller-kill"
    ROLLING_RESTART = "rolling-restart"


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """One node taken down: how, when (wall ms and monotonic), and when it answered again."""

    what: str
    node: int
    at_ms: int
    back_ms: int
    replicated_ms: int


@dataclass(frozen=True, slots=True)
class CaseReport:
    fault: Fault
    events: list[FaultEvent]
    account: Account
    refusals: Refusals
    recoveries: list[Recovery]
    submitted: int
    services_alive: bool
    exit_codes: dict[str, int | None]
    seconds: float

    @property
    def lost(self) -> int:
        return len(self.account.lost)

    @property
    def recovered_s(self) -> float | None:
        """The slowest recovery of the case's faults (None: one did not recover in its horizon)."""
        values = [r.recovered_s for r in self.recoveries]
        return None if any(v is None for v in values) else max((v or 0.0) for v in values)


@dataclass
class CaseSpec:
    warmup_s: float = 10.0
    down_s: float = 15.0
    after_s: float = 10.0
    threads: int = 6
    interval_s: float = 0.2
    dispatchers: int = 2
    settle_timeout_s: float = 120.0
    extra_env: dict[str, str] = field(default_factory=dict)


def _wait(seconds: float) -> None:
    # The traffic runs in its own threads; this thread only has to let time pass, bounded.
    time.sleep(max(0.0, seconds))


def _wait_replicated(cluster: LocalCluster, topics: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not cluster.fully_replicated(topics):
        if time.monotonic() > deadline:
            raise TimeoutError(f"partitions of {topics} not fully replicated within {timeout_s:.0f} s")
        time.sleep(0.5)


def _take_down(
    cluster: LocalCluster, node: int, *, kill: bool, down_s: float, topics: list[str], log: Log
) -> FaultEvent:
    what = "SIGKILL" if kill else "restart"
    at_ms = wall_ms()
    if kill:
        cluster.kill_node(node)
    else:
        cluster.stop_node(node)
    log(f"  node {node}: {what}")
    _wait(down_s)
    cluster.start_node(node)
    back_ms = wall_ms()
    _wait_replicated(cluster, topics, REPLICATED_TIMEOUT_S)
    replicated_ms = wall_ms()
    log(
        f"  node {node}: back after {(back_ms - at_ms) / 1000:.1f} s, fully replicated after "
        f"{(replicated_ms - at_ms) / 1000:.1f} s"
    )
    return FaultEvent(what, node, at_ms, back_ms, replicated_ms)


def inject(
    cluster: LocalCluster, fault: Fault, request_topic: str, *, down_s: float, topics: list[str], log: Log
) -> list[FaultEvent]:
    if fault is Fault.LEADER_KILL:
        node = cluster.leader_of(request_topic, 0)
        log(f"  {request_topic}[0] is led by node {node}")
        return [_take_down(cluster, node, kill=True, down_s=down_s, topics=topics, log=log)]
    if fault is Fault.CONTROLLER_KILL:
        node = cluster.active_controller()
        log(f"  the active controller is node {node}")
        return [_take_down(cluster, node, kill=True, down_s=down_s, topics=topics, log=log)]
    # A rolling restart: each node down only as long as a clean stop and start take.
    return [
        _take_down(cluster, node, kill=False, down_s=0.0, topics=topics, log=log)
        for node in range(1, len(cluster.nodes) + 1)
    ]


def new_pipeline(cluster: LocalCluster, work_dir: Path, spec: CaseSpec) -> Pipeline:
    prefix = f"cc{uuid.uuid4().hex[:10]}"
    create_topics(KafkaSettings(bootstrap_servers=cluster.bootstrap, topic_prefix=prefix))
    ingest, results, dispatcher, backend = pick_free_ports(4)
    budget = 10
    return Pipeline(
        bootstrap=cluster.bootstrap,
        work_dir=work_dir,
        ports=PipelinePorts(ingest=ingest, results=results, dispatcher=dispatcher, backend=backend),
        topic_prefix=prefix,
        budget=budget,
        # Ten times the real API's speed; room for every dispatcher's whole budget (local coordination).
        backend_args=["--speed", "10", "--limit", str(budget * spec.dispatchers)],
        extra_env={
            # Admission is not what this is about: a 429 would only shrink what is owed.
            "INFERQ_INGEST_ADMISSION_ENABLED": "false",
            "INFERQ_DISPATCHER_SCHEDULE_PIN": "normal",
            "INFERQ_DISPATCHER_ADAPTIVE": "false",
            **spec.extra_env,
        },
    )


def run_case(
    cluster: LocalCluster, fault: Fault, work_dir: Path, spec: CaseSpec, log: Log = print
) -> CaseReport:
    """One fault under traffic, on a fresh pipeline; the pipeline is stopped on the way out."""
    started = time.monotonic()
    stack = new_pipeline(cluster, work_dir, spec)
    names = KafkaSettings(topic_prefix=stack.topic_prefix).topics
    topics = [*names.all_requests, names.retry, names.results, OFFSETS_TOPIC]
    try:
        stack.start(dispatchers=spec.dispatchers)
        log(f"[{fault}] pipeline {stack.topic_prefix} up; traffic for {spec.warmup_s:.0f} s first")
        with Traffic(
            stack.ingest_url, stack.topic_prefix, threads=spec.threads, interval_s=spec.interval_s
        ) as traffic:
            _wait(spec.warmup_s)
            events = inject(
                cluster, fault, names.requests(Tier.HIGH), down_s=spec.down_s, topics=topics, log=log
            )
            _wait(spec.after_s)
        stopped_ms = wall_ms()
        alive = all(proc.alive() for proc in stack.processes)
        answers = traffic.answers()
        accepted = traffic.accepted()
        counted = account(
            results_url=stack.results_url,
            kafka=KafkaSettings(bootstrap_servers=cluster.bootstrap, topic_prefix=stack.topic_prefix),
            run_id=stack.topic_prefix,
            db_path=work_dir / "results.db",
            accepted=accepted,
            timeout_s=spec.settle_timeout_s,
        )
    finally:
        codes = stack.stop()
    # Each fault's horizon: the next fault, or the end of the traffic (after it the rate falls anyway).
    ends = [e.at_ms for e in events[1:]] + [stopped_ms]
    recoveries = [
        recovery(counted.completions_ms, event.at_ms, max(end, event.at_ms))
        for event, end in zip(events, ends, strict=True)
    ]
    report = CaseReport(
        fault=fault,
        events=events,
        account=counted,
        refusals=refusals(answers),
        recoveries=recoveries,
        submitted=len(answers),
        services_alive=alive,
        exit_codes=codes,
        seconds=time.monotonic() - started,
    )
    log(summary(report))
    return report


def summary(report: CaseReport) -> str:
    a, r = report.account, report.refusals
    recovered = "-" if report.recovered_s is None else f"{report.recovered_s:.1f} s"
    gaps = ", ".join(f"{x.longest_gap_s:.1f}" for x in report.recoveries)
    return (
        f"[{report.fault}] submitted {report.submitted}, accepted {a.accepted}, lost {len(a.lost)}, "
        f"caller-visible duplicates {a.caller_duplicates} (absorbed by the store {a.absorbed}); "
        f"refused {r.by_status or 0}, longest run {r.longest_run} ({r.longest_run_s:.1f} s); "
        f"throughput recovered after {recovered} (longest gap without a completion: {gaps} s); "
        f"outcomes {a.statuses}; services alive {report.services_alive}; {report.seconds:.0f} s"
    )
