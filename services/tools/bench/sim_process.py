"""The simulated backend as a process for a benchmark (`inferq sim-backend`, as users run it)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from inferq.tools.broker.broker import pick_free_ports
from inferq.tools.stack.process import ServiceProcess


@contextlib.contextmanager
def sim_backend(log_file: Path, *args: str, ready_s: float = 60.0) -> Iterator[str]:
    """`inferq sim-backend` with `args` on a free port, logging to `log_file`; yields its base URL
    once it answers, and stops it when the block ends."""
    (port,) = pick_free_ports(1)
    sim = ServiceProcess(log_file.stem, ["sim-backend", "--port", str(port), *args], log_file)
    sim.start()
    try:
        sim.wait_http_ready(f"http://127.0.0.1:{port}/healthz", ready_s)
        yield f"http://127.0.0.1:{port}"
    finally:
        sim.stop()
