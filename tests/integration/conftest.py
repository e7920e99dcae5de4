"""Fixtures of the integration tests that need Redis (the dispatcher group's shared budget)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.coordination.fixture import redis_url_for_tests


def pytest_configure(config: pytest.Config) -> None:
    # Registered here too so --strict-markers accepts it wherever pyproject does not list it yet.
    config.addinivalue_line("markers", "redis: needs a real Redis server (INFERQ_REDIS_URL or redis-server)")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """$INFERQ_REDIS_URL, else a fresh local redis-server for the session. Never skips."""
    with redis_url_for_tests(tmp_path_factory.mktemp("redis")) as url:
        yield url
