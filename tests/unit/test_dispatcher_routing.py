"""Routing a start to a backend (services/dispatcher/routing.py, backend_specs.py): per tier an
ordered list, each backend behind its breaker and below its own concurrency limit; the settings
that configure them refuse what they cannot use, and never show a key."""

from __future__ import annotations

import asyncio
import logging

import pytest
from pydantic import ValidationError

from inferq.dispatcher.backend_specs import build_routes
from inferq.dispatcher.circuit import BreakerPolicy, State
from inferq.dispatcher.errors import BackendError
from inferq.dispatcher.routing import BackendRoutes, CallEnd, call_end_of
from inferq.dispatcher.settings import DispatcherSettings
from inferq.messaging.tiers import Tier

POLICY = BreakerPolicy(failures=2, storm_429=3, storm_window_ms=1_000, open_ms=1_000)
FAILED = BackendError("backend answered 503", retriable=True, status=503)


class Quiet:
    closed = 0

    async def complete(self, *args, **kwargs):  # pragma: no cover - never called here
        raise AssertionError

    async def stream(self, *args, **kwargs):  # pragma: no cover - never called here
        raise AssertionError

    async def close(self) -> None:
        self.closed += 1


def two_backends(**kwargs) -> BackendRoutes:
    return BackendRoutes(
        {"default": Quiet(), "spare": Quiet()},
        {Tier.HIGH: ["default", "spare"], Tier.LOW: ["spare", "default"]},
        policy=POLICY,
        **kwargs,
    )


def call(routes: BackendRoutes, tier: Tier, now_ms: int, failure: BackendError | None) -> str:
    route = routes.choose(tier, now_ms)
    assert route is not None
    probe = routes.started(route, now_ms)
    routes.ended(route, failure, now_ms, probe=probe)
    return route.name


def test_each_tier_starts_on_its_first_backend_and_unlisted_tiers_on_the_default():
    routes = two_backends()
    assert routes.choose(Tier.HIGH, 0).name == "default"
    assert routes.choose(Tier.LOW, 0).name == "spare"
    assert routes.choose(Tier.MEDIUM, 0).name == "default"


def test_a_failing_backend_is_passed_over_then_probed_and_its_traffic_comes_back(caplog):
    routes = two_backends()
    with caplog.at_level(logging.WARNING, logger="inferq.dispatcher"):
        assert [call(routes, Tier.HIGH, 0, FAILED) for _ in range(2)] == ["default", "default"]
        assert call(routes, Tier.HIGH, 10, None) == "spare"
        assert routes.states(10) == {"default": State.OPEN, "spare": State.CLOSED}
        assert routes.gauge(10) == {"default": 2, "spare": 0}
        assert call(routes, Tier.HIGH, 1_000, None) == "default"  # the probe answers
        assert routes.choose(Tier.HIGH, 1_001).name == "default"
    messages = [r.getMessage() for r in caplog.records]
    assert any("'default': circuit open (2 failures in a row)" in m for m in messages), messages
    assert any("'default': circuit closed" in m for m in messages), messages


def test_while_the_probe_is_out_the_tier_goes_on_with_the_next_backend():
    routes = two_backends()
    for _ in range(2):
        call(routes, Tier.HIGH, 0, FAILED)
    probe = routes.choose(Tier.HIGH, 1_000)
    assert routes.started(probe, 1_000), "the probe"
    assert probe.name == "default"
    assert routes.choose(Tier.HIGH, 1_001).name == "spare"


def test_a_tier_whose_backends_are_all_open_waits():
    routes = two_backends()
    for _ in range(2):
        call(routes, Tier.HIGH, 0, FAILED)
    for _ in range(2):
        call(routes, Tier.LOW, 0, FAILED)
    assert routes.choose(Tier.HIGH, 500) is None
    assert routes.choose(Tier.HIGH, 1_000) is not None  # a probe may go


def test_a_backend_at_its_own_limit_sends_the_next_start_to_the_next_backend():
    routes = two_backends(max_concurrency={"default": 1})
    first = routes.choose(Tier.HIGH, 0)
    assert not routes.started(first, 0), "closed: no probe"
    assert routes.choose(Tier.HIGH, 0).name == "spare"
    routes.ended(first, None, 1)
    assert routes.choose(Tier.HIGH, 1).name == "default"


