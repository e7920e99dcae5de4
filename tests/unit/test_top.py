"""`inferq top`: one frame drawn from sample /metrics pages, as a user would see it."""

from __future__ import annotations

import httpx
import pytest
from rich.console import Console

from inferq.tools.top.command import Scraper
from inferq.tools.top.frame import build_frame, render
from inferq.tools.top.samples import Scrape, quantile

SCOPE = 'otel_scope_name="inferq.dispatcher",otel_scope_schema_url="",otel_scope_version=""'


def dispatcher_page(*, done_high: int, waits_high: tuple[int, int, int], effective: int = 8) -> str:
    """A dispatcher's page: HIGH's outcomes and queue waits (<=0.1 s, <=0.5 s, <=5 s counts)."""
    le_01, le_05, le_5 = waits_high
    return f"""# HELP inferq_queue_wait_seconds from enqueue to taking a concurrency token
# TYPE inferq_queue_wait_seconds histogram
inferq_queue_wait_seconds_bucket{{{SCOPE},tenant="default",tier="HIGH",le="0.1"}} {le_01}
inferq_queue_wait_seconds_bucket{{{SCOPE},tenant="default",tier="HIGH",le="0.5"}} {le_05}
inferq_queue_wait_seconds_bucket{{{SCOPE},tenant="default",tier="HIGH",le="5.0"}} {le_5}
inferq_queue_wait_seconds_bucket{{{SCOPE},tenant="default",tier="HIGH",le="+Inf"}} {le_5}
inferq_queue_wait_seconds_count{{{SCOPE},tenant="default",tier="HIGH"}} {le_5}
inferq_queue_wait_seconds_sum{{{SCOPE},tenant="default",tier="HIGH"}} 1.0
# TYPE inferq_outcomes_total counter
inferq_outcomes_total{{{SCOPE},status="OK",tenant="default",tier="HIGH"}} {done_high}
inferq_outcomes_total{{{SCOPE},status="EXPIRED",tenant="acme",tier="LOW"}} 2
# TYPE inferq_backend_calls_total counter
inferq_backend_calls_total{{{SCOPE},status="200",tier="HIGH"}} {done_high}
inferq_backend_calls_total{{{SCOPE},status="429",tier="HIGH"}} 3
# TYPE inferq_tokens_in_use gauge
inferq_tokens_in_use{{{SCOPE},tier="HIGH"}} 4
inferq_tokens_in_use{{{SCOPE},tier="MEDIUM"}} 2
inferq_tokens_in_use{{{SCOPE},tier="LOW"}} 0
# TYPE inferq_readahead_waiting gauge
inferq_readahead_waiting{{{SCOPE},tier="HIGH"}} 1
inferq_readahead_waiting{{{SCOPE},tier="MEDIUM"}} 0
inferq_readahead_waiting{{{SCOPE},tier="LOW"}} 250
# TYPE inferq_consumer_lag gauge
inferq_consumer_lag{{{SCOPE},tier="LOW"}} 1200
# TYPE inferq_paused_partitions_by_tier gauge
inferq_paused_partitions_by_tier{{{SCOPE},tier="HIGH"}} 0
inferq_paused_partitions_by_tier{{{SCOPE},tier="LOW"}} 3
# TYPE inferq_effective_budget gauge
inferq_effective_budget{{{SCOPE}}} {effective}
# TYPE inferq_budget gauge
inferq_budget{{{SCOPE}}} 10
# TYPE inferq_schedule_window_info gauge
inferq_schedule_window_info{{{SCOPE},window="peak"}} 1
# TYPE inferq_tier_floor gauge
inferq_tier_floor{{{SCOPE},tier="HIGH"}} 6
inferq_tier_floor{{{SCOPE},tier="MEDIUM"}} 2
inferq_tier_floor{{{SCOPE},tier="LOW"}} 0
# TYPE inferq_tier_ceiling gauge
inferq_tier_ceiling{{{SCOPE},tier="HIGH"}} 8
inferq_tier_ceiling{{{SCOPE},tier="MEDIUM"}} 6
inferq_tier_ceiling{{{SCOPE},tier="LOW"}} 0
"""


INGEST = """# TYPE inferq_ingest_accepted_total counter
inferq_ingest_accepted_total{tenant="default",tier="HIGH"} 40
# TYPE inferq_backlog gauge
inferq_backlog{tier="LOW"} 1450
# TYPE inferq_backlog_fill_ratio gauge
inferq_backlog_fill_ratio{tier="LOW"} 0.85
"""


def screen(older: Scrape, newer: Scrape, down: tuple[str, ...] = ()) -> str:
    console = Console(record=True, width=80, color_system=None)
    console.print(render(build_frame([older, newer], down)))
    return console.export_text()


def row(text: str, tier: str) -> list[str]:
    """The cells of `tier`'s row (a duration and its unit, "95 ms", is one cell)."""
    line = next(line for line in text.splitlines() if line.startswith(f"{tier} "))
    cells: list[str] = []
    for token in line.split():
        if token in ("ms", "s") and cells:
            cells[-1] += f" {token}"
        else:
            cells.append(token)
    return cells


