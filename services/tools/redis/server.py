"""Run a throwaway redis-server for development and tests: no persistence, loopback only.

Layout of a home folder::

    <home>/redis.pid    pid of the running server (written by us: the server runs with daemonize no)
    <home>/redis.port   the port of the last start, so ``stop``/``status`` need no --port
    <home>/redis.log    the server's stdout/stderr
    <home>/redis.conf   only with a password: ``requirepass`` (mode 0600, never on the command line)
    <home>/tls/         only with TLS: the CA, the server's and a client's certificates (see `RedisServerTls`)

With TLS the server listens on its port with TLS only (``--port 0 --tls-port <port>``), clients use
``rediss://`` and verify its certificate against ``tls/ca.pem``.

The server keeps everything in memory (``--save '' --appendonly no``): the token budget's leases live
at most a few seconds, so a restart losing them is the documented recovery path, not a loss.
``redis-server`` comes from Debian's package (``bash infra/redis/ensure-redis.sh`` installs it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from inferq.tools.certs import KeyPair, issue, make_ca
from inferq.tools.processes import (
    launched_process_exited,
    pid_alive,
    port_is_free,
    read_pid,
    reap,
    spawn_detached,
    wait_pid_exit,
)
from inferq.tools.redis.errors import (
    PortInUseError,
    RedisServerMissingError,
    RedisStartError,
    RedisStopError,
)

HOST = "127.0.0.1"
DEFAULT_PORT = 6379
ENSURE_SCRIPT = "infra/redis/ensure-redis.sh"
_PROBE_INTERVAL_S = 0.05
_LOG_TAIL_BYTES = 8 * 1024


@dataclass(frozen=True, slots=True)
class RedisServerTls:
    """A TLS redis-server's certificates: the CA clients trust, the server's own (IP:127.0.0.1,
    DNS:localhost) and one client certificate it accepts; `require_client_cert` makes it refuse
    clients without one."""

    ca: KeyPair
    server: KeyPair
    client: KeyPair
    require_client_cert: bool = False

    @classmethod
    def generate(cls, folder: Path, *, require_client_cert: bool = False) -> RedisServerTls:
        """A fresh CA and certificates in `folder`."""
        ca = make_ca(folder, "inferq local Redis CA")
        return cls(
            ca=ca,
            server=issue(ca, folder, "redis-server", server=True),
            client=issue(ca, folder, "redis-client"),
            require_client_cert=require_client_cert,
        )

    def client_context(self) -> ssl.SSLContext:
        """What a client of this server uses: trusts the CA, verifies the host, shows its certificate."""
        context = ssl.create_default_context(cafile=str(self.ca.cert))
        context.load_cert_chain(self.client.cert, self.client.key)
        return context


@dataclass(frozen=True, slots=True)
class RedisConfig:
    """Where one local redis-server runs: its home folder (pid, port and log files), its port, the
    password clients must AUTH with (None: no password; never in the URL, logs or repr), and its
    certificates when it speaks TLS only."""

    home: Path
    port: int = DEFAULT_PORT
    password: str | None = field(default=None, repr=False)
    tls: RedisServerTls | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "home", Path(self.home).resolve())
        if not 0 < self.port < 65536:
            raise ValueError(f"port out of range: {self.port}")

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0`` (``rediss://`` with TLS), the URL clients use."""
        return f"{'rediss' if self.tls else 'redis'}://{HOST}:{self.port}/0"

    @property
    def pid_file(self) -> Path:
        return self.home / "redis.pid"

    @property
    def port_file(self) -> Path:
        return self.home / "redis.port"

    @property
    def log_file(self) -> Path:
        return self.home / "redis.log"

    @property
    def config_file(self) -> Path:
        return self.home / "redis.conf"


@dataclass(frozen=True, slots=True)
class RedisStatus:
    """A snapshot of one home: whether its server process is alive, its pid, port and URL."""

    running: bool
    pid: int | None
    port: int
    url: str
    home: Path