def test_one_backend_has_no_breaker_it_is_always_called(caplog):
    routes = BackendRoutes.single(Quiet())
    for _ in range(20):
        call(routes, Tier.HIGH, 0, FAILED)
    assert routes.choose(Tier.HIGH, 0).name == "default"
    # Nothing says it was passed over: no circuit opens (the log, the gauge and its alert).
    assert "circuit open" not in caplog.text
    assert routes.gauge(0) == {"default": 0}
    assert routes.rate_key(routes.choose(Tier.HIGH, 0), "inferq-fast") == "inferq-fast"


def test_with_several_backends_each_has_its_own_rate_minute():
    routes = two_backends()
    assert routes.rate_key(routes.choose(Tier.LOW, 0), "inferq-cheap") == "spare/inferq-cheap"


@pytest.mark.parametrize(
    ("failure", "cut", "end"),
    [
        (None, False, CallEnd.ANSWERED),
        (BackendError("x", retriable=False, status=400), False, CallEnd.ANSWERED),
        (BackendError("x", retriable=True, status=429), False, CallEnd.RATE_LIMITED),
        (FAILED, False, CallEnd.FAILED),
        (BackendError.timeout(2.0), False, CallEnd.FAILED),
        (BackendError("connection refused", retriable=True), False, CallEnd.FAILED),
        (BackendError.timeout(2.0), True, CallEnd.NEUTRAL),
    ],
)
def test_how_a_calls_end_counts_for_its_breaker(failure, cut, end):
    assert call_end_of(failure, cut=cut) is end


def test_closing_the_routes_closes_every_backend():
    a, b = Quiet(), Quiet()
    asyncio.run(BackendRoutes({"default": a, "spare": b}).close())
    assert (a.closed, b.closed) == (1, 1)


def settings(monkeypatch, **env: str) -> DispatcherSettings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return DispatcherSettings()


def test_backends_and_tier_orders_from_the_environment(monkeypatch):
    s = settings(
        monkeypatch,
        INFERQ_DISPATCHER_BACKENDS='{"cheap": {"url": "http://127.0.0.1:9/v1", "max_concurrency": 4}}',
        INFERQ_DISPATCHER_TIER_BACKENDS='{"LOW": ["cheap", "default"]}',
    )
    routes = build_routes(
        default_url=s.backend_url,
        default_api_key=None,
        backends=s.backends,
        tiers=s.tier_backends,
        policy=POLICY,
        max_connections=10,
    )
    assert routes.order(Tier.LOW) == ("cheap", "default")
    assert routes.order(Tier.HIGH) == ("default",)
    assert [r.max_concurrency for r in routes.routes()] == [None, 4]


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"INFERQ_DISPATCHER_TIER_BACKENDS": '{"LOW": ["nowhere"]}'}, "unknown backends ['nowhere']"),
        ({"INFERQ_DISPATCHER_TIER_BACKENDS": '{"LOW": []}'}, "LOW lists no backend"),
        ({"INFERQ_DISPATCHER_TIER_BACKENDS": '{"LOW": ["default", "default"]}'}, "lists a backend twice"),
        ({"INFERQ_DISPATCHER_TIER_BACKENDS": '{"LOW": "default"}'}, "valid list"),
        ({"INFERQ_DISPATCHER_TIER_BACKENDS": '{"URGENT": ["default"]}'}, "URGENT"),
        ({"INFERQ_DISPATCHER_BACKENDS": '{"default": {"url": "http://a/v1"}}'}, "name the others otherwise"),
        ({"INFERQ_DISPATCHER_BACKENDS": '{"Bad Name!": {"url": "http://a/v1"}}'}, "must be 1-32 of"),
        ({"INFERQ_DISPATCHER_BACKENDS": '{"x": {"url": "file:///etc/passwd"}}'}, "http:// or https://"),
        (
            {"INFERQ_DISPATCHER_BACKENDS": '{"x": {"url": "https://user:sk-1@a/v1"}}'},
            "the key belongs in api_key_env",
        ),
        (
            {"INFERQ_DISPATCHER_BACKEND_URL": "https://user:sk-1@a/v1"},
            "the key belongs in INFERQ_DISPATCHER_BACKEND_API_KEY",
        ),
        ({"INFERQ_DISPATCHER_BACKEND_URL": "ftp://a/v1"}, "http:// or https://"),
        (
            {"INFERQ_DISPATCHER_BACKENDS": '{"x": {"url": "http://a/v1", "max_concurrency": 0}}'},
            "greater than or equal",
        ),
        ({"INFERQ_DISPATCHER_BACKENDS": '{"x": {"url": "http://a/v1", "api_key": "sk-1"}}'}, "Extra inputs"),
        (
            {"INFERQ_DISPATCHER_BACKENDS": '{"x": {"url": "http://a/v1", "api_key_env": "a b"}}'},
            "variable name",
        ),
        ({"INFERQ_DISPATCHER_BACKENDS": '{"x": {"url": "' + "h" * 3000 + '"}}'}, "at most 2048"),
        ({"INFERQ_DISPATCHER_BREAKER_OPEN_S": "0"}, "greater than 0"),
        (
            {
                "INFERQ_DISPATCHER_BACKENDS": '{"spare": {"url": "http://a/v1"}}',
                "INFERQ_DISPATCHER_RATE_LIMITS": '{"spare/m": {"rpm": 5}, "m": {"rpm": 5}}',
            },
            "names each model <backend>/<model>: ['m'] name no backend",
        ),
        ({"INFERQ_DISPATCHER_BREAKER_FAILURES": "many"}, "valid integer"),
    ],
)
def test_settings_it_cannot_use_are_refused_saying_why(monkeypatch, env, says):
    with pytest.raises(ValidationError, match=says.replace("(", r"\(").replace("[", r"\[")):
        settings(monkeypatch, **env)


