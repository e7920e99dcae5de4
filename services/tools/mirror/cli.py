"""``inferq mirror start|stop|status``: MirrorMaker 2 between a central cluster and regional ones.

    inferq mirror start --central 127.0.0.1:9092 --region eu=127.0.0.1:9192
    inferq mirror status          # exit 0 running (and whether every flow's heartbeats arrive), 3 not
    inferq mirror stop

`start` writes the configuration (flows, replication policy: see `inferq.tools.mirror.config`),
fetches MirrorMaker's jars on first use and waits until a heartbeat has crossed every flow. Without
``--central``/``--region`` it reuses the last start's in ``--home``.

Exit codes: 0 success (``status``: running), 1 error, 2 bad option, 3 ``status``: not running.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from inferq.tools.broker.errors import LocalBrokerError
from inferq.tools.mirror.config import DEFAULT_FLUSH_INTERVAL_MS, DEFAULT_HEAP, MirrorConfig
from inferq.tools.mirror.mirror import DEFAULT_HOME, LocalMirrorMaker
from inferq.tools.paths import find_project_root
from inferq.tools.servercli import EXIT_NOT_RUNNING, EXIT_OK, ServerCommands, UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``mirror`` (``start``, ``stop``, ``status``) to a top-level subparsers object."""
    mirror = subparsers.add_parser(
        "mirror",
        help="run Apache Kafka's MirrorMaker 2 between the central cluster and regional ones",
        description="MirrorMaker 2 (dedicated mode) from Maven jars: each region's request topics to the "
        "central cluster, the central cluster's reply topic of each region back to it.",
    )
    commands = mirror.add_subparsers(dest="mirror_command", metavar="{start,stop,status}", required=True)

    start = commands.add_parser("start", help="start MirrorMaker and wait until every flow delivers")
    _add_home(start)
    start.add_argument("--central", help="the central cluster's bootstrap servers (host:port)")
    start.add_argument(
        "--region",
        action="append",
        default=[],
        metavar="NAME=HOST:PORT",
        help="a region and its cluster's bootstrap servers; repeatable",
    )
    start.add_argument(
        "--topic-prefix",
        default=None,
        help="the pipeline's topic prefix (default: $INFERQ_TOPIC_PREFIX, the last start's, or inferq)",
    )
    start.add_argument("--heap", default=None, help=f"JVM max heap (default: {DEFAULT_HEAP})")
    start.add_argument(
        "--flush-interval-ms",
        type=int,
        default=None,
        help=f"how often source offsets are committed: what a crash copies again "
        f"(default: {DEFAULT_FLUSH_INTERVAL_MS})",
    )
    start.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for readiness (default: %(default)s)"
    )
    start.set_defaults(func=_cmd_start)

    stop = commands.add_parser("stop", help="stop MirrorMaker: SIGTERM, then SIGKILL after --timeout")
    _add_home(stop)
    stop.add_argument(
        "--timeout", type=float, default=30.0, help="seconds before SIGKILL (default: %(default)s)"
    )
    stop.set_defaults(func=_cmd_stop)

    status = commands.add_parser(
        "status", help="whether MirrorMaker runs and its flows deliver (3: not running)"
    )
    _add_home(status)
    status.set_defaults(func=_cmd_status)


def _add_home(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--home",
        type=Path,
        default=None,
        help=f"mirror home (config, logs, pid); default <project>/{DEFAULT_HOME}",
    )


def parse_regions(values: list[str]) -> dict[str, str]:
    """``NAME=HOST:PORT`` options as a mapping; UsageError for a malformed or repeated one."""
    regions: dict[str, str] = {}
    for value in values:
        name, sep, bootstrap = value.partition("=")
        if not sep or not name or not bootstrap:
            raise UsageError(f"--region must be NAME=HOST:PORT, got {value!r}")
        if name in regions:
            raise UsageError(f"--region {name} given twice")
        regions[name] = bootstrap
    return regions


