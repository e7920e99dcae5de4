"""`inferq bench scheduling|fairness|memory|latency|delivery|throughput|replay|cluster-chaos|takeover|
tokens`: benchmarks that write results to files (bench-results/); `recorder`, `bareloop` and
`probe-dispatcher` are processes those benchmarks start."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict, TypeVar

DEFAULT_OUT = Path("bench-results")
DEFAULT_HOME = Path(".inferq/bench")
T = TypeVar("T")


# An option: its flag, its type (bool: a switch; None: a string; a dict: add_argument's own
# arguments), its default, its help, and optionally the name it is parsed to: the field of the
# bench's spec (or the keyword of its run) it sets. COMMON marks where --out and --home go (at the
# end if absent).
Option = tuple[str, Any, Any, str] | tuple[str, Any, Any, str, str]
COMMON = None


def _bench(
    kinds: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    text: str,
    func: Callable[[argparse.Namespace], int],
    *options: Option | None,
) -> argparse.ArgumentParser:
    """One `inferq bench <name>` with its options and --out and --home."""
    parser = kinds.add_parser(name, help=text)
    for option in options if COMMON in options else (*options, COMMON):
        if option is None:
            _common(parser)
            continue
        flag, kind, default, help_, *dest = option
        # Parsed to the spec's name, shown by the flag's (as argparse would show it without `dest`).
        named: dict[str, Any] = (
            {"dest": dest[0], "metavar": flag[2:].upper().replace("-", "_")} if dest else {}
        )
        if kind is bool:
            parser.add_argument(flag, action="store_true", help=help_, **named)
        elif isinstance(kind, dict):
            parser.add_argument(flag, help=help_, **(named | kind))
        else:
            parser.add_argument(flag, type=kind, default=default, help=help_, **named)
    parser.set_defaults(func=func)
    return parser


def _trace_options(*, compress: float, duration_s: float, seed: int, budget: int) -> list[Option | None]:
    """The options of a bench that replays a compressed trace through the real pipeline."""
    return [
        ("--compress", float, compress, f"time compression S (default {compress:g})"),
        (
            "--duration",
            float,
            duration_s,
            f"wall-clock seconds of arrivals (default {duration_s:g})",
            "duration_s",
        ),
        ("--seed", int, seed, f"seed of the arrival trace (default {seed})"),
        ("--budget", int, budget, f"the backend's concurrency limit B (default {budget})"),
        ("--timeout", float, None, "bound of the wait for every outcome, per run"),
        COMMON,
    ]


def _spec_options(spec: Any) -> list[Option]:
    """The options a spec's fields declare (`specs.option`), in field order; defaults from `spec`."""
    options: list[Option] = []
    for f in dataclasses.fields(spec):
        if "option" not in f.metadata:
            continue
        flag, help_, parsed = f.metadata["option"]
        default = getattr(spec, f.name)
        flag = flag or "--" + f.name.replace("_", "-")
        kind = parsed or (bool if isinstance(default, bool) else type(default))
        named = flag[2:].replace("-", "_") != f.name and "action" not in parsed
        option = (flag, kind, default, help_.format(default=default))
        options.append((*option, f.name) if named else option)
    return options


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("bench", help="benchmarks: results go to bench-results/")
    kinds = parser.add_subparsers(dest="bench", required=True)

    from inferq.tools.bench.scenarios import FairnessSpec, TraceSpec
    from inferq.tools.bench.specs import (
        SCHEDULING_RUNS,
        DeliverySpec,
        LatencySpec,
        TakeoverSpec,
        ThroughputSpec,
    )
    from inferq.tools.chaos.cluster_faults import CaseSpec, Fault

    d = TraceSpec.from_file()
    _bench(
        kinds,
        "scheduling",
        "every policy on the same time-compressed evening peak, against the real pipeline",
        _scheduling,
        *_trace_options(compress=d.compress, duration_s=d.duration_s, seed=d.seed, budget=10),
        ("--briefs", int, d.briefs, f"morning briefs dumped at the start (default {d.briefs})"),
        (
            "--surge",
            float,
            d.surge,
            "an analysis surge: MEDIUM at this many times its rate from --surge-at, for --surge-seconds "
            f"(default {d.surge:g}; 1: none)",
        ),
        (
            "--surge-at",
            float,
            d.surge_at,
            f"when the surge starts, a fraction of the trace (default {d.surge_at:g})",
            "surge_at",
        ),
        (
            "--surge-seconds",
            float,
            d.surge_s,
            f"wall-clock length of the surge (default {d.surge_s:g})",
            "surge_s",
        ),
        (
            "--runs",
            None,
            ",".join(SCHEDULING_RUNS),
            f"comma-separated runs, in order (default: {','.join(SCHEDULING_RUNS)})",
        ),
    )
    _bench(
        kinds,
        "memory",
        "dispatcher RSS with a million LOW requests waiting in Kafka",
        _memory,
        ("--records", int, 1_000_000, "LOW requests produced (default 1,000,000)"),
        ("--seconds", float, 30.0, "how long each dispatcher is sampled (default 30)"),
        ("--interval", float, 0.5, "seconds between RSS samples (default 0.5)", "interval_s"),
        ("--budget", int, 2, "the dispatcher's budget (default 2)"),
        ("--speed", float, 0.5, "simulated backend speed (default 0.5: slow)"),
    )
    f = FairnessSpec()
    _bench(
        kinds,
        "fairness",
        "a steady tenant alone, then with a tenant flooding HIGH and LOW, against the real pipeline",
        _fairness,
        *_trace_options(compress=f.compress, duration_s=f.duration_s, seed=f.seed, budget=f.budget),
        (
            "--flood",
            float,
            f.flood,
            f"A sends this many times its weighted share of HIGH's and LOW's peak floors ({f.flood:g})",
        ),
        ("--weight-a", float, f.weight_a, f"A's weight (default {f.weight_a:g})"),
        ("--weight-b", float, f.weight_b, f"B's weight (default {f.weight_b:g})"),
        (
            "--cap-a",
            {"type": int, "default": None, "metavar": "N"},
            None,
            "A's max_concurrency (default none: the budget)",
            "a_max_concurrency",
        ),
    )
    _bench(
        kinds,
        "latency",
        "latency added between ingest's 202 and the backend, with free slots, at 200/s",
        _latency,
        *_spec_options(LatencySpec()),
    )
    _bench(
        kinds,
        "delivery",
        "chat completions direct vs through inferq: added latency and first-chunk delay",
        _delivery,
        COMMON,
        *_spec_options(DeliverySpec()),
    )
    _bench(
        kinds,
        "throughput",
        "requests/s of one and two dispatchers on a zero-latency backend, vs a bare loop",
        _throughput,
        *_spec_options(ThroughputSpec()),
    )
    _bench(
        kinds,
        "replay",
        "records/s of `inferq replay --speed max` (target >= 100,000/s)",
        _replay,
        ("--records", int, 200_000, "requests per replay (default 200,000)"),
        ("--runs", int, 3, "runs; the median is quoted (default 3)"),
    )
    c = CaseSpec()
    _bench(
        kinds,
        "cluster-chaos",
        "broker faults on a three-node cluster under traffic: lost, duplicates, 503s, recovery",
        _cluster_chaos,
        ("--runs", int, 3, "runs of each case; medians are quoted (default 3)"),
        ("--cases", None, ",".join(Fault), f"comma-separated, in order (default {','.join(Fault)})"),
        ("--warmup", float, c.warmup_s, f"seconds before the fault ({c.warmup_s:g})", "warmup_s"),
        ("--down", float, c.down_s, f"seconds a killed node stays down ({c.down_s:g})", "down_s"),
        ("--after", float, c.after_s, f"seconds of traffic after ({c.after_s:g})", "after_s"),
        ("--threads", int, c.threads, f"submitters ({c.threads})"),
        ("--interval", float, c.interval_s, f"each submitter's pause in s ({c.interval_s:g})", "interval_s"),
        ("--dispatchers", int, c.dispatchers, f"dispatchers ({c.dispatchers})"),
    )
    _bench(
        kinds,
        "takeover",
        "seconds until a SIGKILLed dispatcher's partitions are served again; rebalances of a frozen one",
        _takeover,
        *_spec_options(TakeoverSpec()),
    )
    _bench(
        kinds,
        "tokens",
        "tokens per minute achieved against a TPM-limited simulated backend, inferq and fifo",
        _tokens,
        ("--tpm", int, 6000, "the simulator's tokens per minute (default 6000)"),
        ("--minutes", float, 2.0, "minutes measured per policy (default 2)"),
    )
    _bench(
        kinds,
        "fallback",
        "the primary backend down for a period: failed, time to switch and back",
        _fallback,
        ("--warm", float, 15.0, "seconds before the outage (default 15)", "warm_s"),
        (
            "--outage",
            float,
            25.0,
            "seconds of the primary's outage (default 25: not a multiple of the breaker's 10 s pause)",
            "outage_s",
        ),
        ("--after", float, 30.0, "seconds after it (default 30)", "after_s"),
        ("--breaker-open", float, None, "INFERQ_DISPATCHER_BREAKER_OPEN_S (default its default)"),
    )
    _register_helpers(kinds)


