"""``INFERQ_KAFKA_EXTRA`` (the librdkafka pass-through) cannot weaken or fork the Kafka security the
settings set: a security option in it is refused at start, naming the option, never its value; the
librdkafka and aiokafka clients get the same protocol and credentials."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys

import pytest
from pydantic import ValidationError

from inferq.cli import settings_errors
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.security import KafkaSecurity

SASL_PASSWORD = "sasl-pw-in-settings-31"  # noqa: S105 - a test value whose absence we check
EXTRA_SECRET = "extra-secret-value-77"  # noqa: S105 - a test value whose absence we check

WEAKENING = [
    "enable.ssl.certificate.verification",
    "ssl.endpoint.identification.algorithm",
    "security.protocol",
    "sasl.mechanisms",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "sasl.oauthbearer.client.secret",
    "ssl.ca.location",
    "ssl.key.password",
    "ssl.cipher.suites",
    "enable.sasl.oauthbearer.unsecure.jwt",
    "https.ca.location",
    "SSL.Endpoint.Identification.Algorithm",  # any case
    "ssl_key_password",  # '_' for '.'
]


def _sasl_ssl() -> KafkaSecurity:
    return KafkaSecurity(security_protocol="SASL_SSL", sasl_username="ingest", sasl_password=SASL_PASSWORD)


def _refusal(**kwargs: object) -> str:
    with pytest.raises(ValidationError) as refused:
        KafkaSettings(**kwargs)
    return settings_errors(refused.value) + "\n" + str(refused.value)


@pytest.mark.parametrize("option", WEAKENING)
def test_each_security_option_in_the_pass_through_is_refused_naming_it(option: str) -> None:
    text = _refusal(security=_sasl_ssl(), extra={option: EXTRA_SECRET})
    assert f"may not set the security option(s) {option}:" in text
    assert EXTRA_SECRET not in text
    assert SASL_PASSWORD not in text


@pytest.mark.parametrize(
    "extra",
    [
        {"enable.ssl.certificate.verification": "false"},
        {"ssl.endpoint.identification.algorithm": "none"},
        {"security.protocol": "PLAINTEXT"},
        {"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": EXTRA_SECRET},
    ],
)
def test_the_pass_through_may_not_set_security_when_the_settings_set_none(extra: dict[str, str]) -> None:
    # PLAINTEXT settings: security through the pass-through would secure librdkafka's clients only.
    text = _refusal(extra=extra)
    assert "may not set the security option(s)" in text
    assert EXTRA_SECRET not in text


def test_several_refused_options_are_all_named() -> None:
    text = _refusal(extra={"sasl.password": EXTRA_SECRET, "ssl.ca.location": "/x", "linger.ms": "5"})
    assert "security option(s) sasl.password, ssl.ca.location:" in text
    assert "linger.ms" not in text


def test_the_brokers_belong_to_bootstrap_servers() -> None:
    assert "use INFERQ_KAFKA_BOOTSTRAP_SERVERS" in _refusal(extra={"bootstrap.servers": "evil:9092"})


def test_brokers_with_credentials_are_refused_without_quoting_them() -> None:
    text = _refusal(bootstrap_servers=f"SASL_SSL://ingest:{EXTRA_SECRET}@broker:9093")
    assert "must not carry credentials" in text
    assert EXTRA_SECRET not in text


@pytest.mark.parametrize(
    "extra", [{"linger.ms": "5"}, {"socket.keepalive.enable": "true", "statistics.interval.ms": "0"}]
)
def test_harmless_options_still_pass_through(extra: dict[str, str]) -> None:
    settings = KafkaSettings(security=_sasl_ssl(), extra=extra)
    conf = settings.admin_config()
    assert {name: conf[name] for name in extra} == extra
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.password"] == SASL_PASSWORD


def test_librdkafka_and_aiokafka_clients_agree() -> None:
    settings = KafkaSettings(
        bootstrap_servers="b1:9093,b2:9093", security=_sasl_ssl(), extra={"linger.ms": "5"}
    )
    librdkafka = settings.producer_config(client_id="ingest")
    aiokafka = settings.aiokafka_config()
    context = aiokafka.pop("ssl_context")
    assert context.check_hostname and context.verify_mode is ssl.CERT_REQUIRED
    assert aiokafka == {
        "bootstrap_servers": librdkafka["bootstrap.servers"],
        "security_protocol": librdkafka["security.protocol"],
        "sasl_mechanism": librdkafka["sasl.mechanisms"],
        "sasl_plain_username": librdkafka["sasl.username"],
        "sasl_plain_password": librdkafka["sasl.password"],
    }
    # librdkafka checks the broker's certificate and host name by default; nothing turned them off.
    assert "enable.ssl.certificate.verification" not in librdkafka
    assert "ssl.endpoint.identification.algorithm" not in librdkafka


def test_an_unvalidated_pass_through_still_cannot_override_security() -> None:
    # Defence in depth: a settings object built without validation (`model_construct`).
    settings = KafkaSettings.model_construct(
        bootstrap_servers="b:9093",
        security=_sasl_ssl(),
        extra={"security.protocol": "PLAINTEXT", "bootstrap.servers": "evil:9092"},
    )
    conf = settings.admin_config()
    assert (conf["security.protocol"], conf["bootstrap.servers"]) == ("SASL_SSL", "b:9093")


@pytest.mark.parametrize("command", [("dispatcher",), ("config", "show", "--service", "ingest")])
def test_a_service_refuses_to_start_naming_the_option_not_its_value(command: tuple[str, ...]) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "INFERQ_KAFKA_EXTRA": json.dumps({"ssl.key.password": EXTRA_SECRET, "linger.ms": "3"}),
    }
    done = subprocess.run(
        [sys.executable, "-m", "inferq", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "may not set the security option(s) ssl.key.password" in done.stderr
    assert EXTRA_SECRET not in done.stdout + done.stderr
