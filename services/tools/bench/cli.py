"""`inferq bench scheduling|fairness|memory|latency|delivery|throughput|replay|cluster-chaos|takeover|
tokens`: benchmarks that write results to files (bench-results/); `recorder`, `bareloop` and
`probe-dispatcher` are processes those benchmarks start."""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_OUT = Path("bench-results")
DEFAULT_HOME = Path(".inferq/bench")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("bench", help="benchmarks: results go to bench-results/")
    kinds = parser.add_subparsers(dest="bench", required=True)

    _register_scheduling(kinds)

    mem = kinds.add_parser("memory", help="dispatcher RSS with a million LOW requests waiting in Kafka")
    mem.add_argument(
        "--records", type=int, default=1_000_000, help="LOW requests produced (default 1,000,000)"
    )
    mem.add_argument(
        "--seconds", type=float, default=30.0, help="how long each dispatcher is sampled (default 30)"
    )
    mem.add_argument("--interval", type=float, default=0.5, help="seconds between RSS samples (default 0.5)")
    mem.add_argument("--budget", type=int, default=2, help="the dispatcher's budget (default 2)")
    mem.add_argument("--speed", type=float, default=0.5, help="simulated backend speed (default 0.5: slow)")
    _common(mem)
    mem.set_defaults(func=_memory)
    _register_fairness(kinds)
    _register_latency(kinds)
    _register_delivery(kinds)
    _register_throughput(kinds)
    _register_replay(kinds)
    _register_cluster_chaos(kinds)
    _register_takeover(kinds)
    _register_tokens(kinds)
    _register_fallback(kinds)
    _register_helpers(kinds)


