"""Run the real Apache Kafka 4.x broker (KRaft, one combined broker+controller node) from Maven jars.

Layout of a broker home folder::

    <home>/server.properties   rewritten on every start from BrokerConfig
    <home>/data/               log.dirs; formatted once, kept across restarts
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
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from services.tools.broker.errors import BrokerStartError, BrokerStopError, PortInUseError
from services.tools.broker.jars import ensure_jars, log4j_config_path, require_java
from services.tools.paths import find_project_root
from services.tools.processes import (
    launched_process_exited,
    pid_alive,
    port_is_free,
    proc_state,
    read_tail,
    reap,
    wait_pid_exit,
)

HOST = "127.0.0.1"  # never "localhost": librdkafka tries ::1 first and stalls when nothing listens there
DEFAULT_PORT = 9092
DEFAULT_CONTROLLER_PORT = 9093
_KILL_WAIT_S = 10.0
_PROBE_INTERVAL_S = 0.2

_SERVER_PROPERTIES = """\
# Written by services.tools.broker on every start; edits here are overwritten.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{host}:{cport}
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}
advertised.listeners=PLAINTEXT://{host}:{port}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data}
num.partitions={partitions}
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.cleaner.dedupe.buffer.size=16777216
"""


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Where and how one local broker runs.

    ``heap`` is the JVM's -Xmx (the initial heap is kept small so an idle broker stays light on a
    laptop). ``project_root`` locates ``infra/kafka`` (pom, log4j2 config) and the shared jar cache.
    """

    home: Path
    port: int = DEFAULT_PORT
    controller_port: int = DEFAULT_CONTROLLER_PORT
    heap: str = "1g"
    num_partitions: int = 1
    project_root: Path = field(default_factory=find_project_root)

    def __post_init__(self) -> None:
        # Absolute paths: the pid check matches the broker's command line against properties_file.
        object.__setattr__(self, "home", Path(self.home).resolve())
        object.__setattr__(self, "project_root", Path(self.project_root).resolve())

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``, the address clients use."""
        return f"{HOST}:{self.port}"

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


def recorded_ports(home: Path) -> tuple[int, int] | None:
    """The (port, controller port) written in ``<home>/server.properties`` by the last start, if any."""
    try:
        text = (home / "server.properties").read_text(encoding="utf-8")
    except OSError:
        return None
    port = cport = None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "advertised.listeners":
            port = int(value.rsplit(":", 1)[1])
        elif key.strip() == "controller.quorum.voters":
            cport = int(value.rsplit(":", 1)[1])
    return (port, cport) if port is not None and cport is not None else None


def _new_cluster_id() -> str:
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

    # -- queries -------------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>`` for ``bootstrap.servers``."""
        return self.config.bootstrap

    def _read_pid(self) -> int | None:
        try:
            return int(self.config.pid_file.read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            return None

    def _is_our_broker(self, pid: int) -> bool:
        """True when ``pid`` is alive and is the broker of this home (guards against pid reuse)."""
        if not pid_alive(pid):
            return False
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return not Path("/proc").is_dir()  # no procfs: trust the pid file
        return b"kafka.Kafka" in cmdline and str(self.config.properties_file).encode() in cmdline

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
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000})
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
            for port in (cfg.port, cfg.controller_port):
                if not port_is_free(port):
                    raise PortInUseError(f"port {HOST}:{port} is already in use; pick another (--port)")
            java = require_java()
            jars = ensure_jars(cfg.project_root)
            self._write_properties()
            self._format_if_needed(java, jars, deadline)
            pid = self._launch(java, jars)
            self._wait_ready(pid, deadline, timeout_s, stop_on_timeout=True)
        self.last_start_seconds = time.monotonic() - started
        return self.last_start_seconds

    def _write_properties(self) -> None:
        cfg = self.config
        cfg.home.mkdir(parents=True, exist_ok=True)
        cfg.data_dir.mkdir(exist_ok=True)
        cfg.logs_dir.mkdir(exist_ok=True)
        cfg.properties_file.write_text(
            _SERVER_PROPERTIES.format(
                host=HOST,
                port=cfg.port,
                cport=cfg.controller_port,
                data=cfg.data_dir.resolve(),
                partitions=cfg.num_partitions,
            ),
            encoding="utf-8",
        )

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

    def _format_if_needed(self, java: str, jars: Path, deadline: float) -> None:
        # meta.properties marks a formatted log dir; re-formatting would fail (or wipe the restart's data).
        if (self.config.data_dir / "meta.properties").is_file():
            return
        argv = [
            *self._java_argv(java, jars),
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            _new_cluster_id(),
            "--config",
            str(self.config.properties_file),
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
            raise BrokerStartError(
                f"formatting {self.config.data_dir} failed (exit {proc.returncode}):\n"
                f"{(proc.stdout + proc.stderr).strip()[-4000:]}"
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
        with cfg.console_log.open("ab") as console:
            # posix_spawn, not Popen: the broker outlives this object (and the CLI process), and a Popen
            # dropped while its child runs emits a ResourceWarning, an error under our pytest config.
            # setsid: the broker must not receive the terminal's Ctrl-C meant for the CLI or test run.
            pid = os.posix_spawn(
                java,
                argv,
                dict(os.environ),
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, console.fileno(), 1),
                    (os.POSIX_SPAWN_DUP2, console.fileno(), 2),
                ],
                setsid=True,
            )
        cfg.pid_file.write_text(f"{pid}\n", encoding="ascii")
        return pid

    def _log_tails(self) -> str:
        parts = []
        for path in (self.config.console_log, self.config.server_log):
            tail = read_tail(path)
            if tail:
                parts.append(f"--- {path} (tail) ---\n{tail}")
        return "\n".join(parts) or "(no broker output)"

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
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, first)
            if not wait_pid_exit(pid, timeout_s) and first != signal.SIGKILL:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                wait_pid_exit(pid, _KILL_WAIT_S)
            if pid_alive(pid):
                raise BrokerStopError(f"the Kafka broker (pid {pid}) is still alive after SIGKILL")
        else:
            stale = self._read_pid()
            if stale is not None and proc_state(stale) == "Z":
                reap(stale)  # our broker child that exited on its own: collect it, leave no zombie
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
