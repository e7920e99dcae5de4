"""A service's /metrics on a port of its own (`SideListener`): served beside the API while it runs,
404 on the API's port, stopped with it; a metrics port already taken fails the start before the API
ever answers (issue 23, item 6)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.support.inprocess import free_port
from tests.support.waiting import wait_until

SERVICE = textwrap.dedent(
    """
    import sys
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from inferq.serving import SideListener, configure_logging, run_asgi
    from inferq.telemetry import metrics_app, setup_metrics

    async def hello(_):
        return PlainTextResponse("api")

    configure_logging()
    setup_metrics("side-test")
    api, metrics = int(sys.argv[1]), int(sys.argv[2])
    app = Starlette(routes=[Route("/", hello)])
    side = [SideListener(metrics_app(), "127.0.0.1", metrics, "metrics")]
    sys.exit(run_asgi(app, "127.0.0.1", api, side=side))
    """
)


@contextmanager
def service(api: int, metrics: int) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-c", SERVICE, str(api), str(metrics)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def answer(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.TransportError:
        return None


def test_metrics_answer_on_their_own_port_the_api_port_says_404_and_both_stop_together():
    api, metrics = free_port(), free_port()
    with service(api, metrics) as process:
        wait_until(lambda: answer(f"http://127.0.0.1:{api}/"), "the API answers", 30, interval_s=0.05)
        page = httpx.get(f"http://127.0.0.1:{metrics}/metrics", timeout=5)
        assert page.status_code == 200 and "# TYPE" in page.text
        assert answer(f"http://127.0.0.1:{api}/metrics") == 404
        assert answer(f"http://127.0.0.1:{metrics}/") == 404  # the metrics port serves /metrics only
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    assert answer(f"http://127.0.0.1:{metrics}/metrics") is None


def test_a_metrics_port_already_taken_fails_the_start_before_the_api_answers():
    api = free_port()
    with socket.create_server(("127.0.0.1", 0)) as taken, service(api, taken.getsockname()[1]) as process:
        assert process.wait(timeout=30) == 1
        _, stderr = process.communicate(timeout=30)
        assert "cannot listen for metrics on 127.0.0.1 port" in stderr
        assert answer(f"http://127.0.0.1:{api}/") is None
