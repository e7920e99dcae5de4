"""Every secret-bearing URL form is redacted wherever a URL is shown: one function
(`inferq.redaction.redacted_url`) for logs, reprs, ``inferq config show`` and errors."""

from __future__ import annotations

import json
import logging
import socket
import sys

import pytest
from pydantic import ValidationError

from inferq.cli import settings_errors
from inferq.dispatcher.bootstrap import redis_pool
from inferq.dispatcher.settings import DispatcherSettings
from inferq.dispatcher.tokens.settings import RedisBudgetSettings
from inferq.log_format import formatter
from inferq.redaction import masked, redacted_url
from tests.support.loop import in_loop

SECRET = "S3cret-in-url-42"  # noqa: S105 - a test value whose absence we check


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # Redis, every way redis-py takes a password.
        (f"redis://redis.example:6379/0?password={SECRET}", "redis://redis.example:6379/0?password=***"),
        (f"redis://admin:{SECRET}@h:6379/0", "redis://admin:***@h:6379/0"),
        (f"rediss://:{SECRET}@h:6380/0", "rediss://:***@h:6380/0"),
        (f"redis://h/0?db=1&PassWord={SECRET}&x=y", "redis://h/0?db=1&PassWord=***&x=y"),
        # Secret-named query keys, any case, any spelling of the word.
        (f"https://hooks.example/in?token={SECRET}", "https://hooks.example/in?token=***"),
        (f"https://h/v1?pass={SECRET}", "https://h/v1?pass=***"),
        (f"https://h/v1?Secret={SECRET}", "https://h/v1?Secret=***"),
        (f"https://h/v1?api_key={SECRET}&api-version=2024", "https://h/v1?api_key=***&api-version=2024"),
        (f"https://h/v1?KEY={SECRET}", "https://h/v1?KEY=***"),
        (f"https://h/v1?apiKey={SECRET}", "https://h/v1?apiKey=***"),
        (f"https://h/v1?X-Api-Key={SECRET}", "https://h/v1?X-Api-Key=***"),
        (f"https://h/v1?client_secret={SECRET}", "https://h/v1?client_secret=***"),
        (f"https://h/cb#access_token={SECRET}", "https://h/cb#access_token=***"),
        # OTLP endpoint, Kafka (librdkafka's scheme form), an IPv6 host.
        (f"http://otel:4318/v1/traces?auth={SECRET}", "http://otel:4318/v1/traces?auth=***"),
        (f"SASL_SSL://ingest:{SECRET}@b1:9093", "SASL_SSL://ingest:***@b1:9093"),
        (f"http://[::1]:8080/?sig={SECRET}", "http://[::1]:8080/?sig=***"),
    ],
)
def test_each_secret_bearing_url_form_is_redacted(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "redis://h:6379/0",
        "redis://user@h:6379/0",  # a user name alone is no secret
        "https://h/v1?api-version=2024-02-01&keyspace=a&author=me",
        "b1:9092,b2:9092",
        "no URL here",
    ],
)
def test_urls_without_secrets_are_unchanged(url: str) -> None:
    assert redacted_url(url) == url


def test_every_url_inside_a_text_is_redacted() -> None:
    text = f"brokers SASL_SSL://u:{SECRET}@b1:9093,SASL_SSL://u:{SECRET}@b2:9093 refused ('redis://h/0?password={SECRET}')"
    shown = redacted_url(text)
    assert SECRET not in shown
    assert shown.startswith("brokers SASL_SSL://u:***@b1:9093,SASL_SSL://u:***@b2:9093 refused ('redis")


def test_config_show_masks_a_query_password() -> None:
    assert masked({"url": f"redis://h/0?password={SECRET}", "extra": {"sasl.password": SECRET}}) == {
        "url": "redis://h/0?password=***",
        "extra": {"sasl.password": "**********"},
    }


def test_settings_reprs_show_no_query_password() -> None:
    redis = RedisBudgetSettings(url=f"redis://h:6379/0?password={SECRET}")
    for text in (repr(redis), str(redis), repr(redis.endpoint()), redis.endpoint().shown):
        assert SECRET not in text
        assert "redis://h:6379/0?password=***" in text


@pytest.mark.parametrize(
    "url", [f"https://backend.example/v1?api_key={SECRET}", f"https://u:{SECRET}@backend.example/v1"]
)
def test_a_backend_url_with_a_key_in_it_is_refused_without_quoting_it(url: str) -> None:
    with pytest.raises(ValidationError) as refused:
        DispatcherSettings(backend_url=url)
    text = settings_errors(refused.value) + str(refused.value)
    assert "must not carry credentials" in text
    assert SECRET not in text


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@in_loop
async def test_the_dispatchers_redis_start_log_shows_no_password(caplog: pytest.LogCaptureFixture) -> None:
    # coordination=redis, the password in the URL's query, Redis not answering: the pool starts
    # degraded and says so at start, naming Redis by its URL.
    url = f"redis://127.0.0.1:{_closed_port()}/0?password={SECRET}"
    settings = DispatcherSettings(
        coordination="redis", redis=RedisBudgetSettings(url=url, call_timeout_s=0.2)
    )
    pool = redis_pool(settings, lambda: 1)
    caplog.set_level(logging.INFO)
    await pool.start()
    try:
        assert pool.degraded
    finally:
        await pool.stop()
    logged = caplog.text
    assert "Redis at redis://127.0.0.1:" in logged and "?password=***" in logged
    assert SECRET not in logged
    assert SECRET not in repr(pool) + repr(settings)


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_log_line_redacts_urls_whoever_logged_them(log_format: str) -> None:
    # A library's own message and traceback quoting a URL (the OTLP exporter, urllib3, redis-py).
    try:
        raise ConnectionError(f"Max retries exceeded with url: http://otel:4318/v1/traces?token={SECRET}")
    except ConnectionError:
        record = logging.getLogger("urllib3").makeRecord(
            "urllib3",
            logging.WARNING,
            __file__,
            1,
            "retrying %s",
            (f"redis://:{SECRET}@h:6379/0",),
            sys.exc_info(),
        )
    line = formatter(log_format).format(record)
    assert SECRET not in line
    assert "redis://:***@h:6379/0" in line and "traces?token=***" in line
    if log_format == "json":
        assert json.loads(line)["exception"].endswith("traces?token=***")
    # The record itself is untouched for any other handler.
    assert SECRET in record.getMessage()
