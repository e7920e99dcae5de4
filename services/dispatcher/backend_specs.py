"""The backends a dispatcher may call, as configured: ``INFERQ_DISPATCHER_BACKENDS`` names them (the one of
``INFERQ_DISPATCHER_BACKEND_URL`` is ``default``) and ``INFERQ_DISPATCHER_TIER_BACKENDS`` orders them per tier
(``routing.py`` says how a start picks one).

    INFERQ_DISPATCHER_BACKENDS='{"cheap": {"url": "https://cheap.example/v1", "api_key_env": "CHEAP_API_KEY",
                               "max_concurrency": 4, "preemptible": true}}'
    INFERQ_DISPATCHER_TIER_BACKENDS='{"LOW": ["cheap", "default"], "HIGH": ["default", "cheap"]}'

A backend's key is read from the variable `api_key_env` names, never from this setting, so the
setting can be logged and shown; a variable named but unset stops the dispatcher at start.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from inferq.dispatcher.backend import Backend, ChatBackend
from inferq.dispatcher.circuit import BreakerPolicy
from inferq.dispatcher.routing import DEFAULT_BACKEND, BackendRoutes
from inferq.messaging.tiers import Tier
from inferq.redaction import carries_secret

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")


class BackendSpec(BaseModel):
    """One named backend of INFERQ_DISPATCHER_BACKENDS."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    url: str = Field(max_length=2048)
    # The environment variable holding its API key (unset: no Authorization header).
    api_key_env: str | None = None
    # Its own concurrency limit, calls in flight from this dispatcher (unset: the budget's).
    max_concurrency: int | None = Field(default=None, ge=1, le=10_000)
    # Closing the connection stops its generation and frees its slot (vLLM, TGI, llama.cpp, SGLang):
    # its lent calls (past their tier's ceiling or in the HIGH headroom) may be preempted
    # (``preemption.py``). Off: a hosted
    # API may go on counting an abandoned call.
    preemptible: bool = False

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return backend_url(value, key_setting="api_key_env")

    @field_validator("api_key_env")
    @classmethod
    def _variable_name(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.fullmatch(value):
            raise ValueError("must be an environment variable name (A-Z, 0-9, _)")
        return value


def backend_url(value: str, *, key_setting: str) -> str:
    """`value` if it is an http(s) URL with a host and no credentials, in its user part or in a
    secret-named parameter such as ``?api_key=`` (a URL is shown wherever the setting is, and the
    aiohttp instrumentation records it in every call's span); the key belongs in `key_setting`."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    # A user name, a password or a secret-named parameter (?api_key=...) alike.
    if parts.username is not None or parts.password is not None or carries_secret(value):
        raise ValueError(f"must not carry credentials: the key belongs in {key_setting}")
    return value


def check_backends(backends: Mapping[str, BackendSpec]) -> None:
    for name in backends:
        if name == DEFAULT_BACKEND:
            raise ValueError(
                f"{DEFAULT_BACKEND!r} is INFERQ_DISPATCHER_BACKEND_URL's backend: name the others otherwise"
            )
        if not NAME.fullmatch(name):
            raise ValueError(f"backend name {name!r} must be 1-32 of a-z, 0-9, '_', '-'")


def build_routes(
    *,
    default_url: str,
    default_api_key: str | None,
    backends: Mapping[str, BackendSpec],
    tiers: Mapping[Tier, Sequence[str]],
    policy: BreakerPolicy,
    max_connections: int,
    environ: Mapping[str, str] = os.environ,
) -> BackendRoutes:
    """The clients and routes of the configured backends (`ValueError` naming a key's variable that
    is not set, never a key)."""
    clients: dict[str, Backend] = {
        DEFAULT_BACKEND: ChatBackend(default_url, api_key=default_api_key, max_connections=max_connections)
    }
    for name, spec in backends.items():
        api_key = None
        if spec.api_key_env is not None:
            api_key = environ.get(spec.api_key_env)
            if not api_key:
                raise ValueError(f"backend {name!r}: its key variable {spec.api_key_env} is not set")
        limit = spec.max_concurrency or max_connections
        clients[name] = ChatBackend(spec.url, api_key=api_key, max_connections=limit)
    limits = {name: spec.max_concurrency for name, spec in backends.items() if spec.max_concurrency}
    return BackendRoutes(clients, tiers, max_concurrency=limits, policy=policy)
