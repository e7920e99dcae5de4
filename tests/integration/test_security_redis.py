"""The token pool over ``rediss://`` against a real redis-server speaking TLS only, with a password."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.dispatcher.tokens.redis_pool import RedisTokenPool
from services.dispatcher.tokens.settings import RedisBudgetSettings
from services.messaging.tiers import Tier
from services.tools.certs import make_ca
from services.tools.redis.fixture import local_redis_for_tests
from services.tools.redis.server import LocalRedis, ping

pytestmark = pytest.mark.redis

POOL_LOGGER = "services.dispatcher.tokens.redis_pool"
PASSWORD = "r3dis-Pa55-" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedis]:
    with local_redis_for_tests(tmp_path_factory.mktemp("redis-tls"), password=PASSWORD, tls=True) as server:
        yield server


def pool_of(settings: RedisBudgetSettings) -> RedisTokenPool:
    return RedisTokenPool.from_settings(
        settings.model_copy(update={"key_prefix": f"t:{uuid.uuid4().hex[:8]}"}),
        owner="d0",
        group_size=lambda: 2,
    )


async def acquire_twice(pool: RedisTokenPool) -> tuple[bool, dict[Tier, int]]:
    """Start the pool, take two HIGH tokens, return (degraded, tokens in use as the pool sees them)."""
    await pool.start()
    try:
        for _ in range(2):
            assert await pool.try_acquire(Tier.HIGH, total_limit=10, tier_limit=10) is not None
        return pool.degraded, dict(pool.in_use())
    finally:
        await pool.stop()


def test_the_server_speaks_tls_only(tls_redis: LocalRedis) -> None:
    assert tls_redis.url.startswith("rediss://127.0.0.1:")
    assert tls_redis.config.tls is not None
    context = tls_redis.config.tls.client_context()
    assert ping(tls_redis.config.port, 2.0, PASSWORD, context)
    assert not ping(tls_redis.config.port, 2.0, PASSWORD)  # a plain connection gets nowhere
    assert not ping(tls_redis.config.port, 2.0, "wrong-password", context)


def test_the_pool_takes_tokens_over_tls_with_the_password_and_ca(tls_redis: LocalRedis) -> None:
    assert tls_redis.config.tls is not None
    settings = RedisBudgetSettings(
        url=tls_redis.url,
        password=PASSWORD,  # type: ignore[arg-type]
        ca_file=tls_redis.config.tls.ca.cert,
    )
    degraded, in_use = asyncio.run(acquire_twice(pool_of(settings)))
    assert not degraded
    assert in_use[Tier.HIGH] == 2  # counted by Redis, not by the local fallback


def test_an_untrusted_server_certificate_means_degraded_and_logged(
    tls_redis: LocalRedis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    other_ca = make_ca(tmp_path, "some other CA")
    settings = RedisBudgetSettings(url=tls_redis.url, password=PASSWORD, ca_file=other_ca.cert)  # type: ignore[arg-type]
    degraded, in_use = asyncio.run(acquire_twice(pool_of(settings)))
    assert degraded
    assert in_use[Tier.HIGH] == 2  # the local share (10 // 2) served them
    warnings = [
        r.getMessage() for r in caplog.records if r.name == POOL_LOGGER and r.levelno == logging.WARNING
    ]
    assert any("presented a certificate our CA file does not trust" in w for w in warnings), warnings
    assert all(PASSWORD not in r.getMessage() for r in caplog.records)


def test_a_wrong_password_over_tls_means_degraded_and_logged(
    tls_redis: LocalRedis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=POOL_LOGGER)
    assert tls_redis.config.tls is not None
    settings = RedisBudgetSettings(
        url=tls_redis.url,
        password="not-" + PASSWORD,  # type: ignore[arg-type]
        ca_file=tls_redis.config.tls.ca.cert,
    )
    degraded, _ = asyncio.run(acquire_twice(pool_of(settings)))
    assert degraded
    warnings = [r.getMessage() for r in caplog.records if r.name == POOL_LOGGER]
    assert any("refused our credentials" in w for w in warnings), warnings
    assert all(PASSWORD not in w for w in warnings)


def test_a_server_requiring_client_certificates_takes_ours_and_refuses_none(tmp_path: Path) -> None:
    with local_redis_for_tests(tmp_path, password=PASSWORD, tls=True, require_client_cert=True) as server:
        tls = server.config.tls
        assert tls is not None
        with_cert = RedisBudgetSettings(
            url=server.url,
            password=PASSWORD,  # type: ignore[arg-type]
            ca_file=tls.ca.cert,
            cert_file=tls.client.cert,
            key_file=tls.client.key,
        )
        assert asyncio.run(acquire_twice(pool_of(with_cert)))[0] is False
        without = with_cert.model_copy(update={"cert_file": None, "key_file": None})
        assert asyncio.run(acquire_twice(pool_of(without)))[0] is True