def test_one_frame_shows_each_tier_from_two_scrapes():
    older = Scrape.parse(dispatcher_page(done_high=100, waits_high=(50, 90, 100)), at=10.0).merged(
        Scrape.parse(INGEST.replace(" 40\n", " 30\n"), at=10.0)
    )
    newer = Scrape.parse(dispatcher_page(done_high=120, waits_high=(50, 90, 120)), at=20.0).merged(
        Scrape.parse(INGEST, at=20.0)
    )
    text = screen(older, newer)
    assert "window peak" in text
    assert "effective budget 8/10 (cut)" in text
    assert "rates over 10 s" in text
    high = row(text, "HIGH")
    # tier, waiting, read ahead, running, share, floor/ceiling, wait P95, done/s, in/s, lag, paused, fill
    assert high[:6] == ["HIGH", "1", "1", "4", "50%", "6/8"]
    # The 20 waits of the last 10 s all fell between 0.5 s and 5 s: P95 interpolated in that bucket.
    assert high[6] == "4.78 s"  # 0.5 + 4.5 x 19/20
    assert high[7:9] == ["2.0", "1.0"]
    low = row(text, "LOW")
    assert low[:4] == ["LOW", "1450", "250", "0"]  # waiting: ingest's backlog of the tier
    assert low[9:] == ["1200", "3", "85%"]
    assert "429 0.0" in text and "200 2.0" in text


def test_a_first_frame_and_a_silent_service_are_shown_as_such():
    only = Scrape.parse(dispatcher_page(done_high=1, waits_high=(1, 1, 1)), at=5.0)
    console = Console(record=True, width=80, color_system=None)
    console.print(render(build_frame([only], ["http://127.0.0.1:8703/metrics"])))
    text = console.export_text()
    assert "rates: next frame" in text
    assert "no answer from http://127.0.0.1:8703/metrics" in text
    assert row(text, "HIGH")[7] == "-"  # no rate from one scrape


def test_quantile_matches_prometheus_interpolation():
    assert quantile(0.5, {1.0: 0, 2.0: 10, float("inf"): 10}) == 1.5
    assert quantile(0.95, {1.0: 0, float("inf"): 0}) is None
    assert quantile(0.99, {1.0: 5, float("inf"): 10}) == 1.0  # past the last bound: that bound


def test_scraper_names_a_service_that_does_not_answer():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.port == 8702:
            return httpx.Response(200, text=dispatcher_page(done_high=1, waits_high=(1, 1, 1)))
        return httpx.Response(503, text="down")

    scraper = Scraper(["http://127.0.0.1:8702", "http://127.0.0.1:8703/"], clock=lambda: 1.0)
    scraper._client = httpx.Client(transport=httpx.MockTransport(handler))
    scrape = scraper.scrape()
    assert scraper.down == ["http://127.0.0.1:8703/metrics"]
    assert scrape.total("inferq_budget") == 10


def test_a_page_that_is_not_the_prometheus_format_counts_as_no_answer():
    pages = {8702: 'inferq_budget{tier="HIGH" 10\n', 8703: "\x00" * 64, 8710: "x" * 10_000 + "{"}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=pages[request.url.port or 0])

    urls = [f"http://127.0.0.1:{port}" for port in pages]
    scraper = Scraper(urls, clock=lambda: 1.0)
    scraper._client = httpx.Client(transport=httpx.MockTransport(handler))
    scrape = scraper.scrape()
    assert scraper.down == [f"{url}/metrics" for url in urls]
    assert scrape.samples == ()
    text = Console(record=True, width=80, color_system=None)
    text.print(render(build_frame([scrape], scraper.down)))
    shown = text.export_text()
    assert "no answer from http://127.0.0.1:8702/metrics" in shown
    # Nothing known reads as unknown, never as an idle pipeline's zeros.
    assert row(shown, "HIGH") == ["HIGH", "-", "-", "-", "-", "-/-", "-", "-", "-", "-", "-", "-"]


def test_bad_options_are_refused(capsys: pytest.CaptureFixture[str]):
    from inferq.cli import main

    with pytest.raises(SystemExit):
        main(["top", "--interval", "0"])
    assert "--interval and --window must be > 0" in capsys.readouterr().err


CIRCUITS = f"""# TYPE inferq_backend_circuit_state gauge
inferq_backend_circuit_state{{{SCOPE},backend="default"}} 2
inferq_backend_circuit_state{{{SCOPE},backend="spare"}} 0
"""


def test_backends_circuits_are_shown_when_several_and_an_open_one_is_named():
    page = dispatcher_page(done_high=1, waits_high=(1, 1, 1))
    console = Console(record=True, width=80, color_system=None)
    console.print(render(build_frame([Scrape.parse(page + CIRCUITS, at=5.0)])))
    assert "backends    default OPEN  spare closed" in console.export_text()
    # One backend, closed: nothing to say.
    one = (
        page
        + CIRCUITS.split("inferq_backend_circuit_state{", 1)[0]
        + (f'inferq_backend_circuit_state{{{SCOPE},backend="default"}} 0\n')
    )
    console = Console(record=True, width=80, color_system=None)
    console.print(render(build_frame([Scrape.parse(one, at=5.0)])))
    assert "backends" not in console.export_text()
