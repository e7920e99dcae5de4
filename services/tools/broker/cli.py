"""``inferq broker start|stop|status|env``: manage the project's local Kafka broker from the shell.

``start --nodes 3`` starts a three-node KRaft cluster in --home (ports chosen at its first start
and remembered there; see `inferq.tools.broker.cluster`); ``stop`` and ``status`` then cover every
node. ``start --security sasl_ssl`` starts a secured broker (SASL_SSL with SCRAM users, mutual TLS, ACLs
enforced; see `inferq.tools.broker.security`) and prints how clients connect; ``env --user <name>``
prints that user's ``INFERQ_KAFKA_*`` settings as shell exports (passwords included: for ``eval``,
not for a log).

Exit codes: 0 success (``status``: running), 1 error, 2 bad option/environment, 3 ``status``: not running.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from inferq.messaging.security import SaslMechanism, SecurityProtocol
from inferq.tools.broker.broker import (
    DEFAULT_CONTROLLER_PORT,
    DEFAULT_PORT,
    DEFAULT_SSL_PORT,
    BrokerConfig,
    LocalBroker,
    recorded_ports,
    recorded_security,
)
from inferq.tools.broker.cluster import MAX_NODES, ClusterLayout, LocalCluster
from inferq.tools.broker.errors import LocalBrokerError
from inferq.tools.broker.jars import STATE_DIR, ensure_jars
from inferq.tools.broker.security import USERS, BrokerSecurity, client_env
from inferq.tools.paths import find_project_root
from inferq.tools.servercli import EXIT_OK, EXIT_USAGE, ServerCommands, UsageError, port_from_env

PORT_ENV = "INFERQ_BROKER_PORT"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``broker`` command (``start``, ``stop``, ``status``) to a top-level subparsers object.

    Each leaf parser sets ``func``: a callable taking the parsed Namespace and returning the exit code.
    """
    broker = subparsers.add_parser(
        "broker",
        help="run the local Apache Kafka broker (KRaft, one node or a cluster, no Docker)",
        description="Run the real Apache Kafka broker locally from Maven jars (Java 17+ and Maven needed).",
    )
    commands = broker.add_subparsers(
        dest="broker_command", metavar="{start,stop,status,env,jars}", required=True
    )

    start = commands.add_parser("start", help="start the broker (idempotent) and wait until it answers")
    _add_common(start)
    start.add_argument("--heap", default="1g", help="JVM max heap, e.g. 512m or 1g (default: %(default)s)")
    start.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for readiness (default: %(default)s)"
    )
    start.add_argument(
        "--security",
        choices=[s.value for s in BrokerSecurity],
        default=None,
        help="plaintext, or sasl_ssl: SCRAM over TLS on --port, mutual TLS on --ssl-port, ACLs enforced "
        "(default: the last start's in --home, else plaintext)",
    )
    start.add_argument(
        "--nodes",
        type=int,
        default=None,
        help=f"1 (one broker) or 2-{MAX_NODES}: a cluster of combined broker+controller nodes, client "
        "ports from --port on (else free ones), remembered in --home (default: the home's, else 1)",
    )
    start.set_defaults(func=_cmd_start)

    stop = commands.add_parser(
        "stop", help="stop the broker (every node of a cluster): SIGTERM, then SIGKILL after --timeout"
    )
    _add_common(stop)
    stop.add_argument(
        "--timeout", type=float, default=30.0, help="seconds before SIGKILL (default: %(default)s)"
    )
    stop.set_defaults(func=_cmd_stop)

    status = commands.add_parser(
        "status", help="show whether the broker (every node of a cluster) runs (exit 3 when not)"
    )
    _add_common(status)
    status.set_defaults(func=_cmd_status)

    env = commands.add_parser(
        "env", help="print a user's client settings of a secured broker as shell exports (with password)"
    )
    _add_common(env)
    env.add_argument("--user", choices=USERS, required=True, help="whose settings")
    env.add_argument(
        "--listener",
        choices=["sasl_ssl", "ssl"],
        default="sasl_ssl",
        help="sasl_ssl: SCRAM user and password; ssl: the user's client certificate (default: %(default)s)",
    )
    env.add_argument(
        "--mechanism",
        choices=[m.value for m in SaslMechanism],
        default=SaslMechanism.SCRAM_SHA_512.value,
        help="SCRAM mechanism on the sasl_ssl listener (default: %(default)s)",
    )
    env.set_defaults(func=_cmd_env)

    jars = commands.add_parser("jars", help="fetch the broker's jars from Maven Central (once; cached)")
    jars.set_defaults(func=_cmd_jars)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help=(
            f"client (PLAINTEXT) port; default ${PORT_ENV}, else the last start's in --home, "
            f"else {DEFAULT_PORT}"
        ),
    )
    parser.add_argument(
        "--controller-port",
        type=int,
        default=None,
        help=f"KRaft controller port (default: the last start's in --home, else {DEFAULT_CONTROLLER_PORT})",
    )
    parser.add_argument(
        "--ssl-port",
        type=int,
        default=None,
        help=f"mutual-TLS port of a secured broker (default: the last start's, else {DEFAULT_SSL_PORT})",
    )
    parser.add_argument(
        "--home",
        type=Path,
        default=None,
        help=f"broker home (data, logs, pid file); default: <project root>/{STATE_DIR}",
    )


