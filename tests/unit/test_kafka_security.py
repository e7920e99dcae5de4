"""One security block configures both Kafka clients; secrets never leave it except into a client."""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from pydantic import SecretStr, ValidationError

from inferq.ingest.settings import IngestSettings
from inferq.messaging.admin import require_topics
from inferq.messaging.connection import ConnectionWatch
from inferq.messaging.errors import (
    KafkaAccessError,
    KafkaAuthenticationError,
    KafkaTlsError,
    MessagingError,
)
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.security import KafkaSecurity, SaslMechanism, SecurityProtocol
from inferq.tools.certs import KeyPair, issue, make_ca

PASSWORD = "s3cret-Pa55"  # noqa: S105 - a test value whose absence we check
KEY_PASSWORD = "k3y-Pa55"  # noqa: S105


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[KeyPair, KeyPair]:
    """A CA and a client certificate whose key is encrypted with KEY_PASSWORD."""
    folder = tmp_path_factory.mktemp("certs")
    ca = make_ca(folder)
    return ca, issue(ca, folder, "ingest", key_password=KEY_PASSWORD)


def sasl_env(monkeypatch: pytest.MonkeyPatch, ca: Path, mechanism: str = "SCRAM-SHA-512") -> None:
    monkeypatch.setenv("INFERQ_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("INFERQ_KAFKA_SASL_MECHANISM", mechanism)
    monkeypatch.setenv("INFERQ_KAFKA_SASL_USERNAME", "ingest")
    monkeypatch.setenv("INFERQ_KAFKA_SASL_PASSWORD", PASSWORD)
    monkeypatch.setenv("INFERQ_KAFKA_SSL_CA_FILE", str(ca))


def test_plaintext_is_the_default_and_adds_nothing() -> None:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:9092")
    assert settings.admin_config() == {
        "bootstrap.servers": "127.0.0.1:9092",
        "security.protocol": "PLAINTEXT",
    }
    assert settings.aiokafka_config() == {
        "bootstrap_servers": "127.0.0.1:9092",
        "security_protocol": "PLAINTEXT",
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_sasl_ssl_from_the_environment_configures_both_clients(
    monkeypatch: pytest.MonkeyPatch, certs: tuple[KeyPair, KeyPair], mechanism: str
) -> None:
    ca, _ = certs
    sasl_env(monkeypatch, ca.cert, mechanism)
    kafka = IngestSettings().kafka  # the nested block reads the same variables in every service
    librdkafka = kafka.producer_config(client_id="inferq-ingest")
    assert {k: librdkafka[k] for k in librdkafka if k.startswith(("security", "sasl", "ssl"))} == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": mechanism,
        "sasl.username": "ingest",
        "sasl.password": PASSWORD,
        "ssl.ca.location": str(ca.cert),
    }
    aio = kafka.aiokafka_config()
    assert (aio["security_protocol"], aio["sasl_mechanism"]) == ("SASL_SSL", mechanism)
    assert (aio["sasl_plain_username"], aio["sasl_plain_password"]) == ("ingest", PASSWORD)
    context = aio["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "inferq local CA"),),)]


def test_ssl_with_a_client_certificate_and_an_encrypted_key(certs: tuple[KeyPair, KeyPair]) -> None:
    ca, client = certs
    security = KafkaSecurity(
        security_protocol=SecurityProtocol.SSL,
        ssl_ca_file=ca.cert,
        ssl_cert_file=client.cert,
        ssl_key_file=client.key,
        ssl_key_password=SecretStr(KEY_PASSWORD),
    )
    assert security.librdkafka_options() == {
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca.cert),
        "ssl.certificate.location": str(client.cert),
        "ssl.key.location": str(client.key),
        "ssl.key.password": KEY_PASSWORD,
    }
    options = security.aiokafka_options()
    assert options["security_protocol"] == "SSL" and "sasl_mechanism" not in options
    assert isinstance(options["ssl_context"], ssl.SSLContext)  # the key decrypted: the chain loaded
    wrong = security.model_copy(update={"ssl_key_password": SecretStr("not-it")})
    with pytest.raises(ssl.SSLError):
        wrong.ssl_context()


def test_every_call_returns_a_new_dict(
    monkeypatch: pytest.MonkeyPatch, certs: tuple[KeyPair, KeyPair]
) -> None:
    sasl_env(monkeypatch, certs[0].cert)
    settings = KafkaSettings()
    first = settings.admin_config()
    first["sasl.username"] = "someone-else"
    assert settings.admin_config()["sasl.username"] == "ingest"


def test_secrets_stay_out_of_reprs_and_dumps(
    monkeypatch: pytest.MonkeyPatch, certs: tuple[KeyPair, KeyPair]
) -> None:
    sasl_env(monkeypatch, certs[0].cert)
    settings = IngestSettings()
    for text in (repr(settings), str(settings), repr(settings.kafka), settings.model_dump_json()):
        assert PASSWORD not in text
    assert "**********" in repr(settings.kafka.security)


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"sasl_username": "ingest", "sasl_password": PASSWORD}, "PROTOCOL is PLAINTEXT"),
        ({"security_protocol": "SASL_SSL", "sasl_username": "ingest"}, "needs INFERQ_KAFKA_SASL_USERNAME"),
        ({"security_protocol": "SSL", "sasl_username": "x", "sasl_password": PASSWORD}, "use SASL_SSL"),
        ({"security_protocol": "SSL", "ssl_cert_file": "CERT"}, "go together"),
        ({"security_protocol": "SSL", "ssl_key_password": PASSWORD}, "without INFERQ_KAFKA_SSL_KEY_FILE"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}, "sasl_mechanism"),
        ({"security_protocol": "SSL", "ssl_ca_file": "/nowhere/ca.pem"}, "ssl_ca_file"),
    ],
)
def test_inconsistent_settings_are_refused_without_echoing_secrets(
    values: dict[str, str], complaint: str, certs: tuple[KeyPair, KeyPair]
) -> None:
    values = {k: str(certs[1].cert) if v == "CERT" else v for k, v in values.items()}
    with pytest.raises(ValidationError) as caught:
        KafkaSecurity(**values)  # type: ignore[arg-type]
    assert complaint in str(caught.value)
    assert PASSWORD not in str(caught.value)