def _tokens(args: argparse.Namespace) -> int:
    from inferq.tools.bench import tokens

    return tokens.run(**_where(args), tpm=args.tpm, minutes=args.minutes)


def _fallback(args: argparse.Namespace) -> int:
    from inferq.tools.bench import fallback

    breaker = {} if args.breaker_open is None else {"breaker_open_s": args.breaker_open}
    return fallback.run(
        **_where(args), warm_s=args.warm_s, outage_s=args.outage_s, after_s=args.after_s, breaker=breaker
    )


def _delivery(args: argparse.Namespace) -> int:
    from inferq.tools.bench import delivery
    from inferq.tools.bench.specs import DeliverySpec

    return delivery.run(_spec(DeliverySpec, args), **_where(args))


def _register_helpers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rec = kinds.add_parser(
        "recorder", help="(started by bench latency) backend recording each call's arrival"
    )
    rec.add_argument("--host", default="127.0.0.1")
    rec.add_argument("--port", type=int, required=True)
    rec.add_argument("--latency-ms", type=float, default=5.0, help="answer after this long (default 5)")
    rec.set_defaults(func=_recorder)

    probe = kinds.add_parser(
        "probe-dispatcher",
        help="(started by bench latency/throughput) the dispatcher, fetches timed or profiled",
    )
    probe.add_argument("--port", type=int, required=True, help="the dispatcher's metrics port")
    probe.add_argument("--fetch-log", type=Path, default=None, help="write fetch stamps here (JSON) at exit")
    probe.add_argument("--profile", type=Path, default=None, help="write cProfile stats here at exit")
    probe.set_defaults(func=_probe)

    bare = kinds.add_parser(
        "bareloop", help="(started by bench throughput) the bare-loop and backend baselines"
    )
    bare.add_argument("mode", choices=["loop", "blast"])
    bare.add_argument("--backend-url", required=True, help="OpenAI base URL, e.g. http://127.0.0.1:8780/v1")
    bare.add_argument("--concurrency", type=int, required=True)
    bare.add_argument("--count", type=int, required=True, help="results (loop) or calls (blast) to make")
    bare.add_argument("--summary", type=Path, required=True, help="write the JSON summary here")
    bare.add_argument("--timeout", type=float, default=120.0, help="bound of the whole run in seconds")
    bare.add_argument("--bootstrap", default="127.0.0.1:9092")
    bare.add_argument("--source-topic", default="")
    bare.add_argument("--result-topic", default="")
    bare.add_argument("--group", default="inferq-bareloop")
    bare.set_defaults(func=_bareloop)


