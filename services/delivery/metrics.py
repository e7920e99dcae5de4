"""The delivery metrics: `inferq_waiters` (callers waiting now, per endpoint kind) and
`inferq_waits_total{endpoint, ended}`: how each wait ended (``outcome``: the result arrived;
``bound``: its time ran out; ``disconnected``: the client left; ``error``: a stream ended with an
error event)."""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from inferq.delivery.hub import WaiterHub


class DeliveryMetrics:
    """Instruments of one service's hub; `ended` counts each wait once, when it ends."""

    def __init__(self, meter: Meter, hub: WaiterHub, *, service: str) -> None:
        self._hub = hub
        self._service = service
        self._ended = meter.create_counter(
            "inferq_waits_total", description="waits for an outcome, by how they ended"
        )
        meter.create_observable_gauge(
            "inferq_waiters", [self._observe], description="callers waiting for an outcome now"
        )

    def _observe(self, _: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._hub.waiters, {"service": self._service})]

    def ended(self, endpoint: str, how: str) -> None:
        self._ended.add(1, {"service": self._service, "endpoint": endpoint, "ended": how})
