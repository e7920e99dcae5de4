"""The HTTP limits every service's uvicorn runs with: from the environment, into uvicorn's config."""

from __future__ import annotations

import resource

from starlette.applications import Starlette
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from inferq.serving import HttpLimits, fit_open_files, uvicorn_config
from inferq.tenancy.held import HeldLimits


def test_the_limits_reach_uvicorn_and_the_guarded_protocol(monkeypatch):
    monkeypatch.setenv("INFERQ_HTTP_LIMIT_CONCURRENCY", "64")
    monkeypatch.setenv("INFERQ_HTTP_HEADER_TIMEOUT_S", "2.5")
    config = uvicorn_config(Starlette(), "127.0.0.1", 0)
    assert (config.limit_concurrency, config.timeout_keep_alive, config.backlog) == (64, 5, 2_048)
    assert config.h11_max_incomplete_event_size == 16_384
    assert issubclass(config.http, HttpToolsProtocol)
    assert config.http.limits == HttpLimits(limit_concurrency=64, header_timeout_s=2.5)
    assert config.timeout_graceful_shutdown is None  # unbounded unless asked


def test_the_shutdown_bound_reaches_uvicorn(monkeypatch):
    monkeypatch.setenv("INFERQ_HTTP_GRACEFUL_SHUTDOWN_S", "25")
    assert uvicorn_config(Starlette(), "127.0.0.1", 0).timeout_graceful_shutdown == 25


def test_explicit_limits_win_over_the_environment(monkeypatch):
    monkeypatch.setenv("INFERQ_HTTP_LIMIT_CONCURRENCY", "64")
    limits = HttpLimits(limit_concurrency=7, max_header_bytes=2_048, timeout_keep_alive_s=1)
    config = uvicorn_config(Starlette(), "127.0.0.1", 0, limits=limits)
    assert (config.limit_concurrency, config.timeout_keep_alive) == (7, 1)
    assert config.h11_max_incomplete_event_size == 2_048
    assert config.http.limits is limits


def test_the_default_concurrency_is_far_above_one_tenants_connections():
    # One tenant at its limits must never reach the process's 503 backstop (issue 23, item 1).
    assert HttpLimits().limit_concurrency >= 20 * HeldLimits().connections


def test_the_open_files_limit_is_raised_to_fit_the_connections(monkeypatch, caplog):
    limits = {"now": (1_024, 8_192)}
    monkeypatch.setattr(resource, "getrlimit", lambda _: limits["now"])
    monkeypatch.setattr(resource, "setrlimit", lambda _, value: limits.update(now=value))
    fit_open_files(4_096)
    assert limits["now"] == (4_096 + 256, 8_192)
    limits["now"] = (1_024, 2_048)  # a hard limit too low: raised to it, and said
    fit_open_files(4_096)
    assert limits["now"] == (2_048, 2_048)
    assert "INFERQ_HTTP_LIMIT_CONCURRENCY" in caplog.text
