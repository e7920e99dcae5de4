"""Which process is the broker, so the delivery bench can count its CPU (Linux /proc).

The bench's broker may be its own (`bench_broker`) or `$KAFKA_BOOTSTRAP_SERVERS`; either way the
broker is the process listening on the bootstrap port, when it runs on this machine as this user.
Elsewhere (another host, a container, another user) its CPU cannot be read here: None, and the
report says "not measured".
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]", ""}


def listening_inodes(proc_net_tcp: str, port: int) -> set[int]:
    """The socket inodes listening on `port`, from /proc/net/tcp or tcp6 (header line first)."""
    inodes: set[int] = set()
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != _LISTEN:
            continue
        if int(fields[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(int(fields[9]))
    return inodes


def local_port(bootstrap: str) -> int | None:
    """The first bootstrap address's port when that address is this machine; else None."""
    first = bootstrap.split(",")[0].strip()
    first = first.split("://", 1)[-1]
    host, _, port = first.rpartition(":")
    if host not in _LOCAL_HOSTS or not port.isdigit():
        return None
    return int(port)


def _socket_inodes(pid: str) -> Iterable[int]:
    fd_dir = Path("/proc") / pid / "fd"
    try:
        links = [os.readlink(fd_dir / fd) for fd in os.listdir(fd_dir)]
    except OSError:  # another user's process, or gone
        return []
    return [int(link[8:-1]) for link in links if link.startswith("socket:[")]


def broker_pid(bootstrap: str) -> int | None:
    """The pid of the process listening on the bootstrap's port on this machine, or None."""
    port = local_port(bootstrap)
    if port is None:
        return None
    wanted: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            wanted |= listening_inodes(Path(table).read_text(encoding="ascii"), port)
        except OSError:
            continue
    if not wanted:
        return None
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        if wanted.intersection(_socket_inodes(pid)):
            return int(pid)
    return None
