"""The token pool over ``rediss://`` against a real redis-server speaking TLS only, with a password."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import ssl
import threading
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from inferq.dispatcher.tokens.redis_pool import RedisTokenPool
from inferq.dispatcher.tokens.settings import RedisBudgetSettings
from inferq.messaging.tiers import Tier
from inferq.tools.certs import make_ca
from inferq.tools.redis.fixture import local_redis_for_tests
from inferq.tools.redis.server import LocalRedis, RedisServerTls, ping

pytestmark = pytest.mark.redis

POOL_LOGGER = "inferq.dispatcher.tokens.redis_pool"
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


@contextmanager
def refusing_tls_server(certs: RedisServerTls) -> Iterator[int]:
    """A TLS server on a free port that answers a client's first bytes with WRONGPASS, then neither
    reads nor closes until the block ends: a client's polite TLS shutdown never gets its reply."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs.server.cert, certs.server.key)
    done = threading.Event()
    held: list[socket.socket] = []

    def serve(listener: socket.socket) -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue  # the accept timeout only lets the loop see `done`
            conn.settimeout(5.0)
            try:
                tls = context.wrap_socket(conn, server_side=True)
                tls.recv(65536)
                tls.sendall(b"-WRONGPASS invalid username-password pair or user is disabled.\r\n")
            except OSError:
                conn.close()
                continue
            held.append(tls)

    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.1)
        thread = threading.Thread(target=serve, args=(listener,), name="refusing-tls-server")
        thread.start()
        try:
            yield listener.getsockname()[1]
        finally:
            done.set()
            thread.join(5.0)
            for tls in held:
                tls.close()


def test_a_connection_refused_over_tls_is_closed_when_stop_returns(tmp_path: Path) -> None:
    """A refused connection over TLS is aborted, not left waiting for the server's close_notify: the
    socket is closed by the time the event loop that stopped the pool ends."""
    certs = RedisServerTls.generate(tmp_path / "tls")
    with refusing_tls_server(certs) as port:
        settings = RedisBudgetSettings(
            url=f"rediss://127.0.0.1:{port}/0",
            password=PASSWORD,  # type: ignore[arg-type]
            ca_file=certs.ca.cert,
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            degraded, _ = asyncio.run(acquire_twice(pool_of(settings)))
            gc.collect()  # an unclosed socket warns when collected
    assert degraded
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
