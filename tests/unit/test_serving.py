"""The HTTP limits every service's uvicorn runs with: from the environment, into uvicorn's config."""

from __future__ import annotations

from starlette.applications import Starlette
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from inferq.serving import HttpLimits, uvicorn_config


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
