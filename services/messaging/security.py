"""How the Kafka clients authenticate and encrypt: one settings block for librdkafka and aiokafka.

``KafkaSecurity`` is read from ``INFERQ_KAFKA_*`` (nested in `KafkaSettings.security`) and turned into
client options only at the edge: `librdkafka_options()` for confluent-kafka's producer, admin and
consumer, `aiokafka_options()` (with an `ssl.SSLContext`) for aiokafka. Three transports:

=============  =============================================================================
``PLAINTEXT``  the default: no TLS, no authentication (a local broker on loopback)
``SSL``        TLS; with ``ssl_cert_file``/``ssl_key_file`` the client certificate is the
               principal (mutual TLS)
``SASL_SSL``   TLS plus SCRAM-SHA-512 (default) or SCRAM-SHA-256 with a user name and password
=============  =============================================================================

``ssl_ca_file`` is the CA that signed the broker's certificate (PEM); without it the system's trust
store is used. The broker's host name is always verified against its certificate.

Passwords are `SecretStr`: they show as ``**********`` in reprs, and validation errors never echo
the input (``hide_input_in_errors``); the plain text exists only in the dicts handed to a client.
"""

from __future__ import annotations

import ssl
from enum import StrEnum
from typing import Any

from pydantic import FilePath, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_SSL = "SASL_SSL"


class SaslMechanism(StrEnum):
    SCRAM_SHA_512 = "SCRAM-SHA-512"
    SCRAM_SHA_256 = "SCRAM-SHA-256"


