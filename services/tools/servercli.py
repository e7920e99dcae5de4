"""`start|stop|status` for the local servers the project runs itself (`inferq broker`, `inferq redis`).

Exit codes: 0 success (``status``: running), 1 error, 2 bad option or environment, 3 ``status``:
not running (as LSB init scripts' "status" says). ``start`` is idempotent: a server already
running and answering is left alone.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNING = 3


class UsageError(Exception):
    """A bad option or environment value; reported with exit code 2."""


class ServerStatus(Protocol):
    @property
    def running(self) -> bool: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def home(self) -> Path: ...


class LocalServer(Protocol):
    def status(self) -> ServerStatus: ...

    def answers(self) -> bool: ...

    def start(self, timeout_s: float) -> float: ...

    def stop(self, timeout_s: float) -> None: ...


S = TypeVar("S", bound=LocalServer)


def port_from_env(name: str) -> int | None:
    """The port in environment variable `name`, None when unset; a clear error when not a number."""
    raw = os.environ.get(name)
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise UsageError(f"${name} must be a port number, got {raw!r}") from exc


@dataclass(frozen=True)
class ServerCommands(Generic[S]):
    """The three commands for one kind of server; `build` makes it from the parsed options."""

    prog: str
    label: str
    errors: type[Exception]
    build: Callable[[argparse.Namespace], S]
    address: Callable[[S], str]
    log_path: Callable[[S], Path]

    def run(self, action: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
        try:
            return action(args)
        except UsageError as exc:
            print(f"{self.prog}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except self.errors as exc:
            print(f"{self.prog}: {exc}", file=sys.stderr)
            return EXIT_ERROR

    def start(self, args: argparse.Namespace) -> int:
        def action(ns: argparse.Namespace) -> int:
            server = self.build(ns)
            status = server.status()
            if status.running and server.answers():
                where = f"{self.address(server)} (pid {status.pid}, home {status.home})"
                print(f"{self.label} already running on {where}")
                return EXIT_OK
            seconds = server.start(timeout_s=ns.timeout)
            status = server.status()
            print(
                f"{self.label} started on {self.address(server)} (pid {status.pid}) in {seconds:.1f}s; "
                f"logs: {self.log_path(server)}"
            )
            return EXIT_OK

        return self.run(action, args)

    def stop(self, args: argparse.Namespace) -> int:
        def action(ns: argparse.Namespace) -> int:
            server = self.build(ns)
            status = server.status()
            server.stop(timeout_s=ns.timeout)
            if status.running:
                print(f"{self.label} stopped (pid {status.pid}, {self.address(server)})")
            else:
                print(f"{self.label} was not running (home {status.home})")
            return EXIT_OK

        return self.run(action, args)

    def status(self, args: argparse.Namespace) -> int:
        def action(ns: argparse.Namespace) -> int:
            server = self.build(ns)
            status = server.status()
            if not status.running:
                print(f"{self.label} not running (home {status.home})")
                return EXIT_NOT_RUNNING
            state = "answering" if server.answers() else "not answering yet"
            where = f"{self.address(server)} (pid {status.pid}, {state}, home {status.home})"
            print(f"{self.label} running on {where}")
            return EXIT_OK

        return self.run(action, args)