def test_with_several_backends_rate_limits_name_their_backend(monkeypatch):
    s = settings(
        monkeypatch,
        INFERQ_DISPATCHER_BACKENDS='{"spare": {"url": "http://a/v1"}}',
        INFERQ_DISPATCHER_RATE_LIMITS='{"spare/m": {"rpm": 5}, "default/org/m": {"tpm": 900}}',
    )
    assert set(s.rate_limits) == {"spare/m", "default/org/m"}


def test_a_keys_variable_unset_stops_the_start_naming_the_variable_never_a_key(monkeypatch):
    s = settings(
        monkeypatch,
        INFERQ_DISPATCHER_BACKENDS='{"cheap": {"url": "http://a/v1", "api_key_env": "CHEAP_KEY"}}',
    )
    kwargs = dict(
        default_url=s.backend_url,
        default_api_key="sk-default-secret",
        backends=s.backends,
        tiers=s.tier_backends,
        policy=POLICY,
        max_connections=10,
    )
    with pytest.raises(ValueError, match="CHEAP_KEY is not set") as refused:
        build_routes(environ={}, **kwargs)
    assert "sk-" not in str(refused.value)
    routes = build_routes(environ={"CHEAP_KEY": "sk-cheap-secret"}, **kwargs)
    assert "sk-cheap-secret" not in repr(s) and "sk-cheap-secret" not in str(routes.routes())


def test_a_request_on_its_last_attempt_is_never_the_probe():
    routes = two_backends()
    for _ in range(2):
        call(routes, Tier.HIGH, 0, FAILED)
    assert routes.choose(Tier.HIGH, 1_000, may_probe=False).name == "spare"
    assert routes.choose(Tier.HIGH, 1_000, may_probe=True).name == "default"


def test_a_backend_out_of_service_is_one_whose_circuit_is_not_closed_and_one_backend_always_serves():
    routes = two_backends()
    default = routes.choose(Tier.HIGH, 0)
    assert routes.in_service(default, Tier.HIGH, 0)
    for _ in range(2):
        call(routes, Tier.HIGH, 0, FAILED)
    assert not routes.in_service(default, Tier.HIGH, 0)  # open
    assert not routes.in_service(default, Tier.HIGH, 1_000)  # half-open
    # MEDIUM lists it alone and calls it whatever its breaker says: for MEDIUM it serves.
    assert routes.in_service(default, Tier.MEDIUM, 0)
    single = BackendRoutes.single(Quiet())
    only = single.choose(Tier.HIGH, 0)
    for _ in range(20):
        call(single, Tier.HIGH, 0, FAILED)
    assert single.in_service(only, Tier.HIGH, 0)