def _register_tokens(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tok = kinds.add_parser(
        "tokens", help="tokens per minute achieved against a TPM-limited simulated backend, inferq and fifo"
    )
    tok.add_argument("--tpm", type=int, default=6000, help="the simulator's tokens per minute (default 6000)")
    tok.add_argument("--minutes", type=float, default=2.0, help="minutes measured per policy (default 2)")
    _common(tok)
    tok.set_defaults(func=_tokens)


def _tokens(args: argparse.Namespace) -> int:
    from inferq.tools.bench import tokens

    return tokens.run(out=args.out, home=args.home.resolve(), tpm=args.tpm, minutes=args.minutes)


def _register_fallback(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fb = kinds.add_parser(
        "fallback", help="the primary backend down for a period: failed, time to switch and back"
    )
    fb.add_argument("--warm", type=float, default=15.0, help="seconds before the outage (default 15)")
    fb.add_argument(
        "--outage",
        type=float,
        default=25.0,
        help="seconds of the primary's outage (default 25: not a multiple of the breaker's 10 s pause)",
    )
    fb.add_argument("--after", type=float, default=30.0, help="seconds after it (default 30)")
    fb.add_argument(
        "--breaker-open",
        type=float,
        default=None,
        help="INFERQ_DISPATCHER_BREAKER_OPEN_S (default its default)",
    )
    _common(fb)
    fb.set_defaults(func=_fallback)


def _fallback(args: argparse.Namespace) -> int:
    from inferq.tools.bench import fallback

    breaker = {} if args.breaker_open is None else {"breaker_open_s": args.breaker_open}
    return fallback.run(
        out=args.out,
        home=args.home.resolve(),
        warm_s=args.warm,
        outage_s=args.outage,
        after_s=args.after,
        breaker=breaker,
    )


def _trace_replay(
    parser: argparse.ArgumentParser, *, compress: float, duration_s: float, seed: int, budget: int
) -> None:
    """The arguments of a bench that replays a compressed trace through the real pipeline."""
    parser.add_argument(
        "--compress", type=float, default=compress, help=f"time compression S (default {compress:g})"
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=duration_s,
        help=f"wall-clock seconds of arrivals (default {duration_s:g})",
    )
    parser.add_argument("--seed", type=int, default=seed, help=f"seed of the arrival trace (default {seed})")
    parser.add_argument(
        "--budget", type=int, default=budget, help=f"the backend's concurrency limit B (default {budget})"
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="bound of the wait for every outcome, per run"
    )
    _common(parser)


def _register_scheduling(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from inferq.tools.bench.scheduling_trace import TraceSpec

    d = TraceSpec()
    sched = kinds.add_parser(
        "scheduling", help="every policy on the same time-compressed evening peak, against the real pipeline"
    )
    _trace_replay(sched, compress=d.compress, duration_s=d.duration_s, seed=d.seed, budget=10)
    sched.add_argument(
        "--briefs",
        type=int,
        default=d.briefs,
        help=f"morning briefs dumped at the start (default {d.briefs})",
    )
    sched.add_argument(
        "--runs",
        default="inferq,inferq-lifted,forecast,static,fifo",
        help="comma-separated runs, in order (default: inferq,inferq-lifted,forecast,static,fifo)",
    )
    sched.set_defaults(func=_scheduling)


def _register_fairness(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from inferq.tools.bench.fairness_trace import FairnessSpec

    d = FairnessSpec()
    fair = kinds.add_parser(
        "fairness",
        help="a steady tenant alone, then with a tenant flooding HIGH and LOW, against the real pipeline",
    )
    _trace_replay(fair, compress=d.compress, duration_s=d.duration_s, seed=d.seed, budget=d.budget)
    fair.add_argument(
        "--flood",
        type=float,
        default=d.flood,
        help=f"A sends this many times its weighted share of HIGH's and LOW's peak floors ({d.flood:g})",
    )
    fair.add_argument(
        "--weight-a", type=float, default=d.weight_a, help=f"A's weight (default {d.weight_a:g})"
    )
    fair.add_argument(
        "--weight-b", type=float, default=d.weight_b, help=f"B's weight (default {d.weight_b:g})"
    )
    fair.add_argument(
        "--cap-a", type=int, default=None, metavar="N", help="A's max_concurrency (default none: the budget)"
    )
    fair.set_defaults(func=_fairness)


def _register_latency(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    lat = kinds.add_parser(
        "latency", help="latency added between ingest's 202 and the backend, with free slots, at 200/s"
    )
    lat.add_argument("--rate", type=float, default=200.0, help="HIGH requests per second (default 200)")
    lat.add_argument("--duration", type=float, default=25.0, help="measured seconds per run (default 25)")
    lat.add_argument("--warmup", type=float, default=3.0, help="seconds sent first, not counted (default 3)")
    lat.add_argument("--budget", type=int, default=100, help="the dispatcher's budget (default 100)")
    lat.add_argument(
        "--backend-latency-ms", type=float, default=5.0, help="the recording backend's latency (default 5)"
    )
    lat.add_argument("--runs", type=int, default=3, help="runs; medians are quoted (default 3)")
    lat.add_argument(
        "--no-probe",
        action="store_true",
        help="run the plain dispatcher: no fetch stamps, produce→dispatch reported as one step",
    )
    _common(lat)
    lat.set_defaults(func=_latency)


def _register_delivery(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dlv = kinds.add_parser(
        "delivery", help="chat completions direct vs through inferq: added latency and first-chunk delay"
    )
    _common(dlv)
    dlv.add_argument("--rate", type=float, default=200.0, help="calls per second (default 200)")
    dlv.add_argument("--duration", type=float, default=20.0, help="seconds counted per phase (default 20)")
    dlv.add_argument("--warmup", type=float, default=3.0, help="seconds sent first, not counted (default 3)")
    dlv.add_argument(
        "--backend-latency-ms", type=float, default=100.0, help="the simulator's latency (default 100)"
    )
    dlv.add_argument(
        "--chunk-linger-ms",
        type=float,
        default=None,
        help="INFERQ_DISPATCHER_STREAM_CHUNK_LINGER_MS (default: its own)",
    )
    dlv.set_defaults(func=_delivery)


def _delivery(args: argparse.Namespace) -> int:
    from inferq.tools.bench import delivery

    spec = delivery.DeliverySpec(
        rate_per_s=args.rate,
        duration_s=args.duration,
        warmup_s=args.warmup,
        backend_latency_ms=args.backend_latency_ms,
        chunk_linger_ms=args.chunk_linger_ms,
    )
    return delivery.run(spec, out=args.out, home=args.home.resolve())


def _register_throughput(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    thr = kinds.add_parser(
        "throughput", help="requests/s of one and two dispatchers on a zero-latency backend, vs a bare loop"
    )
    thr.add_argument(
        "--records", type=int, default=5_000, help="HIGH requests per measurement (default 5,000)"
    )
    thr.add_argument("--budget", type=int, default=200, help="the group's budget (default 200)")
    thr.add_argument("--runs", type=int, default=3, help="runs; medians are quoted (default 3)")
    thr.add_argument(
        "--dispatchers", default="1,2", help="group sizes to measure, comma-separated (default 1,2)"
    )
    thr.add_argument(
        "--profile",
        action="store_true",
        help="after the runs, one more single-dispatcher measurement under cProfile (not in the medians)",
    )
    thr.add_argument(
        "--dispatcher-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for every dispatcher, e.g. INFERQ_DISPATCHER_READAHEAD_PER_TIER=200; repeatable",
    )
    thr.add_argument(
        "--cluster",
        action="store_true",
        help="on a three-node cluster (replication 3, min.insync.replicas=2) instead of one broker",
    )
    thr.add_argument(
        "--no-tracing",
        action="store_true",
        help="leave out the single dispatcher with tracing on (100%% sampled, OTLP to a local receiver)",
    )
    _common(thr)
    thr.set_defaults(func=_throughput)


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
    bare.add_argument(
        "--client", choices=["aiohttp", "httpx"], default="aiohttp", help="blast: the HTTP client (aiohttp)"
    )
    bare.add_argument("--bootstrap", default="127.0.0.1:9092")
    bare.add_argument("--source-topic", default="")
    bare.add_argument("--result-topic", default="")
    bare.add_argument("--group", default="inferq-bareloop")
    bare.set_defaults(func=_bareloop)


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
    from inferq.tools.bench.scheduling_run import run_specs
    from inferq.tools.bench.scheduling_trace import TraceSpec

    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = [r for r in runs if r not in run_specs(args.budget)]
    if unknown or not runs:
        known = ", ".join(run_specs(args.budget))
        raise SystemExit(
            f"inferq bench scheduling: unknown run(s) {unknown or '(none)'}; choose from {known}"
        )
    spec = TraceSpec(seed=args.seed, duration_s=args.duration, compress=args.compress, briefs=args.briefs)
    return scheduling.run(
        spec, runs, budget=args.budget, out=args.out, home=args.home.resolve(), timeout_s=args.timeout
    )


def _fairness(args: argparse.Namespace) -> int:
    from inferq.tools.bench import fairness
    from inferq.tools.bench.fairness_trace import FairnessSpec

    try:
        spec = FairnessSpec(
            seed=args.seed,
            duration_s=args.duration,
            compress=args.compress,
            budget=args.budget,
            flood=args.flood,
            weight_a=args.weight_a,
            weight_b=args.weight_b,
            a_max_concurrency=args.cap_a,
        )
    except ValueError as exc:
        raise SystemExit(f"inferq bench fairness: {exc}") from exc
    return fairness.run(spec, out=args.out, home=args.home.resolve(), timeout_s=args.timeout)


def _memory(args: argparse.Namespace) -> int:
    from inferq.tools.bench import memory

    return memory.run(
        args.records,
        budget=args.budget,
        speed=args.speed,
        seconds=args.seconds,
        interval_s=args.interval,
        out=args.out,
        home=args.home.resolve(),
    )


def _latency(args: argparse.Namespace) -> int:
    from inferq.tools.bench import latency

    spec = latency.LatencySpec(
        rate_per_s=args.rate,
        duration_s=args.duration,
        warmup_s=args.warmup,
        budget=args.budget,
        backend_latency_ms=args.backend_latency_ms,
        runs=args.runs,
        probe=not args.no_probe,
    )
    return latency.run(spec, out=args.out, home=args.home.resolve())


def _throughput(args: argparse.Namespace) -> int:
    from inferq.tools.bench import throughput

    sizes = [int(n) for n in args.dispatchers.split(",") if n.strip()]
    if not sizes or min(sizes) < 1:
        raise SystemExit("inferq bench throughput: --dispatchers takes group sizes such as 1,2")
    env = dict(item.split("=", 1) for item in args.dispatcher_env if "=" in item)
    if len(env) != len(args.dispatcher_env):
        raise SystemExit("inferq bench throughput: --dispatcher-env takes NAME=VALUE")
    spec = throughput.ThroughputSpec(
        records=args.records,
        budget=args.budget,
        runs=args.runs,
        group_sizes=tuple(sizes),
        profile=args.profile,
        dispatcher_env=env,
        tracing=not args.no_tracing,
        cluster=args.cluster,
    )
    return throughput.run(spec, out=args.out, home=args.home.resolve())


def _recorder(args: argparse.Namespace) -> int:
    from inferq.tools.bench import recorder

    return recorder.serve(args.host, args.port, args.latency_ms / 1000)


def _probe(args: argparse.Namespace) -> int:
    from inferq.tools.bench import probe

    return probe.run(args.port, fetch_log=args.fetch_log, profile=args.profile)


def _bareloop(args: argparse.Namespace) -> int:
    from inferq.tools.bench import bareloop

    return bareloop.run(args)


def _register_replay(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rep = kinds.add_parser("replay", help="records/s of `inferq replay --speed max` (target >= 100,000/s)")
    rep.add_argument("--records", type=int, default=200_000, help="requests per replay (default 200,000)")
    rep.add_argument("--runs", type=int, default=3, help="runs; the median is quoted (default 3)")
    _common(rep)
    rep.set_defaults(func=_replay)


def _replay(args: argparse.Namespace) -> int:
    from inferq.tools.bench import replay

    return replay.run(args.records, runs=args.runs, out=args.out, home=args.home.resolve())


def _register_cluster_chaos(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from inferq.tools.chaos.cluster_faults import CaseSpec, Fault

    d = CaseSpec()
    cc = kinds.add_parser(
        "cluster-chaos",
        help="broker faults on a three-node cluster under traffic: lost, duplicates, 503s, recovery",
    )
    cc.add_argument("--runs", type=int, default=3, help="runs of each case; medians are quoted (default 3)")
    cc.add_argument(
        "--cases",
        default=",".join(Fault),
        help=f"comma-separated, in order (default {','.join(Fault)})",
    )
    cc.add_argument(
        "--warmup", type=float, default=d.warmup_s, help=f"seconds before the fault ({d.warmup_s:g})"
    )
    cc.add_argument(
        "--down", type=float, default=d.down_s, help=f"seconds a killed node stays down ({d.down_s:g})"
    )
    cc.add_argument(
        "--after", type=float, default=d.after_s, help=f"seconds of traffic after ({d.after_s:g})"
    )
    cc.add_argument("--threads", type=int, default=d.threads, help=f"submitters ({d.threads})")
    cc.add_argument(
        "--interval", type=float, default=d.interval_s, help=f"each submitter's pause in s ({d.interval_s:g})"
    )
    cc.add_argument("--dispatchers", type=int, default=d.dispatchers, help=f"dispatchers ({d.dispatchers})")
    _common(cc)
    cc.set_defaults(func=_cluster_chaos)


def _cluster_chaos(args: argparse.Namespace) -> int:
    from inferq.tools.bench import cluster_chaos
    from inferq.tools.chaos.cluster_faults import CaseSpec, Fault

    try:
        faults = [Fault(name.strip()) for name in args.cases.split(",") if name.strip()]
    except ValueError as exc:
        raise SystemExit(f"inferq bench cluster-chaos: {exc}; choose from {', '.join(Fault)}") from exc
    if not faults or args.runs < 1:
        raise SystemExit("inferq bench cluster-chaos: at least one case and one run")
    spec = CaseSpec(
        warmup_s=args.warmup,
        down_s=args.down,
        after_s=args.after,
        threads=args.threads,
        interval_s=args.interval,
        dispatchers=args.dispatchers,
    )
    return cluster_chaos.run(spec, faults, runs=args.runs, out=args.out, home=args.home.resolve())


def _register_takeover(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from inferq.tools.bench.takeover import TakeoverSpec

    d = TakeoverSpec()
    tko = kinds.add_parser(
        "takeover",
        help="seconds until a SIGKILLed dispatcher's partitions are served again; rebalances of a frozen one",
    )
    tko.add_argument("--runs", type=int, default=d.runs, help=f"runs per setting; medians quoted ({d.runs})")
    tko.add_argument(
        "--settings",
        default="2000/500",
        help="comma-separated SESSION_MS/HEARTBEAT_MS pairs to measure, e.g. 2000/500,10000/3000 "
        "(default 2000/500, the dispatcher's own)",
    )
    tko.add_argument("--rate", type=float, default=d.rate_per_s, help=f"HIGH requests/s ({d.rate_per_s:g})")
    tko.add_argument("--soak", type=float, default=d.soak_s, help=f"seconds both live ({d.soak_s:g})")
    tko.add_argument(
        "--pause-ms", type=int, default=d.pause_ms, help=f"the freeze during the soak, ms ({d.pause_ms})"
    )
    tko.add_argument("--after", type=float, default=d.after_s, help=f"seconds after the kill ({d.after_s:g})")
    tko.add_argument("--cluster", action="store_true", help="on a three-node cluster, not one broker")
    _common(tko)
    tko.set_defaults(func=_takeover)


def _takeover(args: argparse.Namespace) -> int:
    from inferq.tools.bench import takeover

    try:
        settings = tuple(
            takeover.SessionSetting.parse(s.strip()) for s in args.settings.split(",") if s.strip()
        )
    except ValueError as exc:
        raise SystemExit(f"inferq bench takeover: {exc}") from exc
    if not settings or args.runs < 1:
        raise SystemExit("inferq bench takeover: at least one setting and one run")
    spec = takeover.TakeoverSpec(
        runs=args.runs,
        settings=settings,
        rate_per_s=args.rate,
        soak_s=args.soak,
        pause_ms=args.pause_ms,
        after_s=args.after,
        cluster=args.cluster,
    )
    return takeover.run(spec, out=args.out, home=args.home.resolve())
