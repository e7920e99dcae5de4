"""Tell a refusal from an outage when a librdkafka client connects.

librdkafka never gives up on a broker: a wrong password or an untrusted certificate looks, to a
caller waiting on a metadata request, exactly like a broker that is still starting, and it retries
forever. Its ``error_cb`` does say what happened, so `ConnectionWatch` listens there and turns
``_AUTHENTICATION`` (SCRAM refused), ``_SSL`` (handshake failed) and a TLS alert from the broker
(our client certificate refused or missing) into a typed, non-retriable
`KafkaAccessError` that a start-up check raises at once. Anything else (connection refused,
``_ALL_BROKERS_DOWN`` of a broker that is not up yet) is only remembered, to explain a timeout.
"""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka import KafkaError

from inferq.messaging.errors import KafkaAccessError, KafkaAuthenticationError, KafkaTlsError
from inferq.messaging.security import KafkaSecurity

_REFUSED_AUTHENTICATION = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})


class ConnectionWatch:
    """A librdkafka ``error_cb`` remembering the first refusal and the last error of any kind.

    Called from whichever thread serves the client's callbacks; `raise_if_refused` from any other.
    """

    def __init__(self, bootstrap: str, security: KafkaSecurity) -> None:
        self._bootstrap = bootstrap
        self._principal = security.principal
        self._lock = threading.Lock()
        self._refusal: KafkaAccessError | None = None
        self._last: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        refusal = self._refusal_of(error)
        with self._lock:
            self._last = error
            if self._refusal is None:
                self._refusal = refusal

    def saw(self, error: KafkaError) -> None:
        """A request's own error: remembered when it is a refusal, and only then (a request's
        ``_TIMED_OUT`` must not hide the connection error that explains it)."""
        refusal = self._refusal_of(error)
        if refusal is not None:
            with self._lock:
                if self._refusal is None:
                    self._refusal = refusal

    def _refusal_of(self, error: KafkaError) -> KafkaAccessError | None:
        reason = error.str()
        if error.code() in _REFUSED_AUTHENTICATION:
            return KafkaAuthenticationError(
                bootstrap=self._bootstrap, principal=self._principal, reason=reason
            )
        # A TLS alert from the broker (bad or missing client certificate, unknown CA) arrives as a
        # failed receive, but it is the broker's verdict on us, not an outage.
        tls_alert = error.code() == KafkaError._TRANSPORT and "ssl/tls alert" in reason.lower()
        if error.code() == KafkaError._SSL or tls_alert:
            return KafkaTlsError(bootstrap=self._bootstrap, principal=self._principal, reason=reason)
        return None

    def options(self) -> dict[str, Any]:
        """The librdkafka option that installs this watch."""
        return {"error_cb": self}

    @property
    def last_error(self) -> KafkaError | None:
        with self._lock:
            return self._last

    def raise_if_refused(self) -> None:
        """Raise the `KafkaAccessError` librdkafka reported, if any."""
        with self._lock:
            refusal = self._refusal
        if refusal is not None:
            raise refusal
