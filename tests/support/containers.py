"""inferq's image (infra/container/Dockerfile) built with podman, and services run from it as
containers the test stops (SIGTERM, then removed) however it ends. Every podman call is bounded."""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
# The base the test builds on: by default the Debian base made locally by build-base.sh (no
# registry needed); INFERQ_CONTAINER_BASE=python:3.11-slim-bookworm where a registry is reachable.
DEFAULT_BASE = "localhost/debian-base:bookworm"
TEST_IMAGE = "localhost/inferq:test"
# runc (crun refuses a hybrid cgroup layout), ulimits the machine allows, the host's network (no
# bridge networking here; the services reach the local broker on 127.0.0.1): docs/deployment.md.
DEFAULT_RUN_FLAGS = "--runtime runc --ulimit nofile=20000:20000 --ulimit nproc=4096:4096 --network=host"
BUILD_TIMEOUT_S = 900.0
PODMAN_TIMEOUT_S = 60.0


def run_flags() -> list[str]:
    """`podman run` flags: $INFERQ_PODMAN_FLAGS, else this project's machines' recipe."""
    return shlex.split(os.environ.get("INFERQ_PODMAN_FLAGS", DEFAULT_RUN_FLAGS))


def podman(*args: str, timeout_s: float = PODMAN_TIMEOUT_S, check: bool = True) -> str:
    """`podman args...`; its stdout. A failure (with `check`) names the command and its stderr."""
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def build_image(tag: str = TEST_IMAGE) -> str:
    """Build the image from this checkout (infra/container/build.sh, the layers podman has cached
    are reused); returns `tag`."""
    env = {
        **os.environ,
        "BASE": os.environ.get("INFERQ_CONTAINER_BASE", DEFAULT_BASE),
        "PODMAN_FLAGS": " ".join(run_flags()),
    }
    done = subprocess.run(
        ["bash", str(ROOT / "infra" / "container" / "build.sh"), tag],
        capture_output=True,
        text=True,
        env=env,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
        raise RuntimeError(f"the image did not build (exit {done.returncode}):\n{tail}")
    return tag


def run_once(image: str, *args: str, entrypoint: str | None = None) -> str:
    """`podman run --rm image args...` to its end; its stdout."""
    chosen = ["--entrypoint", entrypoint] if entrypoint else []
    return podman("run", "--rm", *run_flags(), *chosen, image, *args)


@dataclass
class Container:
    """One detached service container, named `name`."""

    name: str

    def running(self) -> bool:
        state = podman("inspect", "--format", "{{.State.Running}}", self.name, check=False)
        return state.strip() == "true"

    def logs(self) -> str:
        return podman("logs", self.name, check=False)

    def exit_code(self) -> int:
        return int(podman("inspect", "--format", "{{.State.ExitCode}}", self.name).strip())

    def stop(self, timeout_s: int = 20) -> int:
        """SIGTERM, SIGKILL after `timeout_s`; the exit code."""
        podman("stop", "--time", str(timeout_s), self.name, timeout_s=timeout_s + PODMAN_TIMEOUT_S)
        return self.exit_code()

    def wait_http_ready(
        self,
        url: str,
        timeout_s: float,
        accept: Callable[[httpx.Response], bool] = lambda r: r.status_code == 200,
    ) -> None:
        """Poll `url` until `accept` says ready; fails at once, with the logs, if the container ends."""

        def ready() -> bool:
            if not self.running():
                raise AssertionError(f"{self.name} ended before it was ready:\n{self.logs()[-4000:]}")
            try:
                return accept(httpx.get(url, timeout=1.0))
            except httpx.HTTPError:
                return False

        wait_until(
            ready, f"{self.name}: {url} ready", timeout_s, interval_s=0.2, detail=lambda: self.logs()[-4000:]
        )


@contextlib.contextmanager
def running_container(
    image: str, name: str, args: Sequence[str], env: Mapping[str, str]
) -> Iterator[Container]:
    """`image args...` started detached as `name`, with `env` (-e); stopped and removed on the way
    out, whatever happened inside."""
    variables = [f"--env={key}={value}" for key, value in env.items()]
    podman("run", "--detach", "--name", name, *run_flags(), *variables, image, *args)
    container = Container(name)
    try:
        yield container
    finally:
        # A stop that failed (the container had already ended) still leaves it to remove.
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            if container.running():
                container.stop()
        podman("rm", "--force", "--time", "5", name, check=False)