def _home(args: argparse.Namespace) -> tuple[Path, Path]:
    """(project root, broker home) of the command."""
    try:
        project_root = find_project_root(Path.cwd())
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from exc
    return project_root, (args.home or project_root / STATE_DIR).resolve()


def _cluster_from_args(args: argparse.Namespace) -> LocalCluster | None:
    """The cluster the command is about: asked for with --nodes >= 2, or remembered in --home; None
    for a single broker (today's behaviour, untouched)."""
    project_root, home = _home(args)
    nodes: int | None = getattr(args, "nodes", None)
    if nodes is not None and not 1 <= nodes <= MAX_NODES:
        raise UsageError(f"--nodes must be 1 to {MAX_NODES}, got {nodes}")
    remembered = ClusterLayout.read(home)
    if remembered is None and (nodes is None or nodes == 1):
        return None
    if nodes == 1:
        raise UsageError(
            f"{home} holds a {remembered.nodes if remembered else 0}-node cluster; use another --home"
        )
    if getattr(args, "security", None) not in (None, BrokerSecurity.PLAINTEXT.value):
        raise UsageError("a local cluster is plaintext only; --security sasl_ssl runs one broker")
    if args.controller_port or args.ssl_port:
        raise UsageError("a cluster chooses its controller ports itself; give --port only")
    first_port: int | None = args.port or port_from_env(PORT_ENV)
    if first_port is not None and not 0 < first_port < 65536 - MAX_NODES:
        raise UsageError(f"port out of range: {first_port}")
    try:
        return LocalCluster.open(
            home,
            nodes=nodes,
            first_port=first_port,
            heap=getattr(args, "heap", "1g"),
            project_root=project_root,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _broker_from_args(args: argparse.Namespace, *, heap: str = "1g") -> LocalBroker:
    project_root, home = _home(args)
    # For stop/status (and an idempotent start) the ports of the last start are the truth, not defaults.
    recorded = recorded_ports(home)
    port: int | None = args.port or port_from_env(PORT_ENV)
    if port is None:
        port = recorded[0] if recorded else DEFAULT_PORT
    cport: int = args.controller_port or (recorded[1] if recorded else DEFAULT_CONTROLLER_PORT)
    recorded_mode, recorded_ssl_port = recorded_security(home)
    chosen = getattr(args, "security", None)
    security = BrokerSecurity(chosen) if chosen else recorded_mode
    ssl_port: int = args.ssl_port or recorded_ssl_port or DEFAULT_SSL_PORT
    for value in (port, cport, ssl_port):
        if not 0 < value < 65536:
            raise UsageError(f"port out of range: {value}")
    return LocalBroker(
        BrokerConfig(
            home=home,
            port=port,
            controller_port=cport,
            heap=heap,
            project_root=project_root,
            security=security,
            ssl_port=ssl_port,
        )
    )


def _build(ns: argparse.Namespace) -> LocalBroker:
    return _broker_from_args(ns, heap=getattr(ns, "heap", "1g"))


COMMANDS = ServerCommands[LocalBroker](
    prog="inferq broker",
    label="Kafka broker",
    errors=LocalBrokerError,
    build=_build,
    address=lambda broker: broker.bootstrap,
    log_path=lambda broker: broker.config.server_log,
)


def _cluster(ns: argparse.Namespace) -> LocalCluster:
    cluster = _cluster_from_args(ns)
    if cluster is None:  # only reached through a command that checked first
        raise UsageError("no cluster here")
    return cluster


CLUSTER_COMMANDS = ServerCommands[LocalCluster](
    prog="inferq broker",
    label="Kafka cluster",
    errors=LocalBrokerError,
    build=_cluster,
    address=lambda cluster: cluster.bootstrap,
    log_path=lambda cluster: cluster.home / "node-*" / "logs" / "server.log",
)


def _is_cluster(args: argparse.Namespace) -> bool | None:
    """Whether the command is about a cluster; None after printing a usage error."""
    try:
        return _cluster_from_args(args) is not None
    except (UsageError, LocalBrokerError) as exc:
        print(f"inferq broker: {exc}", file=sys.stderr)
        return None


def _print_nodes(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    for node in cluster.status().nodes:
        config = cluster.node(node.node_id).config
        state = f"pid {node.status.pid}" if node.status.running else "not running"
        print(
            f"  node {node.node_id}: {config.bootstrap} (controller {config.controller_port}), {state}, "
            f"home {config.home}"
        )
    return EXIT_OK


def _cmd_stop(args: argparse.Namespace) -> int:
    cluster = _is_cluster(args)
    if cluster is None:
        return EXIT_USAGE
    return CLUSTER_COMMANDS.stop(args) if cluster else COMMANDS.stop(args)


def _cmd_status(args: argparse.Namespace) -> int:
    cluster = _is_cluster(args)
    if cluster is None:
        return EXIT_USAGE
    if not cluster:
        return COMMANDS.status(args)
    code = CLUSTER_COMMANDS.status(args)
    CLUSTER_COMMANDS.run(_print_nodes, args)
    return code


def _cmd_start(args: argparse.Namespace) -> int:
    cluster = _is_cluster(args)
    if cluster is None:
        return EXIT_USAGE
    if cluster:
        code = CLUSTER_COMMANDS.start(args)
        if code != EXIT_OK:
            return code
        CLUSTER_COMMANDS.run(_print_nodes, args)
        print(
            f"clients connect with KAFKA_BOOTSTRAP_SERVERS={_cluster(args).bootstrap} (PLAINTEXT); "
            "`inferq topics create` gives each topic replication factor 3 and min.insync.replicas=2"
        )
        return EXIT_OK
    code = COMMANDS.start(args)
    if code != EXIT_OK:
        return code
    return COMMANDS.run(_print_client_settings, args)


def _print_client_settings(args: argparse.Namespace) -> int:
    broker = _build(args)
    material = broker.security_material
    if material is None:
        print(f"clients connect with KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap} (PLAINTEXT)")
        return EXIT_OK
    cfg = broker.config
    print(
        f"secured: SASL_SSL (SCRAM-SHA-512, SCRAM-SHA-256) on {cfg.bootstrap}, mutual TLS on "
        f"127.0.0.1:{cfg.ssl_port}; ACLs enforced, nothing allowed without one\n"
        f"  INFERQ_KAFKA_BOOTSTRAP_SERVERS={cfg.bootstrap}\n"
        f"  INFERQ_KAFKA_SECURITY_PROTOCOL=SASL_SSL\n"
        f"  INFERQ_KAFKA_SASL_MECHANISM=SCRAM-SHA-512\n"
        f"  INFERQ_KAFKA_SSL_CA_FILE={material.ca_file}\n"
        f"  INFERQ_KAFKA_SASL_USERNAME=one of {', '.join(USERS)} (admin is a super user)\n"
        f"passwords: {material.folder / 'credentials.json'} (mode 0600); one user's settings as exports:\n"
        f'  eval "$(inferq broker env --home {cfg.home} --user ingest)"\n'
        f"then, as admin: inferq topics create && inferq acls apply"
    )
    return EXIT_OK


def _cmd_env(args: argparse.Namespace) -> int:
    def action(ns: argparse.Namespace) -> int:
        broker = _build(ns)
        if broker.security_material is None:
            raise UsageError(
                f"the broker of {broker.config.home} is not secured (start it with --security sasl_ssl)"
            )
        protocol = SecurityProtocol.SSL if ns.listener == "ssl" else SecurityProtocol.SASL_SSL
        settings = broker.client_settings(ns.user, protocol=protocol, mechanism=SaslMechanism(ns.mechanism))
        exports = {
            "INFERQ_KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            **client_env(settings.security),
        }
        for name, value in exports.items():
            print(f"export {name}={shlex.quote(value)}")
        return EXIT_OK

    return COMMANDS.run(action, args)


def _cmd_jars(args: argparse.Namespace) -> int:
    def action(_: argparse.Namespace) -> int:
        print(f"Kafka jars ready in {ensure_jars(find_project_root())}")
        return EXIT_OK

    return COMMANDS.run(action, args)