def pick_free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (another process may still take it before we bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def recorded_port(home: Path) -> int | None:
    """The port written in ``<home>/redis.port`` by the last start, if any."""
    try:
        return int((home / "redis.port").read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def _quoted(text: str) -> str:
    """``text`` inside a double-quoted redis.conf argument."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def require_redis_server() -> str:
    """The path of ``redis-server``; raises RedisServerMissingError naming the install script."""
    path = shutil.which("redis-server")
    if path is None:
        raise RedisServerMissingError(
            f"redis-server is not on PATH; install it with `bash {ENSURE_SCRIPT}` (Debian's redis-server)"
        )
    return path


def _resp(*parts: bytes) -> bytes:
    """One command in RESP (an array of bulk strings), so a password may hold any byte."""
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def ping(
    port: int, timeout_s: float = 0.5, password: str | None = None, tls: ssl.SSLContext | None = None
) -> bool:
    """True when a server on 127.0.0.1:<port> answers PING with PONG within ``timeout_s`` (after
    AUTH with ``password`` when given; over TLS with the client context ``tls`` when given).

    Raw RESP over a socket: the probe needs no client library, and ``-LOADING`` (not ready) is a no.
    """
    commands = [_resp(b"AUTH", password.encode()), _resp(b"PING")] if password else [_resp(b"PING")]
    try:
        with contextlib.ExitStack() as stack:
            sock = stack.enter_context(socket.create_connection((HOST, port), timeout=timeout_s))
            if tls is not None:
                sock = stack.enter_context(tls.wrap_socket(sock, server_hostname=HOST))
            sock.sendall(b"".join(commands))
            reply = b""
            while reply.count(b"\r\n") < len(commands) and len(reply) < 512:
                chunk = sock.recv(256)
                if not chunk:
                    break
                reply += chunk
    except OSError:  # ssl.SSLError included
        return False
    return reply.split(b"\r\n")[len(commands) - 1].startswith(b"+PONG")


class LocalRedis:
    """Start, probe and stop one redis-server described by a RedisConfig.

    The server runs detached (its own session) and outlives the process that started it; ``stop``
    works from any process through the pid file, and only ever signals that pid. Use as a context
    manager to start on enter and stop on exit.
    """

    def __init__(self, config: RedisConfig) -> None:
        self.config = config
        self._tls_context = config.tls.client_context() if config.tls else None

    @property
    def url(self) -> str:
        return self.config.url

    def _read_pid(self) -> int | None:
        return read_pid(self.config.pid_file)

    def _is_our_server(self, pid: int) -> bool:
        """True when ``pid`` is alive and is a redis-server on our port (guards against pid reuse)."""
        if not pid_alive(pid):
            return False
        try:
            comm = Path(f"/proc/{pid}/comm").read_text(encoding="utf-8", errors="replace").strip()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        # redis-server rewrites its title to "redis-server 127.0.0.1:<port>" once it runs.
        return comm.startswith("redis-server") and str(self.config.port).encode() in cmdline

    def _running_pid(self) -> int | None:
        pid = self._read_pid()
        return pid if pid is not None and self._is_our_server(pid) else None

    def status(self) -> RedisStatus:
        """Whether this home's server runs (it may still be starting), its pid, port and URL."""
        pid = self._running_pid()
        cfg = self.config
        return RedisStatus(running=pid is not None, pid=pid, port=cfg.port, url=cfg.url, home=cfg.home)

    def answers(self, timeout_s: float = 0.5) -> bool:
        """True when the server answers PING."""
        return ping(self.config.port, timeout_s, self.config.password, self._tls_context)

    def start(self, timeout_s: float = 10.0) -> float:
        """Start redis-server (or find this home's running one) and wait until it answers PING.

        Returns the seconds it took. Raises RedisServerMissingError, PortInUseError or RedisStartError
        (with the log tail); a server launched by this call that does not answer in time is stopped.
        """
        started = time.monotonic()
        deadline = started + timeout_s
        pid = self._running_pid()
        launched = False
        if pid is None:
            executable = require_redis_server()
            if not port_is_free(self.config.port):
                raise PortInUseError(
                    f"port {HOST}:{self.config.port} is already in use; pick another (--port)"
                )
            pid = self._launch(executable)
            launched = True
        while not self.answers(timeout_s=min(0.5, max(0.05, deadline - time.monotonic()))):
            if launched_process_exited(pid):
                self.config.pid_file.unlink(missing_ok=True)
                raise RedisStartError(f"redis-server (pid {pid}) exited during start-up\n{self._log_tail()}")
            if time.monotonic() >= deadline:
                tail = self._log_tail()
                if launched:
                    with contextlib.suppress(RedisStopError):
                        self.stop()
                raise RedisStartError(
                    f"redis-server (pid {pid}) did not answer PING on {HOST}:{self.config.port} "
                    f"within {timeout_s:.0f}s\n{tail}"
                )
            # Wait on the process between probes, so an early exit is noticed at once.
            wait_pid_exit(pid, _PROBE_INTERVAL_S)
        return time.monotonic() - started

    def _launch(self, executable: str) -> int:
        cfg = self.config
        cfg.home.mkdir(parents=True, exist_ok=True)
        argv = [executable]
        if cfg.password:
            # A config file (the first argument), not --requirepass: argv is readable by every user.
            cfg.config_file.unlink(missing_ok=True)
            fd = os.open(cfg.config_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as conf:
                conf.write(f'requirepass "{_quoted(cfg.password)}"\n')
            argv.append(str(cfg.config_file))
        if cfg.tls is None:
            argv += ["--port", str(cfg.port)]
        else:
            argv += [
                "--port",
                "0",  # TLS only: no plaintext port at all
                "--tls-port",
                str(cfg.port),
                "--tls-cert-file",
                str(cfg.tls.server.cert),
                "--tls-key-file",
                str(cfg.tls.server.key),
                "--tls-ca-cert-file",
                str(cfg.tls.ca.cert),
                "--tls-auth-clients",
                "yes" if cfg.tls.require_client_cert else "no",
            ]
        argv += [
            "--bind",
            HOST,
            "--dir",
            str(cfg.home),
            # Memory only: leases live seconds; a restart that forgets them is the documented recovery.
            "--save",
            "",
            "--appendonly",
            "no",
            # We hold the pid ourselves; a daemonizing fork would hand us the wrong one.
            "--daemonize",
            "no",
            "--logfile",
            "",
        ]
        pid = spawn_detached(executable, argv, console_log=cfg.log_file, pid_file=cfg.pid_file)
        cfg.port_file.write_text(f"{cfg.port}\n", encoding="ascii")
        return pid

    def _log_tail(self) -> str:
        try:
            with self.config.log_file.open("rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - _LOG_TAIL_BYTES))
                text = handle.read().decode("utf-8", errors="replace")
        except OSError:
            return "(no redis-server output)"
        return f"--- {self.config.log_file} (tail) ---\n{text.strip()}"

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the server, wait up to ``timeout_s``, then SIGKILL that pid only and wait again.

        Idempotent: a missing or stale pid file is just removed. Raises RedisStopError when the
        process survives both signals.
        """
        pid = self._running_pid()
        if pid is None:
            recorded = self._read_pid()
            if recorded is not None:
                reap(recorded)  # our child that already exited: collect it, signal nothing
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            if not wait_pid_exit(pid, timeout_s):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                if not wait_pid_exit(pid, timeout_s):
                    raise RedisStopError(f"redis-server (pid {pid}) survived SIGTERM and SIGKILL")
        self.config.pid_file.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
