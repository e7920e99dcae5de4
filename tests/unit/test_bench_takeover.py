"""The takeover bench's pure parts: session settings as typed, and the summary of its runs."""

from __future__ import annotations

import pytest

from inferq.tools.bench.specs import SessionSetting
from inferq.tools.bench.takeover import RunResult, summarize


def test_a_setting_is_session_over_heartbeat_in_ms() -> None:
    setting = SessionSetting.parse("2000/500")
    assert (setting.session_timeout_ms, setting.heartbeat_interval_ms) == (2000, 500)
    assert setting.env() == {
        "INFERQ_DISPATCHER_SESSION_TIMEOUT_MS": "2000",
        "INFERQ_DISPATCHER_HEARTBEAT_INTERVAL_MS": "500",
    }


@pytest.mark.parametrize("text", ["2000", "2000/", "/500", "two/half", "2000/500/1", ""])
def test_a_malformed_setting_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="SESSION_MS/HEARTBEAT_MS"):
        SessionSetting.parse(text)


def result(takeover: float | None, *, false: int = 0, lost: int = 0) -> RunResult:
    return RunResult("s", takeover, None if takeover is None else takeover + 0.1, 3, false, 100, lost, 4)


def test_the_summary_quotes_the_median_and_counts_what_went_wrong() -> None:
    summary = summarize([result(2.4), result(2.9), result(None, false=1), result(2.1, lost=2)])
    assert summary["runs"] == 4
    assert summary["takeover_median_s"] == 2.4
    assert (summary["takeover_min_s"], summary["takeover_max_s"]) == (2.1, 2.9)
    assert summary["runs_without_takeover"] == 1
    assert summary["false_rebalances"] == 1
    assert summary["lost"] == 2
