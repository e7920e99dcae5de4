"""One Redis as the dispatcher group's coordination reaches it: the token pool and the shared
per-minute budget each hold a client of the same `RedisEndpoint` (``INFERQ_REDIS_*``, made by
`RedisBudgetSettings.endpoint`).

Its repr redacts the URL and never shows the password; every call of a client is bounded by
``call_timeout_s``, and a client's close by one second more.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from inferq.dispatcher.tokens.settings import RedisTls
from inferq.redaction import redacted_url

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RedisEndpoint:
    """Where Redis is and how it is spoken to; `client` opens one, `close` ends it within a bound."""

    url: str
    password: str | None = field(default=None, repr=False)
    tls: RedisTls | None = None
    call_timeout_s: float = 0.5

    def __post_init__(self) -> None:
        if self.call_timeout_s <= 0:
            raise ValueError(f"call_timeout_s must be positive, got {self.call_timeout_s}")
        if self.tls is not None and urlsplit(self.url).scheme != "rediss":
            raise ValueError("TLS files are for a rediss:// URL")

    def __repr__(self) -> str:
        return f"RedisEndpoint(url={redacted_url(self.url)!r})"

    @property
    def shown(self) -> str:
        """The URL as logs may show it (a password in it redacted)."""
        return redacted_url(self.url)

    def client(self, name: str) -> Redis:
        """A new client named `name` (``CLIENT LIST`` shows it)."""
        return redis_client(self, name)

    async def close(self, client: Redis, what: str) -> None:
        """Close `client`, giving up (with a warning naming `what`) after ``call_timeout_s`` + 1 s."""
        try:
            async with asyncio.timeout(1.0 + self.call_timeout_s):
                await client.aclose()
        except TimeoutError:
            logger.warning("closing the Redis client of %s timed out", what)


class _AbortingDisconnect(AbstractConnection):
    """A connection that drops a failed connection at once.

    redis-py disconnects a connection that failed (an error reply such as a refused password, a
    timeout, a cancelled read) with ``nowait=True``: it closes the stream and does not wait. Over TLS a
    close is a polite shutdown that needs the server's reply, so the socket stayed open after `stop()`
    returned; an event loop that ended then (``asyncio.run`` around start and stop) left it to the
    garbage collector, a ResourceWarning in whatever ran next. A failed connection has nothing left to
    say: aborting it closes the socket at the loop's next turn, TLS or not.
    """

    async def disconnect(self, nowait: bool = False, *args: Any, **kwargs: Any) -> None:
        if nowait and self._writer is not None:
            self._writer.transport.abort()
        await super().disconnect(nowait, *args, **kwargs)


class _PoolConnection(_AbortingDisconnect, Connection):
    pass


class _PoolSSLConnection(_AbortingDisconnect, SSLConnection):
    pass


_ABORTING: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: _PoolConnection,
    SSLConnection: _PoolSSLConnection,
}


def redis_client(endpoint: RedisEndpoint, name: str) -> Redis:
    """A client of `endpoint`: ``rediss://`` means TLS (with its files); every call bounded by
    ``call_timeout_s``; a failed connection aborted (`_AbortingDisconnect`)."""
    client = Redis.from_url(
        endpoint.url,
        password=endpoint.password,  # a password in the URL takes precedence (redis-py's rule)
        socket_timeout=endpoint.call_timeout_s,
        socket_connect_timeout=endpoint.call_timeout_s,
        # One quick retry: a pooled connection broken by a Redis restart fails at once and a fresh
        # one usually works. Every script is idempotent, and our own timeout still bounds the call.
        retry=Retry(NoBackoff(), 1),
        client_name=name,
        **(endpoint.tls.redis_kwargs() if endpoint.tls is not None else {}),
    )
    # from_url picks the connection class from the URL's scheme, whatever is passed: swap in ours after.
    pool = client.connection_pool
    pool.connection_class = _ABORTING.get(pool.connection_class, pool.connection_class)
    return client