def config_from_args(args: argparse.Namespace) -> MirrorConfig:
    """The MirrorConfig the options ask for, the last start's filling what they leave out."""
    try:
        project_root = find_project_root(Path.cwd())
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from exc
    home = (args.home or project_root / DEFAULT_HOME).resolve()
    try:
        last = MirrorConfig.load(home, project_root)
    except (TypeError, ValueError) as exc:
        raise UsageError(
            f"{home / 'mirror.json'} is unreadable ({exc}); give --central and --region"
        ) from exc
    central = getattr(args, "central", None) or (last.central if last else None)
    regions = parse_regions(getattr(args, "region", [])) or (dict(last.regions) if last else {})
    if central is None or not regions:
        raise UsageError(f"no previous start in {home}: give --central HOST:PORT and --region NAME=HOST:PORT")
    prefix = (
        getattr(args, "topic_prefix", None)
        or os.environ.get("INFERQ_TOPIC_PREFIX")
        or (last.topic_prefix if last else "inferq")
    )
    try:
        return MirrorConfig(
            home=home,
            central=central,
            regions=regions,
            topic_prefix=prefix,
            heap=getattr(args, "heap", None) or (last.heap if last else DEFAULT_HEAP),
            flush_interval_ms=getattr(args, "flush_interval_ms", None)
            or (last.flush_interval_ms if last else DEFAULT_FLUSH_INTERVAL_MS),
            project_root=project_root,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _build(args: argparse.Namespace) -> LocalMirrorMaker:
    return LocalMirrorMaker(config_from_args(args))


def _flows(mirror: LocalMirrorMaker) -> str:
    return ", ".join(flow.name for flow in mirror.config.flows())


COMMANDS = ServerCommands[LocalMirrorMaker](
    prog="inferq mirror",
    label="MirrorMaker",
    errors=LocalBrokerError,  # MirrorError, and the jar fetch's ToolMissingError / JarFetchError
    build=_build,
    address=_flows,
    log_path=lambda mirror: mirror.config.log_file,
)


def _home(args: argparse.Namespace) -> Path | None:
    """`--home`, or the default one; None outside a project (the commands then say why)."""
    try:
        return (args.home or find_project_root(Path.cwd()) / DEFAULT_HOME).resolve()
    except FileNotFoundError:
        return None


def _never_started(args: argparse.Namespace) -> bool:
    home = _home(args)
    return home is not None and not (home / "mirror.json").exists()


def _cmd_start(args: argparse.Namespace) -> int:
    def refuse_other_flows(ns: argparse.Namespace) -> int:
        mirror = _build(ns)
        home = mirror.config.home
        last = MirrorConfig.load(home, mirror.config.project_root)
        if mirror.status().running and last is not None and last != mirror.config:
            raise UsageError(
                f"MirrorMaker already runs from {home} with other settings ({_flows(LocalMirrorMaker(last))} "
                f"of {last.central}); stop it first"
            )
        return EXIT_OK

    code = COMMANDS.run(refuse_other_flows, args)
    return code if code != EXIT_OK else COMMANDS.start(args)


def _cmd_stop(args: argparse.Namespace) -> int:
    if _never_started(args):
        print(f"MirrorMaker was not running (no start recorded in {_home(args)})")
        return EXIT_OK
    return COMMANDS.stop(args)


def _cmd_status(args: argparse.Namespace) -> int:
    if _never_started(args):
        print(f"MirrorMaker not running (no start recorded in {_home(args)})")
        return EXIT_NOT_RUNNING
    code = COMMANDS.status(args)
    if code != EXIT_OK:
        return code

    def flows(ns: argparse.Namespace) -> int:
        mirror = _build(ns)
        cfg = mirror.config
        for flow in cfg.flows():
            print(
                f"  {flow.name}: {', '.join(flow.topics)} ({cfg.bootstrap_of(flow.source)} -> "
                f"{cfg.bootstrap_of(flow.target)})"
            )
        return EXIT_OK

    return COMMANDS.run(flows, args)
