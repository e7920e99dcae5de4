"""Run Apache Kafka's MirrorMaker 2 (dedicated mode) from Maven jars, like the local broker.

Layout of a mirror home folder::

    <home>/mm2.properties     rewritten on every start from MirrorConfig
    <home>/mirror.json        the options of the last start (for `stop` and `status`)
    <home>/mirror.pid         pid of the running MirrorMaker
    <home>/logs/server.log    its log4j2 log
    <home>/logs/mirror.out    the JVM's stdout/stderr

The jars live in ``<project>/.inferq/mirror/jars`` (``infra/kafka/mirror/pom.xml``), never in the
broker's ``.inferq/kafka/jars``, which other worktrees share.

Ready means: on every target cluster a heartbeat newer than the launch has arrived through a
source connector (``<source>.heartbeats``). The heartbeat connector of flow A->B writes into B, and
B's heartbeats reach A only through the source connector of B->A, so a fresh heartbeat on each
target proves each flow's source task runs, with the topics that existed when it started.
"""

from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from inferq.clock import wall_ms
from inferq.tools.broker.errors import LocalBrokerError
from inferq.tools.broker.jars import ensure_jars_of, log4j_config_path, require_java
from inferq.tools.mirror.config import Flow, MirrorConfig
from inferq.tools.processes import (
    launched_process_exited,
    log_tails,
    read_pid,
    runs_command,
    signal_and_wait,
    spawn_detached,
    wait_pid_exit,
)

MAIN_CLASS = "org.apache.kafka.connect.mirror.MirrorMaker"
INFRA_DIR = Path("infra") / "kafka" / "mirror"
JARS_DIR = Path(".inferq") / "mirror" / "jars"
DEFAULT_HOME = Path(".inferq") / "mirror"
FRESH_HEARTBEAT_S = 15.0  # `answers`: every flow delivered a heartbeat within this many seconds
_KILL_WAIT_S = 10.0
_PROBE_INTERVAL_S = 1.0


class MirrorError(LocalBrokerError):
    """MirrorMaker did not start, stop or answer; the message carries the log tail."""


@dataclass(frozen=True, slots=True)
class MirrorStatus:
    running: bool
    pid: int | None
    home: Path


def ensure_mirror_jars(project_root: Path) -> Path:
    """``<project>/.inferq/mirror/jars``, fetched with Maven from ``infra/kafka/mirror/pom.xml`` once."""
    root = project_root.resolve()
    return ensure_jars_of(root / INFRA_DIR / "pom.xml", root / JARS_DIR, "MirrorMaker")


