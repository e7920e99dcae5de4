"""`inferq report`'s at-a-glance pictures: tokens in use binned per second and stacked by tier, the
wait percentiles per tier over time, the effective budget read from Prometheus, runs side by side."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from matplotlib.image import imread

from inferq.messaging.tiers import Tier
from inferq.tools.measures import MeasuredRequest
from inferq.tools.report.binned import (
    Bins,
    BudgetSteps,
    effective_budget_of,
    mean_in_use,
    tokens_by_tier,
    wait_quantiles,
)
from inferq.tools.report.documents import RunDocument, load_documents, write_documents
from inferq.tools.report.effective import attach_effective_budget, query_range
from inferq.tools.report.pictures import tokens_area_plot, wait_percentiles_plot
from inferq.tools.report.plots import write_plots

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW


def o(rid: str, tier: Tier, enq: int, disp: int | None, done: int, status: str = "OK") -> MeasuredRequest:
    return MeasuredRequest(rid, tier, status, enq, disp, done)


def test_tokens_are_a_time_weighted_mean_per_bin():
    bins = Bins(origin_ms=0, width_ms=1_000, count=3)
    # One call over 0.5..2.5 s: half of bin 0, all of bin 1, half of bin 2.
    assert mean_in_use([(500, 2_500)], bins) == [0.5, 1.0, 0.5]
    # Two short calls in the same bin count by their duration, not as two spikes.
    assert mean_in_use([(0, 100), (200, 300)], bins) == [0.2, 0.0, 0.0]
    # Spans outside the bins, and empty ones, add nothing.
    assert mean_in_use([(-2_000, -1_000), (5_000, 6_000), (700, 700)], bins) == [0.0, 0.0, 0.0]


def test_tokens_by_tier_count_ok_calls_only():
    outcomes = [
        o("a", H, 0, 0, 1_000),
        o("b", L, 0, 0, 2_000),
        o("c", M, 0, 0, 2_000, "FAILED"),  # a failed call may span retries: not a held token
    ]
    bins = Bins.covering(outcomes, 1_000)
    assert bins.count == 2
    assert tokens_by_tier(outcomes, bins) == {H: [1.0, 0.0], M: [0.0, 0.0], L: [1.0, 1.0]}


def test_wait_quantiles_per_bin_by_dispatch_time():
    outcomes = [o(f"h{i}", H, 0, 100 * i, 1_000 + 100 * i) for i in range(1, 11)]  # waits 0.1..1.0 s
    outcomes.append(o("late", H, 0, 2_500, 3_000))  # waited 2.5 s, dispatched in bin 2
    outcomes.append(o("x", H, 0, None, 3_000, "EXPIRED"))  # never dispatched: no wait
    bins = Bins(0, 1_000, 3)
    q = wait_quantiles(outcomes, H, bins)
    assert q[50][0] == pytest.approx(0.5)  # 0.1..0.9 s dispatched in bin 0 (1.0 s in bin 1)
    assert q[99][0] == pytest.approx(0.892)
    assert q[50][1] == pytest.approx(1.0)
    assert q[95][2] == pytest.approx(2.5)
    assert wait_quantiles(outcomes, L, bins)[50] == [None, None, None]


def test_bins_refuse_nonsense():
    with pytest.raises(ValueError, match="width_ms"):
        Bins(0, 0, 3)
    assert Bins.covering([], 1_000).count == 0


def test_effective_budget_in_a_document_and_hostile_values():
    steps = BudgetSteps.from_pairs([[2_000, 6], [0, 10]])
    assert steps.times_ms == (0, 2_000) and steps.values == (10.0, 6.0)
    assert effective_budget_of({"effective_budget": steps.as_pairs()}) == steps
    for hostile in (None, "10", [], [["a", "b"]], [[1]], {"t": 1}):
        assert effective_budget_of({"effective_budget": hostile}) is None


def run(name: str, shift_ms: int = 0, *, slow: bool = False) -> RunDocument:
    """60 s of traffic: a chat every 0.5 s (short wait), an analysis every 2 s, briefs in a dump."""
    outcomes = []
    for i in range(120):
        t = shift_ms + 500 * i
        outcomes.append(o(f"{name}:h{i}", H, t, t + (400 if slow else 50), t + 600))
    for i in range(30):
        t = shift_ms + 2_000 * i
        outcomes.append(o(f"{name}:m{i}", M, t, t + 300, t + 3_000))
    for i in range(20):
        outcomes.append(o(f"{name}:l{i}", L, shift_ms, shift_ms + 3_000 * i, shift_ms + 3_000 * i + 2_900))
    return RunDocument("run", name, 10, outcomes)


def test_pictures_side_by_side_share_their_axes(tmp_path: Path):
    a, b = run("inferq"), run("fifo", shift_ms=3_600_000, slow=True)
    a.params["effective_budget"] = [[a.outcomes[0].enqueued_ms, 10], [a.outcomes[0].enqueued_ms + 20_000, 6]]
    tokens = tokens_area_plot([a, b], tmp_path / "tokens.png")
    waits = wait_percentiles_plot([a, b], tmp_path / "waits.png")
    single = tokens_area_plot([a], tmp_path / "one.png")
    # Two runs: twice as wide, as tall (side by side, not stacked).
    h2, w2 = imread(str(tokens)).shape[:2]
    h1, w1 = imread(str(single)).shape[:2]
    assert h2 == h1 and w2 > 1.8 * w1
    assert imread(str(waits)).shape[0] > h1  # a row per tier


def test_queue_wait_and_backlog_put_compared_runs_side_by_side(tmp_path: Path):
    from inferq.tools.report.plots import backlog_plot, queue_wait_plot

    for plot in (queue_wait_plot, backlog_plot):
        one = imread(str(plot([run("a")], tmp_path / "one.png")))
        three = imread(str(plot([run("a"), run("b"), run("c", slow=True)], tmp_path / "three.png")))
        assert one.shape[0] == three.shape[0]  # as tall: not stacked
        assert three.shape[1] > 1.5 * one.shape[1]


def test_pictures_share_x_and_y_between_runs():
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401 - the canvas the module uses

    import inferq.tools.report.pictures as pictures

    captured = {}
    original = pictures._save

    def keep(figure, path):  # type: ignore[no-untyped-def]
        captured["figure"] = figure
        return path

    pictures._save = keep  # type: ignore[assignment]
    try:
        pictures.tokens_area_plot([run("a"), run("b", shift_ms=10_000_000, slow=True)], Path("x.png"))
        left, right = captured["figure"].axes[:2]
        assert left.get_xlim() == right.get_xlim()
        assert left.get_ylim() == right.get_ylim()
        assert left.get_ylim()[1] >= 10  # the budget line is in view
        pictures.wait_percentiles_plot([run("a"), run("b", slow=True)], Path("y.png"))
        axes = captured["figure"].axes
        assert len(axes) == 6  # three tiers x two runs
        high_a, high_b = axes[0], axes[1]
        assert high_a.get_ylim() == high_b.get_ylim() and high_a.get_xlim() == high_b.get_xlim()
    finally:
        pictures._save = original  # type: ignore[assignment]


def test_write_plots_names_its_files(tmp_path: Path):
    paths = write_plots([run("a")], tmp_path)
    assert sorted(p.name for p in paths) == [
        "backlog.png",
        "queue_wait.png",
        "tokens_in_use.png",
        "wait_percentiles.png",
    ]


def fake_prometheus(answer: dict[str, object] | None, status: int = 200) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/query_range"
        assert request.url.params["query"] == "max(inferq_effective_budget)"
        return httpx.Response(status, json=answer)

    return httpx.MockTransport(handler)


def test_effective_budget_is_read_from_prometheus_and_kept_in_the_document(tmp_path: Path, monkeypatch):
    body = {"status": "success", "data": {"result": [{"metric": {}, "values": [[1.0, "10"], [2.0, "7"]]}]}}
    with httpx.Client(transport=fake_prometheus(body)) as client:
        steps = query_range("http://prom:9090", 1_000, 2_000, client=client)
    assert steps == BudgetSteps((1_000, 2_000), (10.0, 7.0))

    doc = run("a")
    real_client = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda **kw: real_client(transport=fake_prometheus(body), **kw))
    assert attach_effective_budget([doc], "http://prom:9090") == []
    assert doc.params["effective_budget"] == [[1_000, 10.0], [2_000, 7.0]]
    write_documents(tmp_path / "r.json", [doc])
    assert effective_budget_of(load_documents(tmp_path / "r.json")[0].params) == steps
    assert "effective_budget" in json.loads((tmp_path / "r.json").read_text())["params"]


@pytest.mark.parametrize(
    ("body", "status", "why"),
    [
        ({"status": "success", "data": {"result": []}}, 200, "no inferq_effective_budget"),
        ({"status": "error", "error": "bad"}, 400, "did not answer (HTTPStatusError)"),
        ({"status": "success", "data": {"result": [{"values": [["x", "y"]]}]}}, 200, "ValueError"),
    ],
)
def test_a_prometheus_without_the_figure_leaves_the_run_as_it_was(monkeypatch, body, status, why):
    doc = run("a")
    real_client = httpx.Client
    monkeypatch.setattr(
        httpx, "Client", lambda **kw: real_client(transport=fake_prometheus(body, status), **kw)
    )
    notes = attach_effective_budget([doc], "http://prom:9090")
    assert len(notes) == 1 and why in notes[0]
    assert "effective_budget" not in doc.params
    assert attach_effective_budget([doc], None) == []