class Where(TypedDict):
    """Where a bench writes its results (`out`) and keeps its broker and logs (`home`)."""

    out: Path
    home: Path


def _where(args: argparse.Namespace) -> Where:
    return {"out": args.out, "home": args.home.resolve()}


def _fields(spec_type: type, args: argparse.Namespace) -> dict[str, Any]:
    """The parsed options that are fields of `spec_type` (a dataclass), by name."""
    names = {f.name for f in dataclasses.fields(spec_type)}
    return {name: value for name, value in vars(args).items() if name in names}


def _spec(spec_type: type[T], args: argparse.Namespace, **parsed: Any) -> T:
    """`spec_type` from the options named as its fields; `parsed`: those the caller converted."""
    return spec_type(**(_fields(spec_type, args) | parsed))


def _listed(text: str, kind: Callable[[str], T]) -> list[T]:
    """A comma-separated option's items, each converted by `kind` (its ValueError goes through)."""
    return [kind(item.strip()) for item in text.split(",") if item.strip()]


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="results folder (default bench-results)"
    )
    parser.add_argument(
        "--home", type=Path, default=DEFAULT_HOME, help="broker data and service logs (default .inferq/bench)"
    )


def _scheduling(args: argparse.Namespace) -> int:
    # Imported here: `inferq --help` must not load the Kafka clients.
    from inferq.tools.bench import scheduling
    from inferq.tools.bench.scenarios import TraceSpec
    from inferq.tools.bench.scheduling_run import run_specs

    runs = _listed(args.runs, str)
    known = run_specs(args.budget)
    unknown = [r for r in runs if r not in known]
    if unknown or not runs:
        raise SystemExit(
            f"inferq bench scheduling: unknown run(s) {unknown or '(none)'}; choose from {', '.join(known)}"
        )
    spec = TraceSpec.from_file(**_fields(TraceSpec, args))
    return scheduling.run(spec, runs, budget=args.budget, timeout_s=args.timeout, **_where(args))


