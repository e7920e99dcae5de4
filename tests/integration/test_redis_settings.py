"""The dispatcher's one Redis block reaches Redis: the password (AUTH), the lease TTL, the key prefix.

A real redis-server started with ``requirepass``; the pool is built the way the dispatcher builds it
(``INFERQ_REDIS_*`` → `DispatcherSettings.redis` → `bootstrap.redis_pool`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from inferq.dispatcher.bootstrap import redis_pool
from inferq.dispatcher.settings import DispatcherSettings
from inferq.messaging.tiers import Tier
from inferq.tools.redis.fixture import local_redis_for_tests
from inferq.tools.redis.server import LocalRedis

pytestmark = pytest.mark.redis

PASSWORD = f"pw-{uuid.uuid4().hex}"
WRONG = f"nope-{uuid.uuid4().hex}"


@pytest.fixture
def protected_redis(tmp_path: Path) -> Iterator[LocalRedis]:
    """A fresh redis-server that requires PASSWORD."""
    with local_redis_for_tests(tmp_path, password=PASSWORD) as server:
        yield server


def dispatcher_settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> DispatcherSettings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return DispatcherSettings(coordination="redis", dispatcher_id="auth-test")


def assert_secret_nowhere(texts: list[str]) -> None:
    for secret in (PASSWORD, WRONG):
        leaked = [t for t in texts if secret in t]
        assert not leaked, f"a password shows up in: {leaked[:3]}"


def test_the_password_lease_ttl_and_prefix_reach_redis(
    protected_redis: LocalRedis, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    prefix = f"test:{uuid.uuid4().hex[:12]}"
    settings = dispatcher_settings(
        monkeypatch,
        INFERQ_REDIS_URL=protected_redis.url,
        INFERQ_REDIS_PASSWORD=PASSWORD,
        INFERQ_REDIS_LEASE_TTL_S="2.5",
        INFERQ_REDIS_KEY_PREFIX=prefix,
    )
    pool = redis_pool(settings, group_size=lambda: 4)

    async def scenario() -> tuple[bool, int, list[bytes]]:
        await pool.start()
        client = Redis.from_url(protected_redis.url, password=PASSWORD, socket_timeout=2.0)
        try:
            lease = await pool.try_acquire(Tier.HIGH, total_limit=8, tier_limit=8)
            assert lease is not None
            member = f"{pool.owner_id}:{lease.lease_id}"
            seconds, micros = await client.time()
            expires_at_ms = await client.zscore(f"{prefix}:leases:HIGH", member)
            assert expires_at_ms is not None, "the lease is not under the configured key prefix"
            members = await client.zrange(f"{prefix}:leases:HIGH", 0, -1)
            return pool.degraded, int(expires_at_ms) - (seconds * 1000 + micros // 1000), members
        finally:
            await pool.stop()
            await client.aclose()

    degraded, lease_left_ms, members = asyncio.run(scenario())
    assert not degraded, "the pool fell back although the password was right"
    assert len(members) == 1
    # INFERQ_REDIS_LEASE_TTL_S=2.5, not the 6 s default (the lease was taken a moment before).
    assert 1_500 < lease_left_ms <= 2_500
    assert_secret_nowhere(
        [r.getMessage() for r in caplog.records] + [repr(settings), repr(pool), str(settings)]
    )


@pytest.mark.parametrize("password", [WRONG, None], ids=["wrong password", "no password"])
def test_a_refused_password_falls_back_to_the_local_share_and_says_so(
    protected_redis: LocalRedis,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    password: str | None,
) -> None:
    caplog.set_level(logging.DEBUG)
    env = {"INFERQ_REDIS_URL": protected_redis.url}
    if password is not None:
        env["INFERQ_REDIS_PASSWORD"] = password
    settings = dispatcher_settings(monkeypatch, **env)
    pool = redis_pool(settings, group_size=lambda: 4)

    async def scenario() -> tuple[bool, int]:
        await pool.start()
        try:
            granted = 0
            while await pool.try_acquire(Tier.HIGH, total_limit=8, tier_limit=8) is not None:
                granted += 1
                assert granted <= 8
            return pool.degraded, granted
        finally:
            await pool.stop()

    degraded, granted = asyncio.run(scenario())
    assert degraded
    assert granted == 2  # the local share: 8 // 4 dispatchers
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("refused our credentials" in w and "local budget" in w for w in warnings), warnings
    assert_secret_nowhere(
        [r.getMessage() for r in caplog.records]
        + [str(r.exc_info[1]) for r in caplog.records if r.exc_info]
        + [repr(settings), repr(pool), str(settings)]
    )
