"""Run the real Apache Kafka 4.x broker (KRaft, one combined broker+controller node) from Maven jars.

Layout of a broker home folder::

    <home>/server.properties   rewritten on every start from BrokerConfig (mode 0600: it may hold
                               the secured broker's passwords)
    <home>/data/               log.dirs; formatted once, kept across restarts
    <home>/security/           a secured broker's CA, certificates and credentials (see security.py)
    <home>/logs/server.log     the broker's log4j2 log
    <home>/logs/broker.out     the JVM's stdout/stderr (crashes, early errors)
    <home>/broker.pid          pid of the running broker

The jars live in ``<project>/.inferq/kafka/jars`` (see ``jars.ensure_jars``), shared by every home.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.security import KafkaSecurity, SaslMechanism, SecurityProtocol
from inferq.tools.broker.errors import BrokerStartError, BrokerStopError, PortInUseError
from inferq.tools.broker.jars import ensure_jars, log4j_config_path, require_java
from inferq.tools.broker.security import ADMIN, BrokerSecurity, SecurityMaterial
from inferq.tools.paths import find_project_root
from inferq.tools.processes import (
    launched_process_exited,
    log_tails,
    read_pid,
    runs_command,
    signal_and_wait,
    spawn_detached,
    wait_pid_exit,
    wait_port_free,
)

HOST = "127.0.0.1"  # never "localhost": librdkafka tries ::1 first and stalls when nothing listens there
DEFAULT_PORT = 9092
DEFAULT_CONTROLLER_PORT = 9093
DEFAULT_SSL_PORT = 9094  # the mutual-TLS listener of a secured broker
_KILL_WAIT_S = 10.0
_PROBE_INTERVAL_S = 0.2
# How long a port held by something else may take to free before the start is refused
# (`processes.wait_port_free`: a client of the stopped broker may hold it a moment).
PORT_FREE_WAIT_S = 10.0

_SERVER_PROPERTIES = """\
# Written by inferq.tools.broker on every start; edits here are overwritten.
process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters}
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}
advertised.listeners=PLAINTEXT://{host}:{port}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data}
num.partitions={partitions}
offsets.topic.replication.factor={internal_rf}
offsets.topic.num.partitions=1
transaction.state.log.replication.factor={internal_rf}
transaction.state.log.min.isr={internal_min_isr}
share.coordinator.state.topic.replication.factor={internal_rf}
share.coordinator.state.topic.min.isr={internal_min_isr}
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
auto.create.topics.enable=false
log.cleaner.dedupe.buffer.size=16777216
"""


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Where and how one local broker runs.

    ``heap`` is the JVM's -Xmx (the initial heap is kept small so an idle broker stays light on a
    laptop). ``project_root`` locates ``infra/kafka`` (pom, log4j2 config) and the shared jar cache.
    With ``security=sasl_ssl`` the client port is a SASL_SSL listener and ``ssl_port`` a mutual-TLS
    one (see `inferq.tools.broker.security`); otherwise ``ssl_port`` is unused.
    """

    home: Path
    port: int = DEFAULT_PORT
    controller_port: int = DEFAULT_CONTROLLER_PORT
    heap: str = "1g"
    num_partitions: int = 1
    project_root: Path = field(default_factory=find_project_root)
    security: BrokerSecurity = BrokerSecurity.PLAINTEXT
    ssl_port: int = DEFAULT_SSL_PORT
    # A node of a cluster (inferq.tools.broker.cluster): its id, every voter ("1@host:port,..."),
    # the cluster id its storage is formatted with, and the internal topics' replication.
    node_id: int = 1
    quorum_voters: str | None = None  # None: this node alone
    cluster_id: str | None = None  # None: a new one at the first format
    internal_replication: int = 1
    internal_min_isr: int = 1

    def __post_init__(self) -> None:
        # Absolute paths: the pid check matches the broker's command line against properties_file.
        object.__setattr__(self, "home", Path(self.home).resolve())
        object.__setattr__(self, "project_root", Path(self.project_root).resolve())

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``, the address clients use (SASL_SSL on a secured broker)."""
        return f"{HOST}:{self.port}"

    @property
    def secured(self) -> bool:
        return self.security is BrokerSecurity.SASL_SSL

    @property
    def ports(self) -> tuple[int, ...]:
        """Every port this broker binds."""
        extra = (self.ssl_port,) if self.secured else ()
        return (self.port, *extra, self.controller_port)

    @property
    def voters(self) -> str:
        """``controller.quorum.voters``: the cluster's, or this node alone."""
        return self.quorum_voters or f"{self.node_id}@{HOST}:{self.controller_port}"

    @property
    def security_dir(self) -> Path:
        return self.home / "security"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def server_log(self) -> Path:
        return self.logs_dir / "server.log"

    @property
    def console_log(self) -> Path:
        return self.logs_dir / "broker.out"

    @property
    def pid_file(self) -> Path:
        return self.home / "broker.pid"

    @property
    def properties_file(self) -> Path:
        return self.home / "server.properties"


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """A snapshot of one broker home: whether its broker process is alive, its pid and bootstrap."""

    running: bool
    pid: int | None
    bootstrap: str
    home: Path