def _fairness(args: argparse.Namespace) -> int:
    from inferq.tools.bench import fairness
    from inferq.tools.bench.scenarios import FairnessSpec

    try:
        spec = _spec(FairnessSpec, args)
    except ValueError as exc:
        raise SystemExit(f"inferq bench fairness: {exc}") from exc
    return fairness.run(spec, timeout_s=args.timeout, **_where(args))


def _memory(args: argparse.Namespace) -> int:
    from inferq.tools.bench import memory

    chosen = {name: getattr(args, name) for name in ("budget", "speed", "seconds", "interval_s")}
    return memory.run(args.records, **chosen, **_where(args))


def _latency(args: argparse.Namespace) -> int:
    from inferq.tools.bench import latency
    from inferq.tools.bench.specs import LatencySpec

    return latency.run(_spec(LatencySpec, args), **_where(args))


def _throughput(args: argparse.Namespace) -> int:
    from inferq.tools.bench import throughput
    from inferq.tools.bench.specs import ThroughputSpec

    sizes = _listed(args.group_sizes, int)
    if not sizes or min(sizes) < 1:
        raise SystemExit("inferq bench throughput: --dispatchers takes group sizes such as 1,2")
    env = dict(item.split("=", 1) for item in args.dispatcher_env if "=" in item)
    if len(env) != len(args.dispatcher_env):
        raise SystemExit("inferq bench throughput: --dispatcher-env takes NAME=VALUE")
    spec = _spec(ThroughputSpec, args, group_sizes=tuple(sizes), dispatcher_env=env)
    return throughput.run(spec, **_where(args))


def _recorder(args: argparse.Namespace) -> int:
    from inferq.tools.bench import recorder

    return recorder.serve(args.host, args.port, args.latency_ms / 1000)


def _probe(args: argparse.Namespace) -> int:
    from inferq.tools.bench import probe

    return probe.run(args.port, fetch_log=args.fetch_log, profile=args.profile)


def _bareloop(args: argparse.Namespace) -> int:
    from inferq.tools.bench import bareloop

    return bareloop.run(args)


def _replay(args: argparse.Namespace) -> int:
    from inferq.tools.bench import replay

    return replay.run(args.records, runs=args.runs, **_where(args))


def _cluster_chaos(args: argparse.Namespace) -> int:
    from inferq.tools.bench import cluster_chaos
    from inferq.tools.chaos.cluster_faults import CaseSpec, Fault

    try:
        faults = _listed(args.cases, Fault)
    except ValueError as exc:
        raise SystemExit(f"inferq bench cluster-chaos: {exc}; choose from {', '.join(Fault)}") from exc
    if not faults or args.runs < 1:
        raise SystemExit("inferq bench cluster-chaos: at least one case and one run")
    return cluster_chaos.run(_spec(CaseSpec, args), faults, runs=args.runs, **_where(args))


def _takeover(args: argparse.Namespace) -> int:
    from inferq.tools.bench import takeover
    from inferq.tools.bench.specs import SessionSetting, TakeoverSpec

    try:
        settings = tuple(_listed(args.settings, SessionSetting.parse))
    except ValueError as exc:
        raise SystemExit(f"inferq bench takeover: {exc}") from exc
    if not settings or args.runs < 1:
        raise SystemExit("inferq bench takeover: at least one setting and one run")
    return takeover.run(_spec(TakeoverSpec, args, settings=settings), **_where(args))
