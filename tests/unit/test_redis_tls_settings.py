"""``rediss://`` with a CA file (and a client certificate) from the one Redis block."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from pydantic import ValidationError
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError

from inferq.dispatcher.settings import DispatcherSettings
from inferq.dispatcher.tokens.redis_endpoint import RedisEndpoint, RedisTls
from inferq.dispatcher.tokens.redis_pool import RedisTokenPool, _failure
from inferq.dispatcher.tokens.settings import RedisBudgetSettings


@pytest.fixture
def pem(tmp_path: Path) -> Path:
    path = tmp_path / "file.pem"
    path.write_text("not read by the settings, only checked to exist\n")
    return path


def test_tls_files_come_from_the_redis_block(monkeypatch: pytest.MonkeyPatch, pem: Path) -> None:
    monkeypatch.setenv("INFERQ_REDIS_URL", "rediss://127.0.0.1:6380/0")
    monkeypatch.setenv("INFERQ_REDIS_CA_FILE", str(pem))
    monkeypatch.setenv("INFERQ_REDIS_CERT_FILE", str(pem))
    monkeypatch.setenv("INFERQ_REDIS_KEY_FILE", str(pem))
    tls = DispatcherSettings().redis.tls()
    assert tls == RedisTls(pem, pem, pem)
    assert tls.redis_kwargs() == {
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": True,
        "ssl_ca_certs": str(pem),
        "ssl_certfile": str(pem),
        "ssl_keyfile": str(pem),
    }


def test_a_plain_url_has_no_tls_and_refuses_tls_files(pem: Path) -> None:
    assert RedisBudgetSettings(url="redis://h:6379/0").tls() is None
    assert RedisBudgetSettings(url="rediss://h:6379/0").tls() == RedisTls()  # the system's CAs
    with pytest.raises(ValidationError, match="not rediss://"):
        RedisBudgetSettings(url="redis://h:6379/0", ca_file=pem)
    with pytest.raises(ValidationError, match="go together"):
        RedisBudgetSettings(url="rediss://h:6379/0", cert_file=pem)
    with pytest.raises(ValidationError, match="ca_file"):
        RedisBudgetSettings(url="rediss://h:6379/0", ca_file=pem.parent / "missing.pem")


def test_a_refused_url_is_not_echoed_with_its_password(pem: Path) -> None:
    with pytest.raises(ValidationError) as caught:
        RedisBudgetSettings(url="redis://u:inurl@h:6379/0", ca_file=pem)
    assert "inurl" not in str(caught.value)


def test_the_client_gets_the_ca_and_the_pool_refuses_tls_files_on_a_plain_url(pem: Path) -> None:
    client = RedisEndpoint("rediss://h:6380/0", tls=RedisTls(pem)).client("t")
    assert client.connection_pool.connection_kwargs["ssl_ca_certs"] == str(pem)
    settings = RedisBudgetSettings(url="rediss://h:6380/0", ca_file=pem)
    pool = RedisTokenPool.from_settings(settings, owner="d0", group_size=lambda: 1)
    assert pool._redis.tls == RedisTls(pem)
    with pytest.raises(ValueError, match="rediss://"):
        RedisEndpoint("redis://h:6379/0", tls=RedisTls(pem))


def test_the_degraded_warning_names_what_went_wrong() -> None:
    assert _failure(AuthenticationError("invalid password")) == "refused our credentials"
    untrusted = RedisConnectionError("Error 1 connecting to 127.0.0.1:6380.")
    untrusted.__cause__ = ssl.SSLCertVerificationError(
        1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"
    )
    assert "certificate our CA file does not trust" in _failure(untrusted)
    assert _failure(RedisConnectionError("Connection refused")) == "unreachable"