class KafkaSecurity(BaseSettings):
    """The transport security of every Kafka client of one service (see the module docstring).

    Env: ``INFERQ_KAFKA_SECURITY_PROTOCOL``, ``INFERQ_KAFKA_SASL_MECHANISM``,
    ``INFERQ_KAFKA_SASL_USERNAME``, ``INFERQ_KAFKA_SASL_PASSWORD``, ``INFERQ_KAFKA_SSL_CA_FILE``,
    ``INFERQ_KAFKA_SSL_CERT_FILE``, ``INFERQ_KAFKA_SSL_KEY_FILE``, ``INFERQ_KAFKA_SSL_KEY_PASSWORD``.
    """

    model_config = SettingsConfigDict(
        env_prefix="INFERQ_KAFKA_",
        extra="ignore",
        frozen=True,
        hide_input_in_errors=True,
        use_attribute_docstrings=True,
    )

    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    """PLAINTEXT (no TLS, no authentication), SSL (TLS; mutual with a client certificate) or
    SASL_SSL (TLS plus SCRAM)."""
    sasl_mechanism: SaslMechanism = SaslMechanism.SCRAM_SHA_512
    """The SCRAM mechanism of SASL_SSL."""
    sasl_username: str | None = None
    """The SASL user (SASL_SSL only)."""
    sasl_password: SecretStr | None = None
    """The SASL user's password (SASL_SSL only)."""
    ssl_ca_file: FilePath | None = None
    """The CA that signed the brokers' certificates (PEM); unset: the system's trust store."""
    ssl_cert_file: FilePath | None = None
    """The client certificate (PEM) of mutual TLS, with INFERQ_KAFKA_SSL_KEY_FILE."""
    ssl_key_file: FilePath | None = None
    """The client certificate's private key (PEM)."""
    ssl_key_password: SecretStr | None = None
    """The password of an encrypted INFERQ_KAFKA_SSL_KEY_FILE."""

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSecurity:
        protocol = self.security_protocol
        sasl_set = self.sasl_username is not None or self.sasl_password is not None
        ssl_set = any(
            value is not None
            for value in (self.ssl_ca_file, self.ssl_cert_file, self.ssl_key_file, self.ssl_key_password)
        )
        # Credentials beside a transport that would not use them are a mistake that would otherwise
        # connect in plain text (or without the user) while the operator believes otherwise.
        if protocol is SecurityProtocol.PLAINTEXT and (sasl_set or ssl_set):
            raise ValueError(
                "SASL or TLS settings are set but INFERQ_KAFKA_SECURITY_PROTOCOL is PLAINTEXT; "
                "set it to SSL or SASL_SSL"
            )
        if protocol is SecurityProtocol.SSL and sasl_set:
            raise ValueError(
                "INFERQ_KAFKA_SASL_USERNAME/PASSWORD are set but the protocol is SSL; use SASL_SSL"
            )
        missing_user = self.sasl_username is None or self.sasl_password is None
        if protocol is SecurityProtocol.SASL_SSL and missing_user:
            raise ValueError("SASL_SSL needs INFERQ_KAFKA_SASL_USERNAME and INFERQ_KAFKA_SASL_PASSWORD")
        if (self.ssl_cert_file is None) != (self.ssl_key_file is None):
            raise ValueError("INFERQ_KAFKA_SSL_CERT_FILE and INFERQ_KAFKA_SSL_KEY_FILE go together")
        if self.ssl_key_password is not None and self.ssl_key_file is None:
            raise ValueError("INFERQ_KAFKA_SSL_KEY_PASSWORD is set without INFERQ_KAFKA_SSL_KEY_FILE")
        return self

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol is not SecurityProtocol.PLAINTEXT

    @property
    def principal(self) -> str:
        """Who the broker will take us for, in words (for error messages; never a secret)."""
        if self.security_protocol is SecurityProtocol.SASL_SSL:
            return str(self.sasl_username)
        if self.ssl_cert_file is not None:
            return f"the client certificate {self.ssl_cert_file}"
        return "an anonymous client"

    def librdkafka_options(self) -> dict[str, str]:
        """``security.protocol`` and its SASL and TLS options for confluent-kafka (a new dict)."""
        conf = {"security.protocol": self.security_protocol.value}
        if self.security_protocol is SecurityProtocol.SASL_SSL:
            conf["sasl.mechanisms"] = self.sasl_mechanism.value
            conf["sasl.username"] = str(self.sasl_username)
            conf["sasl.password"] = _reveal(self.sasl_password)
        if self.ssl_ca_file is not None:
            conf["ssl.ca.location"] = str(self.ssl_ca_file)
        if self.ssl_cert_file is not None and self.ssl_key_file is not None:
            conf["ssl.certificate.location"] = str(self.ssl_cert_file)
            conf["ssl.key.location"] = str(self.ssl_key_file)
        if self.ssl_key_password is not None:
            conf["ssl.key.password"] = _reveal(self.ssl_key_password)
        return conf

    def aiokafka_options(self) -> dict[str, Any]:
        """``security_protocol`` and its SASL options and `ssl_context` for aiokafka (a new dict)."""
        conf: dict[str, Any] = {"security_protocol": self.security_protocol.value}
        if self.uses_tls:
            conf["ssl_context"] = self.ssl_context()
        if self.security_protocol is SecurityProtocol.SASL_SSL:
            conf["sasl_mechanism"] = self.sasl_mechanism.value
            conf["sasl_plain_username"] = self.sasl_username
            conf["sasl_plain_password"] = _reveal(self.sasl_password)
        return conf

    def ssl_context(self) -> ssl.SSLContext:
        """A client context: the broker's certificate checked against ``ssl_ca_file`` (else the system
        store) and its host name verified; the client certificate loaded when one is configured."""
        context = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH, cafile=str(self.ssl_ca_file) if self.ssl_ca_file else None
        )
        if self.ssl_cert_file is not None and self.ssl_key_file is not None:
            context.load_cert_chain(
                self.ssl_cert_file,
                self.ssl_key_file,
                password=_reveal(self.ssl_key_password) if self.ssl_key_password else None,
            )
        return context


# librdkafka options that decide how a client authenticates and encrypts (names compared in lower
# case with '_' read as '.', as some clients spell them): ``security.protocol``, every ``sasl.*``,
# ``ssl.*`` and ``https.*`` (OAUTHBEARER's token endpoint), and the ``enable.ssl.*``/``enable.sasl.*``
# switches such as ``enable.ssl.certificate.verification``.
_SECURITY_PREFIXES = ("sasl.", "ssl.", "https.", "enable.ssl.", "enable.sasl.", "enable.https.")


def is_security_option(name: str) -> bool:
    """Whether the librdkafka option `name` belongs to `KafkaSecurity` (and so not to a pass-through:
    the aiokafka clients never see a pass-through, and must be secured exactly as librdkafka's)."""
    normal = name.strip().lower().replace("_", ".")
    return normal == "security.protocol" or normal.startswith(_SECURITY_PREFIXES)


def _reveal(secret: SecretStr | None) -> str:
    return secret.get_secret_value() if secret is not None else ""
