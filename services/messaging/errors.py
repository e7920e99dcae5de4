"""Errors of the messaging layer; each carries the data a caller needs to act on it."""

from __future__ import annotations


class MessagingError(Exception):
    """Base of every error raised by `services.messaging`."""


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

    def __init__(self, missing: list[str], bootstrap: str) -> None:
        names = ", ".join(sorted(missing))
        super().__init__(f"topics missing on {bootstrap}: {names}; create them with `inferq topics create`")
        self.missing = sorted(missing)
