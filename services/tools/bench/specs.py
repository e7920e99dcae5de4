"""The options of the benches that run from a spec, each said once: a spec field made with `option`
carries its flag and help, `inferq bench <name>` derives its parser from the fields (`cli.py`), and
the bench reads the spec. Light on purpose: `inferq bench --help` imports it, not the benches."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The runs of `inferq bench scheduling`, in their default order (`scheduling_run.run_specs` says what
# each is).
SCHEDULING_RUNS = ("inferq", "inferq-lifted", "forecast", "static", "fifo", "preempt", "preempt-hosted")


def option(value: Any, help: str, *, flag: str = "", **argparse: Any) -> Any:
    """A spec field, default `value`, offered as an option: `flag` (default --the-field-name);
    `help`, whose `{default}` is the field's default; add_argument's own arguments when the option
    is parsed otherwise than the field's type (a switch that turns it off, a list typed as text)."""
    metadata = {"option": (flag, help, argparse)}
    if isinstance(value, dict):
        return field(default_factory=dict, metadata=metadata)
    return field(default=value, metadata=metadata)


@dataclass(frozen=True)
class LatencySpec:
    rate_per_s: float = option(200.0, "HIGH requests per second (default {default:g})", flag="--rate")
    duration_s: float = option(25.0, "measured seconds per run (default {default:g})", flag="--duration")
    warmup_s: float = option(3.0, "seconds sent first, not counted (default {default:g})", flag="--warmup")
    # Far above rate x latency (about 1-2 calls in flight): a request never waits for a token.
    budget: int = option(100, "the dispatcher's budget (default {default})")
    backend_latency_ms: float = option(5.0, "the recording backend's latency (default {default:g})")
    runs: int = option(3, "runs; medians are quoted (default {default})")
    probe: bool = option(
        True,
        "run the plain dispatcher: no fetch stamps, produce→dispatch reported as one step",
        flag="--no-probe",
        action="store_false",
        dest="probe",
    )


def rates_list(text: str) -> tuple[float, ...]:
    """``20,200``: calls per second, each rate a positive number."""
    try:
        rates = tuple(float(item) for item in text.split(",") if item.strip())
    except ValueError as exc:
        raise ValueError(f"rates are comma-separated numbers, e.g. 20,200; got {text!r}") from exc
    if not rates or min(rates) <= 0:
        raise ValueError(f"rates are positive numbers, e.g. 20,200; got {text!r}")
    return rates


@dataclass(frozen=True)
class DeliverySpec:
    # 20/s: the targets; 200/s: where the machine saturates (reported, no target).
    rates_per_s: tuple[float, ...] = option(
        (20.0, 200.0),
        "calls per second, comma-separated; each rate runs the four phases (default 20,200)",
        flag="--rates",
        type=rates_list,
        default=(20.0, 200.0),
    )
    runs: int = option(3, "runs of every rate; medians are quoted (default {default})")
    duration_s: float = option(20.0, "seconds counted per phase (default {default:g})", flag="--duration")
    warmup_s: float = option(3.0, "seconds sent first, not counted (default {default:g})", flag="--warmup")
    backend_latency_ms: float = option(100.0, "the simulator's latency (default {default:g})")
    # Far above rate x latency (20 calls in flight): a request never waits for a token.
    budget: int = 200
    # INFERQ_DISPATCHER_STREAM_CHUNK_LINGER_MS; None: the dispatcher's default.
    chunk_linger_ms: float | None = option(
        None, "INFERQ_DISPATCHER_STREAM_CHUNK_LINGER_MS (default: its own)", type=float, default=None
    )
    # A pause between the pipeline's start and the first phase: the services' and the broker's
    # start-up work (first fetches, metadata, the results consumer catching up) is not measured.
    settle_s: float = 10.0
    # Each phase's CPU window stays open this long after its last answer, so work that trails the
    # calls (the results service reading the last records) is counted; the direct phase's too.
    cpu_tail_s: float = 1.0
    # Before the first run, this long through inferq, sync then streamed, at the highest rate, not
    # measured: the broker's JVM compiles its hot paths on the first load it sees (in a first run
    # without it, the broker took 4-6 times its later CPU per call).
    prime_s: float = 5.0


