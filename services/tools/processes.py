"""Local server processes (the Kafka broker, MirrorMaker, redis-server) launched and watched by pid.

Shared by `inferq.tools.broker`, `inferq.tools.mirror` and `inferq.tools.redis.server`:
launching a detached server, whether a port is free (or frees up soon), whether a pid is alive,
reaping, waiting for an exit without polling where the kernel allows, the tails of its logs.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import time
from collections.abc import Sequence
from pathlib import Path

HOST = "127.0.0.1"
LOG_TAIL_LINES = 60


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As Kafka's own server socket does: TIME_WAIT leftovers of a stopped broker's client connections
        # must not count as "in use", only a live listener or bound socket.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def wait_port_free(port: int, deadline: float) -> bool:
    """Whether `port` is free by `deadline` (monotonic), asked every 0.1 s.

    A port may be held for a moment after its server stopped: a client still retrying the stopped
    server can connect to itself when the port is in the ephemeral range (TCP's simultaneous open;
    seen once in the cluster tests, a node's port "in use" right after `broker stop`). The client
    drops that connection once it reads its own request back.
    """
    while not port_is_free(port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def read_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def log_tails(paths: Sequence[Path], *, none: str) -> str:
    """The tail of each of `paths` that has one, headed by its path; `none` when none has."""
    parts = [f"--- {path} (tail) ---\n{tail}" for path in paths if (tail := read_tail(path))]
    return "\n".join(parts) or none


def spawn_detached(executable: str, argv: list[str], *, console_log: Path, pid_file: Path) -> int:
    """Start `argv` (`executable` its program) in a session of its own, stdin from /dev/null and
    stdout and stderr appended to `console_log`; its pid written to `pid_file` and returned.

    posix_spawn, not Popen: the server outlives the object (and the CLI process) that started it, and
    a Popen dropped while its child runs emits a ResourceWarning, an error under our pytest config.
    setsid: the server must not receive the terminal's Ctrl-C meant for the CLI or the test run."""
    with console_log.open("ab") as console:
        pid = os.posix_spawn(
            executable,
            argv,
            dict(os.environ),
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, console.fileno(), 1),
                (os.POSIX_SPAWN_DUP2, console.fileno(), 2),
            ],
            setsid=True,
        )
    pid_file.write_text(f"{pid}\n", encoding="ascii")
    return pid


def signal_and_wait(
    pid: int | None, first: signal.Signals, timeout_s: float, *, stale: int | None, kill_wait_s: float
) -> bool:
    """Stop a server we launched: `first` to `pid`, wait up to `timeout_s`, then SIGKILL and wait up to
    `kill_wait_s`. With no live `pid`, a `stale` pid of our child that exited on its own is reaped
    (no zombie left). True when the process survived SIGKILL too."""
    if pid is None:
        if stale is not None and proc_state(stale) == "Z":
            reap(stale)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, first)
    if not wait_pid_exit(pid, timeout_s) and first != signal.SIGKILL:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_pid_exit(pid, kill_wait_s)
    return pid_alive(pid)


def proc_state(pid: int) -> str | None:
    """The /proc state letter of ``pid`` (``Z`` = zombie), or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name in parentheses may contain spaces: the state follows the last ")".
    return stat.rpartition(")")[2].split()[0]


def pid_alive(pid: int) -> bool:
    if Path("/proc").is_dir():
        state = proc_state(pid)
        return state is not None and state not in {"Z", "X"}
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap(pid: int) -> None:
    """Collect the exit status of ``pid`` if it is our exited child, so no zombie lingers."""
    with contextlib.suppress(ChildProcessError):  # not our child (started by another process)
        os.waitpid(pid, os.WNOHANG)


def launched_process_exited(pid: int) -> bool:
    """For a process this code launched: has it exited? Asked of the kernel (waitpid), not of
    /proc/<pid>/cmdline, which reads empty for a few ms after the launch and is rewritten by
    servers that retitle themselves: a command-line match there reports a live server as gone."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return not pid_alive(pid)  # not our child (another process launched it): ask /proc
    return done == pid


def wait_pid_exit(pid: int, timeout_s: float) -> bool:
    """Wait until ``pid`` exits (and reap it if it is our child); True when it did within ``timeout_s``.

    Works for children and non-children alike, so a broker started by the CLI can be stopped by tests.
    """
    deadline = time.monotonic() + timeout_s
    pidfd = None
    with contextlib.suppress(OSError, AttributeError):
        pidfd = os.pidfd_open(pid)  # readable once the process has exited: an event, not polling
    if pidfd is not None:
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            while pid_alive(pid):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                poller.poll(max(1, int(min(remaining, 1.0) * 1000)))
        finally:
            os.close(pidfd)
    else:
        while pid_alive(pid):  # no pidfd (old kernel / non-Linux): poll under the deadline
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
    reap(pid)
    return True


def read_pid(pid_file: Path) -> int | None:
    """The pid a launcher wrote to `pid_file`; None when there is none or it is not a number."""
    try:
        return int(pid_file.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def runs_command(pid: int, *markers: bytes) -> bool:
    """True when `pid` is alive and its command line holds every one of `markers` as an argument
    (a pid file's process, not another that reused the pid). Without procfs, alive is enough."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return not Path("/proc").is_dir()
    return all(marker in cmdline for marker in markers)