def _heartbeat_since(bootstrap: str, topic: str, since_ms: int, timeout_s: float) -> bool:
    """Whether `topic` on `bootstrap` holds a record stamped at or after `since_ms`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "inferq-mirror-probe",  # never subscribes nor commits: only reads offsets
            "enable.auto.commit": False,
            "socket.timeout.ms": 5000,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None or not described.partitions:
            return False
        wanted = [TopicPartition(topic, p, since_ms) for p in described.partitions]
        found = consumer.offsets_for_times(wanted, timeout=timeout_s)
        return any(tp.offset >= 0 for tp in found)  # -1: no record at or after the time
    except KafkaException:
        return False
    finally:
        consumer.close()


class LocalMirrorMaker:
    """Start, probe and stop one MirrorMaker 2 process described by a MirrorConfig.

    Detached (its own session) like the broker, so it outlives the command that started it; `stop`
    and `kill` work from any process through the pid file.
    """

    def __init__(self, config: MirrorConfig) -> None:
        self.config = config

    # -- queries -------------------------------------------------------------------------------------

    def _read_pid(self) -> int | None:
        return read_pid(self.config.pid_file)

    def _is_ours(self, pid: int) -> bool:
        """Alive and this home's MirrorMaker (not a reused pid)."""
        return runs_command(pid, MAIN_CLASS.encode(), str(self.config.properties_file).encode())

    def _running_pid(self) -> int | None:
        pid = self._read_pid()
        return pid if pid is not None and self._is_ours(pid) else None

    def status(self) -> MirrorStatus:
        pid = self._running_pid()
        return MirrorStatus(running=pid is not None, pid=pid, home=self.config.home)

    def flows_delivering(self, since_ms: int, timeout_s: float = 5.0) -> dict[str, bool]:
        """Per flow: whether its target got a heartbeat through it at or after `since_ms`."""
        return {
            flow.name: _heartbeat_since(
                self.config.bootstrap_of(flow.target), flow.heartbeats_topic, since_ms, timeout_s
            )
            for flow in self.config.flows()
        }

    def answers(self) -> bool:
        """Running, and every flow delivered a heartbeat within the last `FRESH_HEARTBEAT_S`."""
        if self._running_pid() is None:
            return False
        since = int((time.time() - FRESH_HEARTBEAT_S) * 1000)
        return all(self.flows_delivering(since).values())

    def describe_flows(self) -> list[Flow]:
        return self.config.flows()

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self, timeout_s: float = 120.0) -> float:
        """Write the properties, launch MirrorMaker and wait until every flow delivers a heartbeat.

        Returns the seconds it took. A MirrorMaker already running from this home is only waited
        for. Raises MirrorError with the log tail when it exits or does not get ready in time (a
        process this call launched is then stopped), ToolMissingError or JarFetchError.
        """
        started = time.monotonic()
        deadline = started + timeout_s
        cfg = self.config
        since_ms = wall_ms()
        pid = self._running_pid()
        launched = pid is None
        if pid is None:
            java = require_java()
            jars = ensure_mirror_jars(cfg.project_root)
            cfg.logs_dir.mkdir(parents=True, exist_ok=True)
            cfg.properties_file.write_text(cfg.properties(), encoding="utf-8")
            cfg.settings_file.write_text(cfg.to_json(), encoding="utf-8")
            pid = self._launch(java, jars)
        else:
            since_ms -= int(FRESH_HEARTBEAT_S * 1000)
        self._wait_ready(pid, since_ms, deadline, timeout_s, stop_on_timeout=launched)
        return time.monotonic() - started

    def _launch(self, java: str, jars: Path) -> int:
        cfg = self.config
        argv = [
            java,
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={cfg.logs_dir}",
            f"-Dlog4j2.configurationFile={log4j_config_path(cfg.project_root)}",
            "-Xms128m",
            f"-Xmx{cfg.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-cp",
            f"{jars}/*",
            MAIN_CLASS,
            str(cfg.properties_file),
        ]
        # As the broker: its own session, so it outlives the CLI and ignores its Ctrl-C.
        return spawn_detached(java, argv, console_log=cfg.console_log, pid_file=cfg.pid_file)

    def log_tails(self) -> str:
        return log_tails((self.config.console_log, self.config.log_file), none="(no MirrorMaker output)")

    def _wait_ready(
        self, pid: int, since_ms: int, deadline: float, timeout_s: float, *, stop_on_timeout: bool
    ) -> None:
        pending = {flow.name for flow in self.config.flows()}
        while True:
            if launched_process_exited(pid):
                self.config.pid_file.unlink(missing_ok=True)
                raise MirrorError(f"MirrorMaker (pid {pid}) exited during startup\n{self.log_tails()}")
            delivering = self.flows_delivering(since_ms)
            pending = {name for name in pending if not delivering[name]}
            if not pending:
                return
            if time.monotonic() >= deadline:
                tails = self.log_tails()
                if stop_on_timeout:
                    with contextlib.suppress(MirrorError):
                        self.stop()
                raise MirrorError(
                    f"MirrorMaker (pid {pid}) delivered no heartbeat through {', '.join(sorted(pending))} "
                    f"within {timeout_s:.0f}s\n{tails}"
                )
            wait_pid_exit(pid, min(_PROBE_INTERVAL_S, max(0.0, deadline - time.monotonic())))

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL that pid only. Idempotent."""
        self._signal_and_wait(signal.SIGTERM, timeout_s)

    def kill(self) -> None:
        """SIGKILL at once (a crash): the next start copies again what was not committed."""
        self._signal_and_wait(signal.SIGKILL, _KILL_WAIT_S)

    def _signal_and_wait(self, first: signal.Signals, timeout_s: float) -> None:
        pid = self._running_pid()
        stale = None if pid is not None else self._read_pid()
        if signal_and_wait(pid, first, timeout_s, stale=stale, kill_wait_s=_KILL_WAIT_S):
            raise MirrorError(f"MirrorMaker (pid {pid}) is still alive after SIGKILL")
        self.config.pid_file.unlink(missing_ok=True)
