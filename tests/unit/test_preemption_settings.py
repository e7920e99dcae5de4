"""Which backends may have their calls preempted: off by default; the default backend's setting
under its dispatcher name or its other name INFERQ_BACKEND_PREEMPTIBLE (kept working, no warning);
a named backend's `preemptible` in its INFERQ_DISPATCHER_BACKENDS entry."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from inferq.dispatcher.bootstrap import backend_routes, preemptible_tiers
from inferq.dispatcher.settings import DispatcherSettings, preemptible_backends
from inferq.messaging.tiers import Tier
from inferq.settings.renamed import renamed_warnings


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("INFERQ_"):
            monkeypatch.delenv(name)


def test_no_backend_is_preemptible_by_default() -> None:
    settings = DispatcherSettings()
    assert preemptible_backends(settings) == frozenset()
    assert settings.max_preemptions == 3


@pytest.mark.parametrize("name", ["INFERQ_DISPATCHER_BACKEND_PREEMPTIBLE", "INFERQ_BACKEND_PREEMPTIBLE"])
def test_the_default_backend_is_declared_preemptible_under_either_name(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, "true")
    assert preemptible_backends(DispatcherSettings()) == {"default"}
    assert renamed_warnings(DispatcherSettings.RENAMED, os.environ) == []


def test_a_named_backend_is_preemptible_from_its_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "INFERQ_DISPATCHER_BACKENDS",
        '{"vllm": {"url": "http://vllm:8000/v1", "preemptible": true}, "hosted": {"url": "https://h.example/v1"}}',
    )
    assert preemptible_backends(DispatcherSettings()) == {"vllm"}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("INFERQ_DISPATCHER_BACKEND_PREEMPTIBLE", "maybe"),
        ("INFERQ_DISPATCHER_MAX_PREEMPTIONS", "-1"),
        ("INFERQ_DISPATCHER_MAX_PREEMPTIONS", "1000"),
        ("INFERQ_DISPATCHER_BACKENDS", '{"vllm": {"url": "http://vllm:8000/v1", "preemptible": "often"}}'),
    ],
)
def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        DispatcherSettings()


def test_a_tier_is_lent_every_idle_slot_only_when_every_backend_it_calls_is_preemptible(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INFERQ_BACKEND_PREEMPTIBLE", "true")
    monkeypatch.setenv("INFERQ_DISPATCHER_BACKENDS", '{"hosted": {"url": "https://h.example/v1"}}')
    monkeypatch.setenv("INFERQ_DISPATCHER_TIER_BACKENDS", '{"MEDIUM": ["default", "hosted"]}')
    settings = DispatcherSettings()
    assert preemptible_tiers(settings, backend_routes(settings, None)) == {Tier.HIGH, Tier.LOW}
    monkeypatch.delenv("INFERQ_BACKEND_PREEMPTIBLE")
    settings = DispatcherSettings()
    assert preemptible_tiers(settings, backend_routes(settings, None)) == frozenset()
