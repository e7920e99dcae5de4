"""One service as a child process with its own log file, stopped by SIGTERM (SIGKILL as last resort)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx


class ServiceStartError(RuntimeError):
    def __init__(self, name: str, reason: str, log_path: Path) -> None:
        tail = ""
        if log_path.exists():
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
        super().__init__(f"{name} did not start: {reason}\n--- last lines of {log_path} ---\n{tail}")


@dataclass
class ServiceProcess:
    name: str
    args: Sequence[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    # The `inferq` command to run (default: this interpreter's), and the folder it runs in.
    command: Sequence[str] = (sys.executable, "-m", "inferq")
    cwd: Path | None = None
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
                [*self.command, *self.args],
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                # Own process group: a Ctrl-C in the terminal reaches us only; we stop children in order.
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait_http_ready(
        self,
        url: str,
        timeout_s: float,
        accept: Callable[[httpx.Response], bool] = lambda r: r.status_code == 200,
    ) -> float:
        """Poll `url` until `accept` says ready; returns seconds taken. Fails fast if the process dies."""
        started = time.monotonic()
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise ServiceStartError(
                    self.name,
                    f"exited with code {self._proc.returncode if self._proc else '?'}",
                    self.log_path,
                )
            try:
                if accept(httpx.get(url, timeout=1.0)):
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise ServiceStartError(self.name, f"{url} not ready after {timeout_s:.0f} s", self.log_path)

    def signal(self, sig: signal.Signals) -> None:
        if self.alive() and self._proc is not None:
            self._proc.send_signal(sig)

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL. Returns the exit code (a service that
        stopped cleanly exits within `inferq.serving.EXIT_GRACE_S` of its clean stop)."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
        return self._proc.returncode

    def kill(self) -> None:
        """SIGKILL: a crash, for chaos tests."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=5)
