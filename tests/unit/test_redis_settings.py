"""One Redis block for the dispatcher: ``INFERQ_REDIS_*`` → `DispatcherSettings.redis`."""

from __future__ import annotations

import subprocess
import sys

import pytest
from redis.asyncio.connection import SSLConnection

from inferq.dispatcher.settings import DispatcherSettings, renamed_variables_in
from inferq.dispatcher.tokens.redis_endpoint import RedisEndpoint
from inferq.dispatcher.tokens.settings import RedisBudgetSettings
from inferq.redaction import redacted_url


def test_every_redis_variable_lands_in_the_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERQ_REDIS_URL", "rediss://redis.example:6380/2")
    monkeypatch.setenv("INFERQ_REDIS_PASSWORD", "hunter2")
    monkeypatch.setenv("INFERQ_REDIS_KEY_PREFIX", "team-a:budget")
    monkeypatch.setenv("INFERQ_REDIS_LEASE_TTL_S", "3")
    monkeypatch.setenv("INFERQ_REDIS_CALL_TIMEOUT_S", "0.25")
    redis = DispatcherSettings().redis
    assert redis.url == "rediss://redis.example:6380/2"
    assert redis.password is not None and redis.password.get_secret_value() == "hunter2"
    assert redis.key_prefix_for("inferq") == "team-a:budget"
    assert (redis.lease_ttl_s, redis.call_timeout_s) == (3.0, 0.25)
    # No second copy of these fields beside the block.
    assert not {"redis_url", "lease_ttl_s"} & set(DispatcherSettings.model_fields)


def test_the_key_prefix_follows_the_topic_prefix_unless_set() -> None:
    assert RedisBudgetSettings().key_prefix_for("staging") == "staging:budget"
    assert RedisBudgetSettings(key_prefix="shared:budget").key_prefix_for("staging") == "shared:budget"


def test_a_password_shows_in_no_repr_even_inside_the_url() -> None:
    settings = RedisBudgetSettings(url="redis://admin:inurl@h:6379/0", password="apart")  # noqa: S106
    endpoint = settings.endpoint()
    assert endpoint.password == "apart"  # noqa: S105 (sent with AUTH, but never shown)
    for text in (repr(settings), str(settings), repr(DispatcherSettings(redis=settings)), repr(endpoint)):
        assert "inurl" not in text and "apart" not in text
        assert "redis://admin:***@h:6379/0" in text
    assert redacted_url("redis://h:6379/0") == "redis://h:6379/0"


def test_a_rediss_url_means_tls() -> None:
    tls = RedisEndpoint("rediss://h:6380/0").client("t")
    plain = RedisEndpoint("redis://h:6379/0").client("t")
    # The pool's own subclasses (they abort a failed connection): TLS for rediss, plain for redis.
    assert issubclass(tls.connection_pool.connection_class, SSLConnection)
    assert not issubclass(plain.connection_pool.connection_class, SSLConnection)


def test_the_old_lease_ttl_variable_is_named_not_silently_ignored() -> None:
    assert renamed_variables_in({"INFERQ_LEASE_TTL_S": "3"}) == [
        "INFERQ_LEASE_TTL_S is no longer read: use INFERQ_REDIS_LEASE_TTL_S"
    ]
    assert renamed_variables_in({"INFERQ_REDIS_LEASE_TTL_S": "3"}) == []


def test_a_dispatcher_without_redis_coordination_does_not_load_redis_py() -> None:
    # About 6 MB of resident memory per dispatcher (the memory bench's baseline saw it).
    script = "import sys, inferq.dispatcher.process, inferq.dispatcher.cli; print('redis' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "False"
