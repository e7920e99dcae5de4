"""Typed errors of the local Kafka broker tooling.

Every error carries a message meant for a human at a terminal: what failed and what to do about it.
"""

from __future__ import annotations


class LocalBrokerError(Exception):
    """Base class of every error raised by ``inferq.tools.broker``."""


class ToolMissingError(LocalBrokerError):
    """A required external tool (Java 17+, Maven) is missing or too old; the message says what to install."""


class JarFetchError(LocalBrokerError):
    """Maven could not fetch the broker's jars; the message carries Maven's output tail."""


class PortInUseError(LocalBrokerError):
    """A port the broker must bind is already taken by another process."""


class BrokerStartError(LocalBrokerError):
    """The broker did not become ready (exited, timed out, or failed to format); carries the log tail."""


class BrokerStopError(LocalBrokerError):
    """The broker process survived SIGTERM and SIGKILL within the allowed time."""


class NoKafkaAvailableError(LocalBrokerError):
    """The test fixture found no way to provide a Kafka broker; the message lists what was tried."""
