"""How fast the group notices a dead dispatcher: the session settings and their bounds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from inferq.dispatcher.errors import SessionTimeoutRefusedError
from inferq.dispatcher.kafka_consumer import Membership
from inferq.dispatcher.settings import DispatcherSettings


def test_the_default_session_takes_over_within_three_seconds() -> None:
    settings = DispatcherSettings()
    assert settings.session_timeout_ms == 2_000
    assert settings.heartbeat_interval_ms == 500
    # Expiry plus one heartbeat of the survivor: the takeover's floor must leave room to rejoin.
    assert settings.session_timeout_ms + settings.heartbeat_interval_ms <= 3_000


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERQ_DISPATCHER_SESSION_TIMEOUT_MS", "6000")
    monkeypatch.setenv("INFERQ_DISPATCHER_HEARTBEAT_INTERVAL_MS", "1500")
    settings = DispatcherSettings()
    assert (settings.session_timeout_ms, settings.heartbeat_interval_ms) == (6000, 1500)


@pytest.mark.parametrize(
    ("session", "heartbeat"),
    [("2000", "1500"), ("2000", "1001"), ("100", "50"), ("400000", "500"), ("2000", "0"), ("2000", "x")],
)
def test_a_session_that_one_late_heartbeat_would_end_is_refused(
    monkeypatch: pytest.MonkeyPatch, session: str, heartbeat: str
) -> None:
    monkeypatch.setenv("INFERQ_DISPATCHER_SESSION_TIMEOUT_MS", session)
    monkeypatch.setenv("INFERQ_DISPATCHER_HEARTBEAT_INTERVAL_MS", heartbeat)
    with pytest.raises(ValidationError):
        DispatcherSettings()


@pytest.mark.parametrize(("session", "heartbeat"), [(2000, 1001), (2000, 0), (1000, -1)])
def test_membership_refuses_heartbeats_that_do_not_fit(session: int, heartbeat: int) -> None:
    with pytest.raises(ValueError, match="heartbeat interval"):
        Membership(session, heartbeat)


def test_a_refused_session_names_both_settings_that_fix_it() -> None:
    error = SessionTimeoutRefusedError(2000)
    assert "group.min.session.timeout.ms to at most 2000" in str(error)
    assert "INFERQ_DISPATCHER_SESSION_TIMEOUT_MS" in str(error)
    assert error.retriable is False
