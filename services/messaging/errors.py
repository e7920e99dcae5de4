"""Errors of the messaging layer; each carries the data a caller needs to act on it.

::

    MessagingError
    ├── DecodeError                  bytes that are not one of our records (poison)
    │   └── UnknownSchemaError       a fingerprint this process holds no schema for
    ├── MissingTopicsError           the broker lacks topics a service needs
    └── KafkaAccessError             the broker refused us at connection (not retriable)
        ├── KafkaAuthenticationError SASL: wrong user or password
        └── KafkaTlsError            TLS: untrusted broker certificate, refused client certificate
"""

from __future__ import annotations


class MessagingError(Exception):
    """Base of every error raised by `inferq.messaging`."""


class DecodeError(MessagingError):
    """Bytes that cannot be decoded as one of our records: a poison record, never worth a retry."""

    retriable = False

    def __init__(self, reason: str, *, raw_size: int) -> None:
        super().__init__(f"cannot decode record ({raw_size} bytes): {reason}")
        self.reason = reason
        self.raw_size = raw_size


class UnknownSchemaError(DecodeError):
    """A single-object header whose fingerprint names no schema this process holds."""

    def __init__(self, fingerprint: bytes, *, raw_size: int) -> None:
        super().__init__(f"unknown schema fingerprint {fingerprint.hex()}", raw_size=raw_size)
        self.fingerprint = fingerprint


class MissingTopicsError(MessagingError):
    """A service started against a broker that lacks some of its topics."""

    def __init__(self, missing: list[str], bootstrap: str, *, principal: str | None = None) -> None:
        names = ", ".join(sorted(missing))
        # With an authorizer, metadata hides the topics a principal may not describe: "missing" may
        # then mean "not allowed", and creating them again would not help.
        hint = (
            f"; or, on a broker with ACLs, {principal} may not use them (`inferq acls apply`)"
            if principal is not None
            else ""
        )
        super().__init__(
            f"topics missing on {bootstrap}: {names}; create them with `inferq topics create`{hint}"
        )
        self.missing = sorted(missing)


class KafkaAccessError(MessagingError):
    """The broker refused this client when it connected (credentials, certificates): a configuration
    error, so a service stops at start-up rather than retrying. Never carries a secret."""

    retriable = False

    def __init__(self, message: str, *, bootstrap: str, principal: str, reason: str) -> None:
        super().__init__(message)
        self.bootstrap = bootstrap
        self.principal = principal
        self.reason = reason


class KafkaAuthenticationError(KafkaAccessError):
    """SASL authentication failed: a wrong user name or password, or a user the broker does not know."""

    def __init__(self, *, bootstrap: str, principal: str, reason: str) -> None:
        super().__init__(
            f"Kafka at {bootstrap} refused the credentials of {principal} (SASL authentication failed): "
            f"{reason}",
            bootstrap=bootstrap,
            principal=principal,
            reason=reason,
        )


class KafkaTlsError(KafkaAccessError):
    """The TLS handshake failed: the broker's certificate is not trusted by our CA file (or its name
    does not match), or the broker refused our client certificate."""

    def __init__(self, *, bootstrap: str, principal: str, reason: str) -> None:
        super().__init__(
            f"TLS handshake with Kafka at {bootstrap} failed for {principal}: {reason} "
            "(check INFERQ_KAFKA_SSL_CA_FILE and the client certificate)",
            bootstrap=bootstrap,
            principal=principal,
            reason=reason,
        )