def pick_free_ports(count: int = 2) -> list[int]:
    """Return ``count`` distinct TCP ports free on 127.0.0.1 right now.

    All sockets stay open until every port is chosen, so the ports differ; another process may still
    take one before the broker binds it (start() then raises PortInUseError and the caller can retry).
    """
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((HOST, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def _recorded_properties(home: Path) -> dict[str, str]:
    try:
        text = (home / "server.properties").read_text(encoding="utf-8")
    except OSError:
        return {}
    pairs = (line.partition("=") for line in text.splitlines() if not line.startswith("#"))
    return {key.strip(): value.strip() for key, sep, value in pairs if sep}


def _advertised(properties: Mapping[str, str]) -> dict[str, int]:
    """Listener name -> port of ``advertised.listeners``, in their order."""
    listeners: dict[str, int] = {}
    for entry in filter(None, properties.get("advertised.listeners", "").split(",")):
        name, _, address = entry.partition("://")
        listeners[name] = int(address.rsplit(":", 1)[1])
    return listeners


def recorded_ports(home: Path) -> tuple[int, int] | None:
    """The (client port, controller port) written in ``<home>/server.properties`` by the last start."""
    properties = _recorded_properties(home)
    advertised = _advertised(properties)
    controller = [
        entry.rsplit(":", 1)[1]
        for entry in properties.get("listeners", "").split(",")
        if entry.startswith("CONTROLLER://")
    ]
    if not advertised or not controller:
        return None
    return next(iter(advertised.values())), int(controller[0])


def recorded_security(home: Path) -> tuple[BrokerSecurity, int | None]:
    """How the last start in `home` was secured, and its mutual-TLS port when it was."""
    advertised = _advertised(_recorded_properties(home))
    if "SASL_SSL" in advertised:
        return BrokerSecurity.SASL_SSL, advertised.get("SSL")
    return BrokerSecurity.PLAINTEXT, None


def _with_overrides(text: str, overrides: Mapping[str, str]) -> str:
    """Properties `text` with `overrides` in place of its own values; keys it lacks appended."""
    pending = dict(overrides)
    lines = []
    for line in text.splitlines():
        key = line.partition("=")[0].strip()
        lines.append(f"{key}={pending.pop(key)}" if key in pending and not line.startswith("#") else line)
    if pending:
        lines.append("# Transport security and authorization (inferq.tools.broker.security)")
        lines += [f"{key}={value}" for key, value in pending.items()]
    return "\n".join(lines) + "\n"


def server_properties(cfg: BrokerConfig, material: SecurityMaterial | None = None) -> str:
    """The text of `cfg`'s server.properties (with a secured broker's listeners when `material`)."""
    text = _SERVER_PROPERTIES.format(
        host=HOST,
        port=cfg.port,
        cport=cfg.controller_port,
        data=cfg.data_dir.resolve(),
        partitions=cfg.num_partitions,
        node_id=cfg.node_id,
        voters=cfg.voters,
        internal_rf=cfg.internal_replication,
        internal_min_isr=cfg.internal_min_isr,
    )
    if material is None:
        return text
    return _with_overrides(
        text,
        material.server_properties(
            host=HOST, port=cfg.port, ssl_port=cfg.ssl_port, controller_port=cfg.controller_port
        ),
    )


def new_cluster_id() -> str:
    """22 chars of URL-safe base64 of 16 random bytes, like `kafka-storage random-uuid`."""
    while True:
        cluster_id = base64.urlsafe_b64encode(os.urandom(16)).decode("ascii").rstrip("=")
        if not cluster_id.startswith("-"):  # a leading dash would be parsed as a CLI flag
            return cluster_id


class LocalBroker:
    """Start, probe and stop one local Kafka broker described by a BrokerConfig.

    The broker runs detached (its own session), so it outlives the Python process that started it;
    ``stop`` works from any process thanks to the pid file. Use as a context manager to start on
    enter and stop on exit.
    """

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.last_start_seconds: float | None = None

    # -- security ------------------------------------------------------------------------------------

    @property
    def security_material(self) -> SecurityMaterial | None:
        """The CA, certificates and passwords of a secured broker (made on its first start)."""
        return SecurityMaterial.load(self.config.security_dir) if self.config.secured else None

    def _material(self) -> SecurityMaterial:
        material = self.security_material
        if material is None:
            raise BrokerStartError(
                f"no security material in {self.config.security_dir}: start the broker first"
            )
        return material

    def client_security(
        self,
        user: str = ADMIN,
        *,
        protocol: SecurityProtocol = SecurityProtocol.SASL_SSL,
        mechanism: SaslMechanism = SaslMechanism.SCRAM_SHA_512,
    ) -> KafkaSecurity:
        """The client settings of `user` (``SSL``: its certificate); PLAINTEXT on a plaintext broker."""
        if not self.config.secured:
            return KafkaSecurity()
        return self._material().client_security(user, protocol=protocol, mechanism=mechanism)

    def client_settings(
        self,
        user: str = ADMIN,
        *,
        protocol: SecurityProtocol = SecurityProtocol.SASL_SSL,
        mechanism: SaslMechanism = SaslMechanism.SCRAM_SHA_512,
        topic_prefix: str = "inferq",
    ) -> KafkaSettings:
        """`KafkaSettings` reaching this broker as `user`, on the listener of `protocol`."""
        port = self.config.ssl_port if protocol is SecurityProtocol.SSL else self.config.port
        return KafkaSettings(
            bootstrap_servers=f"{HOST}:{port}",
            topic_prefix=topic_prefix,
            security=self.client_security(user, protocol=protocol, mechanism=mechanism),
        )

    # -- queries -------------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>`` for ``bootstrap.servers``."""
        return self.config.bootstrap

    def _read_pid(self) -> int | None:
        return read_pid(self.config.pid_file)

    def _is_our_broker(self, pid: int) -> bool:
        """True when ``pid`` is alive and is the broker of this home (guards against pid reuse)."""
        return runs_command(pid, b"kafka.Kafka", str(self.config.properties_file).encode())

    def _running_pid(self) -> int | None:
        pid = self._read_pid()
        return pid if pid is not None and self._is_our_broker(pid) else None

    def is_running(self) -> bool:
        """True when this home's broker process is alive (it may still be starting)."""
        return self._running_pid() is not None

    def status(self) -> BrokerStatus:
        """Whether the broker runs, its pid and bootstrap address."""
        pid = self._running_pid()
        return BrokerStatus(running=pid is not None, pid=pid, bootstrap=self.bootstrap, home=self.config.home)

    def answers(self, timeout_s: float = 5.0) -> bool:
        """True when a TCP connect to the port and a metadata request both succeed within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        try:
            with socket.create_connection((HOST, self.config.port), timeout=max(0.1, timeout_s)):
                pass
        except OSError:
            return False
        remaining = max(0.5, deadline - time.monotonic())
        security = self.client_security() if self.security_material is not None else KafkaSecurity()
        conf: dict[str, str | int | float | bool] = {
            "bootstrap.servers": self.bootstrap,
            "socket.timeout.ms": 5000,
        }
        conf.update(security.librdkafka_options())
        admin = AdminClient(conf)
        try:
            metadata = admin.list_topics(timeout=remaining)
        except KafkaException:
            return False
        return bool(metadata.brokers)

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self, timeout_s: float = 120.0) -> float:
        """Start the broker (formatting storage only on first use) and wait until it answers.

        Returns the seconds it took. Idempotent: when this home's broker already runs it only waits
        for it to answer. Raises PortInUseError, ToolMissingError, JarFetchError or BrokerStartError
        (with the log tail); a broker that failed to become ready in time is stopped before raising.
        """
        started = time.monotonic()
        deadline = started + timeout_s
        cfg = self.config
        pid = self._running_pid()
        if pid is not None:
            recorded = recorded_ports(cfg.home)
            if recorded is not None and recorded != (cfg.port, cfg.controller_port):
                raise BrokerStartError(
                    f"the broker of {cfg.home} already runs (pid {pid}) on ports "
                    f"{recorded[0]}/{recorded[1]}, not {cfg.port}/{cfg.controller_port}; stop it first"
                )
            # Not ours to kill if it is merely slow: only a broker launched by this call is stopped.
            self._wait_ready(pid, deadline, timeout_s, stop_on_timeout=False)
        else:
            pid = self.launch(deadline)
            self._wait_ready(pid, deadline, timeout_s, stop_on_timeout=True)
        self.last_start_seconds = time.monotonic() - started
        return self.last_start_seconds

    def launch(self, deadline: float) -> int:
        """Format the storage when new and start the broker process, without waiting for it to answer
        (a cluster's nodes answer only once a quorum of them runs). Returns its pid."""
        cfg = self.config
        for port in cfg.ports:
            if not wait_port_free(port, min(deadline, time.monotonic() + PORT_FREE_WAIT_S)):
                raise PortInUseError(f"port {HOST}:{port} is already in use; pick another (--port)")
        java = require_java()
        jars = ensure_jars(cfg.project_root)
        material = self._ensure_material()
        self._write_properties(material)
        self._format_if_needed(java, jars, deadline, material)
        return self._launch(java, jars)

    def wait_ready(self, pid: int, deadline: float) -> None:
        """Wait until the broker `pid` (from `launch`) answers; stopped and BrokerStartError if not
        by `deadline` (monotonic) or if it exits."""
        self._wait_ready(pid, deadline, max(0.0, deadline - time.monotonic()), stop_on_timeout=True)

    def running_pid(self) -> int | None:
        """The pid of this home's broker when it runs, else None."""
        return self._running_pid()

    def _ensure_material(self) -> SecurityMaterial | None:
        cfg = self.config
        if not cfg.secured:
            return None
        formatted = (cfg.data_dir / "meta.properties").is_file()
        if formatted and SecurityMaterial.load(cfg.security_dir) is None:
            # SCRAM users are written at format time only; this storage has none.
            raise BrokerStartError(
                f"{cfg.data_dir} was formatted without SCRAM users (a plaintext broker's home); "
                "start the secured broker in another --home"
            )
        return SecurityMaterial.ensure(cfg.security_dir)

    def _write_properties(self, material: SecurityMaterial | None) -> None:
        cfg = self.config
        cfg.home.mkdir(parents=True, exist_ok=True)
        cfg.data_dir.mkdir(exist_ok=True)
        cfg.logs_dir.mkdir(exist_ok=True)
        text = server_properties(cfg, material)
        # 0600 before the first byte: a secured broker's file holds the admin's and keystore's passwords.
        fd = os.open(cfg.properties_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)

    def _java_argv(self, java: str, jars: Path, *extra_jvm: str) -> list[str]:
        cfg = self.config
        return [
            java,
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={cfg.logs_dir.resolve()}",
            f"-Dlog4j2.configurationFile={log4j_config_path(cfg.project_root)}",
            *extra_jvm,
            "-cp",
            f"{jars}/*",  # the JVM expands the wildcard itself
        ]

    def _format_if_needed(
        self, java: str, jars: Path, deadline: float, material: SecurityMaterial | None
    ) -> None:
        # meta.properties marks a formatted log dir; re-formatting would fail (or wipe the restart's data).
        if (self.config.data_dir / "meta.properties").is_file():
            return
        argv = [
            *self._java_argv(java, jars),
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            self.config.cluster_id or new_cluster_id(),
            "--config",
            str(self.config.properties_file),
            # A secured broker's SCRAM users exist from the first metadata record on.
            *(material.scram_arguments() if material is not None else ()),
        ]
        try:
            proc = subprocess.run(  # noqa: S603 - fixed argv, resolved executable
                argv,
                capture_output=True,
                text=True,
                timeout=max(1.0, deadline - time.monotonic()),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BrokerStartError(f"formatting {self.config.data_dir} timed out") from exc
        if proc.returncode != 0:
            output = (proc.stdout + proc.stderr).strip()[-4000:]
            for secret in material.passwords.values() if material is not None else ():
                output = output.replace(secret, "***")  # the tool may echo an --add-scram argument
            raise BrokerStartError(
                f"formatting {self.config.data_dir} failed (exit {proc.returncode}):\n{output}"
            )

    def _launch(self, java: str, jars: Path) -> int:
        cfg = self.config
        argv = [
            *self._java_argv(
                java,
                jars,
                "-Xms256m",
                f"-Xmx{cfg.heap}",
                "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20",
                "-XX:+ExitOnOutOfMemoryError",  # a half-dead broker is worse than a dead one in tests
            ),
            "kafka.Kafka",
            str(cfg.properties_file),
        ]
        return spawn_detached(java, argv, console_log=cfg.console_log, pid_file=cfg.pid_file)

    def _log_tails(self) -> str:
        return log_tails((self.config.console_log, self.config.server_log), none="(no broker output)")

    def _wait_ready(self, pid: int, deadline: float, timeout_s: float, *, stop_on_timeout: bool) -> None:
        while True:
            if launched_process_exited(pid):
                self.config.pid_file.unlink(missing_ok=True)
                raise BrokerStartError(
                    f"the Kafka broker (pid {pid}) exited during startup\n{self._log_tails()}"
                )
            remaining = deadline - time.monotonic()
            # The PLAINTEXT socket opens only once the broker is fully started; the metadata request
            # confirms a Kafka broker (not some other process) answers there.
            if remaining > 0 and self.answers(timeout_s=min(5.0, remaining)):
                return
            if time.monotonic() >= deadline:
                tails = self._log_tails()
                if stop_on_timeout:
                    with contextlib.suppress(BrokerStopError):
                        self.stop()
                raise BrokerStartError(
                    f"the Kafka broker (pid {pid}) did not answer on {self.bootstrap} "
                    f"within {timeout_s:.0f}s\n{tails}"
                )
            # Wait on the process itself between probes, so an early exit is noticed at once.
            wait_pid_exit(pid, min(_PROBE_INTERVAL_S, max(0.0, deadline - time.monotonic())))

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the broker: SIGTERM, wait up to ``timeout_s``, then SIGKILL that pid only.

        Idempotent: a missing or stale pid file is just cleaned up. Data stays for the next start.
        Raises BrokerStopError if the process survives SIGKILL too.
        """
        self._signal_and_wait(signal.SIGTERM, timeout_s)

    def kill(self) -> None:
        """SIGKILL the broker at once (a crash, for chaos tests); the next start recovers its logs."""
        self._signal_and_wait(signal.SIGKILL, _KILL_WAIT_S)

    def _signal_and_wait(self, first: signal.Signals, timeout_s: float) -> None:
        pid = self._running_pid()
        stale = None if pid is not None else self._read_pid()
        if signal_and_wait(pid, first, timeout_s, stale=stale, kill_wait_s=_KILL_WAIT_S):
            raise BrokerStopError(f"the Kafka broker (pid {pid}) is still alive after SIGKILL")
        self.config.pid_file.unlink(missing_ok=True)

    # -- context manager -----------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