@dataclass(frozen=True)
class ThroughputSpec:
    # 20,000 at today's ~250/s would take 80 s per dispatcher measurement: over the bench's time budget.
    records: int = option(5_000, "HIGH requests per measurement (default {default:,})")
    budget: int = option(200, "the group's budget (default {default})")
    runs: int = option(3, "runs; medians are quoted (default {default})")
    group_sizes: tuple[int, ...] = option(
        (1, 2), "group sizes to measure, comma-separated (default 1,2)", flag="--dispatchers", default="1,2"
    )
    profile: bool = option(
        False, "after the runs, one more single-dispatcher measurement under cProfile (not in the medians)"
    )
    # Extra dispatcher settings, to try a change without a rebuild.
    dispatcher_env: Mapping[str, str] = option(
        {},
        "a setting for every dispatcher, e.g. INFERQ_DISPATCHER_READAHEAD_PER_TIER=200; repeatable",
        action="append",
        default=[],
        metavar="NAME=VALUE",
    )
    cluster: bool = option(
        False, "on a three-node cluster (replication 3, min.insync.replicas=2) instead of one broker"
    )
    tracing: bool = option(
        True,
        "leave out the single dispatcher with tracing on (100%% sampled, OTLP to a local receiver)",
        flag="--no-tracing",
        action="store_false",
        dest="tracing",
    )

    @property
    def bound_s(self) -> float:
        """Bound of one measurement's wait: 100 requests/s would be a failure worth stopping for."""
        return max(60.0, self.records / 100)


@dataclass(frozen=True)
class SessionSetting:
    session_timeout_ms: int
    heartbeat_interval_ms: int

    @classmethod
    def parse(cls, text: str) -> SessionSetting:
        """``2000/500``: session timeout / heartbeat interval, in ms."""
        session, _, heartbeat = text.partition("/")
        try:
            return cls(int(session), int(heartbeat))
        except ValueError as exc:
            raise ValueError(
                f"a session setting is SESSION_MS/HEARTBEAT_MS, e.g. 2000/500; got {text!r}"
            ) from exc

    @property
    def label(self) -> str:
        return f"session {self.session_timeout_ms} ms, heartbeat {self.heartbeat_interval_ms} ms"

    def env(self) -> dict[str, str]:
        return {
            "INFERQ_DISPATCHER_SESSION_TIMEOUT_MS": str(self.session_timeout_ms),
            "INFERQ_DISPATCHER_HEARTBEAT_INTERVAL_MS": str(self.heartbeat_interval_ms),
        }


@dataclass(frozen=True)
class TakeoverSpec:
    runs: int = option(10, "runs per setting; medians quoted ({default})")
    settings: tuple[SessionSetting, ...] = option(
        (SessionSetting(2000, 500),),
        "comma-separated SESSION_MS/HEARTBEAT_MS pairs to measure, e.g. 2000/500,10000/3000 "
        "(default 2000/500, the dispatcher's own)",
        default="2000/500",
    )
    rate_per_s: float = option(150.0, "HIGH requests/s ({default:g})", flag="--rate")
    budget: int = 8
    backend_latency_ms: float = 20.0
    soak_s: float = option(12.0, "seconds both live ({default:g})", flag="--soak")
    pause_ms: int = option(1000, "the freeze during the soak, ms ({default})")
    after_s: float = option(8.0, "seconds after the kill ({default:g})", flag="--after")
    cluster: bool = option(False, "on a three-node cluster, not one broker")
    dispatcher_env: dict[str, str] = field(default_factory=dict)