def test_the_principal_names_the_user_or_the_certificate(certs: tuple[KeyPair, KeyPair]) -> None:
    client = certs[1]
    sasl = KafkaSecurity(
        security_protocol=SecurityProtocol.SASL_SSL,
        sasl_mechanism=SaslMechanism.SCRAM_SHA_256,
        sasl_username="results",
        sasl_password=SecretStr(PASSWORD),
    )
    tls = KafkaSecurity(
        security_protocol=SecurityProtocol.SSL, ssl_cert_file=client.cert, ssl_key_file=client.key
    )
    assert sasl.principal == "results"
    assert str(client.cert) in tls.principal
    assert KafkaSecurity().principal == "an anonymous client"


def test_a_refused_login_reported_by_librdkafka_becomes_a_clear_error() -> None:
    watch = ConnectionWatch("127.0.0.1:9092", _sasl("ingest"))
    watch(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    watch.raise_if_refused()  # an outage alone is no refusal: the broker may be starting
    watch(
        KafkaError(
            KafkaError._AUTHENTICATION,
            "SASL authentication error: Authentication failed during authentication due to invalid "
            "credentials with SASL mechanism SCRAM-SHA-512",
        )
    )
    with pytest.raises(KafkaAuthenticationError) as caught:
        watch.raise_if_refused()
    error = caught.value
    assert str(error).startswith(
        "Kafka at 127.0.0.1:9092 refused the credentials of ingest (SASL authentication failed)"
    )
    assert error.principal == "ingest" and not error.retriable
    assert isinstance(error, KafkaAccessError) and isinstance(error, MessagingError)
    assert PASSWORD not in str(error)


def test_a_failed_tls_handshake_becomes_a_clear_error() -> None:
    watch = ConnectionWatch("127.0.0.1:9093", _sasl("dispatcher"))
    watch(KafkaError(KafkaError._SSL, "SSL handshake failed: certificate verify failed"))
    watch(KafkaError(KafkaError._AUTHENTICATION, "later"))  # the first refusal is the one reported
    with pytest.raises(
        KafkaTlsError, match=r"TLS handshake with Kafka at 127\.0\.0\.1:9093 failed for dispatcher"
    ):
        watch.raise_if_refused()


def test_a_tls_alert_from_the_broker_is_a_refusal_not_an_outage() -> None:
    watch = ConnectionWatch("127.0.0.1:9094", KafkaSecurity(security_protocol=SecurityProtocol.SSL))
    watch(KafkaError(KafkaError._TRANSPORT, "Connect to ipv4#127.0.0.1:9094 failed: Connection refused"))
    watch.raise_if_refused()
    watch(
        KafkaError(
            KafkaError._TRANSPORT,
            "ssl://127.0.0.1:9094/bootstrap: Receive failed: error:0A000412:SSL routines::ssl/tls alert "
            "bad certificate: SSL alert number 42 (after 1ms in state APIVERSION_QUERY)",
        )
    )
    with pytest.raises(KafkaTlsError, match="failed for an anonymous client"):
        watch.raise_if_refused()


def test_a_requests_own_error_counts_only_as_a_refusal() -> None:
    watch = ConnectionWatch("127.0.0.1:9092", _sasl("results"))
    watch(KafkaError(KafkaError._TRANSPORT, "Connect to ipv4#127.0.0.1:9092 failed: Connection refused"))
    watch.saw(KafkaError(KafkaError._TIMED_OUT, "Failed to get metadata: Local: Timed out"))
    watch.raise_if_refused()
    last = watch.last_error
    assert last is not None and last.code() == KafkaError._TRANSPORT  # the explanation survives
    watch.saw(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error"))
    with pytest.raises(KafkaAuthenticationError, match="credentials of results"):
        watch.raise_if_refused()


def test_no_broker_at_all_still_fails_within_the_timeout() -> None:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1")  # nothing listens on port 1
    started = time.monotonic()
    with pytest.raises(MessagingError, match=r"did not answer within 2 s") as caught:
        require_topics(settings, ["anything"], timeout_s=2.0)
    assert not isinstance(caught.value, KafkaAccessError)
    assert time.monotonic() - started < 5.0


def _sasl(user: str) -> KafkaSecurity:
    return KafkaSecurity(
        security_protocol=SecurityProtocol.SASL_SSL, sasl_username=user, sasl_password=SecretStr(PASSWORD)
    )
