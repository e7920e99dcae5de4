"""The previous release's names are still read, below the new ones, with one warning per old name
that names the new one and never the value."""

from __future__ import annotations

import logging
import os

import pytest

from inferq.dispatcher.settings import DispatcherSettings
from inferq.ingest.settings import IngestSettings
from inferq.settings.renamed import log_renamed, renamed_warnings

SECRET = "sk-old-name-secret-1234"  # noqa: S105 - a test value whose absence we check


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("INFERQ_"):
            monkeypatch.delenv(name)


def test_an_old_dispatcher_name_is_still_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERQ_POLICY", "fifo")
    monkeypatch.setenv("INFERQ_DRAIN_TIMEOUT_S", "7")
    monkeypatch.setenv("INFERQ_GROUP_ID", "old-group")
    settings = DispatcherSettings()
    assert (settings.policy, settings.drain_timeout_s, settings.group_id) == ("fifo", 7.0, "old-group")


def test_the_new_name_wins_over_the_old_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERQ_POLICY", "fifo")
    monkeypatch.setenv("INFERQ_DISPATCHER_POLICY", "static")
    assert DispatcherSettings().policy == "static"
    lines = renamed_warnings(DispatcherSettings.RENAMED, os.environ)
    assert lines == [
        "INFERQ_POLICY is deprecated (read for this release only): set INFERQ_DISPATCHER_POLICY instead; "
        "INFERQ_DISPATCHER_POLICY is set too, to another value, and is the one used"
    ]


def test_ingests_old_names_of_shared_values_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERQ_INGEST_ADMISSION_BUDGET", "40")
    monkeypatch.setenv("INFERQ_INGEST_MEAN_LATENCY_S", '{"HIGH": 0.2}')
    monkeypatch.setenv("INFERQ_INGEST_DISPATCHER_GROUP", "their-group")
    settings = IngestSettings()
    assert (settings.budget, settings.typical_latency_s["HIGH"], settings.dispatcher_group) == (
        40,
        0.2,
        "their-group",
    )
    # Set as the dispatcher reads it, the shared name wins for both services.
    monkeypatch.setenv("INFERQ_BUDGET", "12")
    assert IngestSettings().budget == DispatcherSettings().budget == 12


def test_one_name_sets_both_services(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERQ_SCENARIO_TIERS", '{"batch": "MEDIUM"}')
    monkeypatch.setenv("INFERQ_MODEL_FAST", "gpt-fast")
    ingest, dispatcher = IngestSettings(), DispatcherSettings()
    assert ingest.scenario_tiers == dispatcher.scenario_tiers == {"batch": "MEDIUM"}
    assert dispatcher.model_fast == "gpt-fast"
    assert ingest.listed_models == ["gpt-fast", "inferq-accurate", "inferq-cheap"]


def test_one_warning_per_old_name_naming_the_new_one_never_the_value(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("INFERQ_BACKEND_API_KEY", SECRET)
    monkeypatch.setenv("INFERQ_DISPATCHER_BACKEND_API_KEY", SECRET + "-new")
    monkeypatch.setenv("INFERQ_BUDGET", "3")  # a current name: no warning
    monkeypatch.setenv("INFERQ_ADAPTIVE", "false")
    with caplog.at_level(logging.WARNING, logger="inferq.settings"):
        log_renamed([DispatcherSettings], os.environ)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith("INFERQ_ADAPTIVE is deprecated") or messages[1].startswith(
        "INFERQ_ADAPTIVE is deprecated"
    )
    key = next(m for m in messages if m.startswith("INFERQ_BACKEND_API_KEY"))
    assert "set INFERQ_DISPATCHER_BACKEND_API_KEY instead" in key
    assert "is the one used" in key
    assert not [m for m in messages if SECRET in m]
    assert DispatcherSettings().backend_api_key.get_secret_value() == SECRET + "-new"  # type: ignore[union-attr]


def test_an_old_name_equal_to_the_new_one_is_just_deprecated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERQ_INGEST_ADMISSION_BUDGET", "10")
    monkeypatch.setenv("INFERQ_BUDGET", "10")
    assert renamed_warnings(IngestSettings.RENAMED, os.environ) == [
        "INFERQ_INGEST_ADMISSION_BUDGET is deprecated (read for this release only): set INFERQ_BUDGET instead"
    ]
