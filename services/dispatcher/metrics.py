"""The dispatcher's instruments (OpenTelemetry; exported on /metrics).

Per tenant: queue waits and outcomes carry a `tenant` label beside the tier; refusals, calls in
flight and the read-ahead have their own instruments. The label is `tenant_label`'s (the tenant's
name when the tenants file lists it, ``other`` otherwise, ``default`` in open mode), so the label
set stays bounded by the file whatever a producer writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from inferq.dispatcher.errors import BackendError
from inferq.dispatcher.readahead import ReadAhead
from inferq.dispatcher.schedule import Window
from inferq.messaging.records import InferenceResult
from inferq.messaging.tiers import Tier
from inferq.telemetry import meter

# The `status` of a backend call: its HTTP status, or one of these when no answer came.
CALL_OK = "200"
CALL_TIMEOUT = "timeout"
CALL_CONNECTION_ERROR = "connection_error"


def call_status(failure: BackendError | None) -> str:
    """A bounded label for one backend call's end: ``200``, the HTTP status of a refusal (an integer
    of 100-599, so at most 500 values), ``timeout`` or ``connection_error``."""
    if failure is None:
        return CALL_OK
    if failure.timed_out:
        return CALL_TIMEOUT
    if failure.status is not None and 100 <= failure.status <= 599:
        return str(failure.status)
    return CALL_CONNECTION_ERROR


class DispatcherMetrics:
    def __init__(
        self,
        *,
        tokens_in_use: Callable[[], Mapping[Tier, int]],
        tokens_held: Callable[[], Mapping[Tier, int]],
        effective_budget: Callable[[], int],
        tenant_label: Callable[[str], str] = lambda _: "default",
        otel_meter: Meter | None = None,
    ) -> None:
        m = self._meter = otel_meter or meter("inferq.dispatcher")
        self._tenant_label = tenant_label
        self._waiting: dict[Tier, int] = dict.fromkeys(Tier, 0)
        self._paused_partitions = 0
        self._consumer_lag: dict[Tier, int] = {}
        self._backend_calls = m.create_counter(
            "inferq_backend_calls_total",
            description="backend calls ended by tier, status (HTTP code, timeout, connection_error), "
            "tenant, backend",
        )
        self._backend_duration = m.create_histogram(
            "inferq_backend_call_duration_seconds", unit="s", description="backend call durations, by tier"
        )
        self._queue_wait = m.create_histogram(
            "inferq_queue_wait_seconds", unit="s", description="from enqueue to taking a concurrency token"
        )
        self._end_to_end = m.create_histogram(
            "inferq_end_to_end_seconds", unit="s", description="from enqueue to the terminal outcome"
        )
        self._outcomes = m.create_counter(
            "inferq_outcomes_total", description="terminal outcomes by tier, status"
        )
        self._expired = m.create_counter(
            "inferq_expired_total", description="requests answered EXPIRED without an LLM call"
        )
        self._skipped = m.create_counter(
            "inferq_redo_skipped_total", description="records a previous owner completed (commit metadata)"
        )
        self._retries = m.create_counter(
            "inferq_retries_total", description="failed calls queued for a retry"
        )
        self._copies_skipped = m.create_counter(
            "inferq_request_copies_skipped_total",
            description="request records skipped: the same request was answered OK here lately",
        )
        self._chunks = m.create_counter(
            "inferq_stream_chunks_total", description="chunks of streamed answers written, by tier"
        )
        self._failed_mid_stream = m.create_counter(
            "inferq_stream_failed_mid_stream_total",
            description="streamed calls failed after chunks were written (FAILED, no retry), by tier",
        )
        self._evicted = m.create_counter(
            "inferq_evicted_total", description="LOW requests answered EVICTED under pressure"
        )
        self._promoted = m.create_counter(
            "inferq_promoted_total", description="LOW requests served as MEDIUM"
        )
        self._dead_letters = m.create_counter(
            "inferq_dead_letters_total", description="records sent to the DLQ"
        )
        self._clamped = m.create_counter(
            "inferq_clamped_fields_total", description="out-of-range record fields clamped, by field"
        )
        self._refused = m.create_counter(
            "inferq_refused_total",
            description="records refused (dead letter and FAILED) by tenant, cause: invalid, "
            "unknown_tenant, not_entitled; unverified_record (dead letter only: its signature does "
            "not verify)",
        )
        self._unwritable = m.create_counter(
            "inferq_unwritable_total",
            description="records no topic would take (given up; their offsets completed), by kind",
        )

        def per_tier(
            source: Callable[[], Mapping[Tier, int]],
        ) -> Callable[[CallbackOptions], Iterable[Observation]]:
            def observe(_: CallbackOptions) -> Iterable[Observation]:
                values = source()
                return [Observation(values.get(t, 0), {"tier": t.value}) for t in Tier]

            return observe

        m.create_observable_gauge(
            "inferq_tokens_in_use",
            [per_tier(tokens_in_use)],
            description="backend calls in flight, whole group",
        )
        m.create_observable_gauge(
            "inferq_tokens_held", [per_tier(tokens_held)], description="backend calls in flight, this process"
        )
        m.create_observable_gauge(
            "inferq_readahead_waiting",
            [per_tier(lambda: self._waiting)],
            description="requests in the read-ahead: read from Kafka, waiting for a token",
        )
        m.create_observable_gauge(
            "inferq_effective_budget",
            [lambda _: [Observation(effective_budget())]],
            description="concurrency budget after adaptive cuts",
        )
        m.create_observable_gauge(
            "inferq_paused_partitions",
            [lambda _: [Observation(self._paused_partitions)]],
            description="request partitions paused for back-pressure",
        )
        m.create_observable_gauge(
            "inferq_consumer_lag",
            [lambda _: [Observation(n, {"tier": t.value}) for t, n in self._consumer_lag.items()]],
            description="records on this dispatcher's request partitions not fetched yet, by tier",
        )

    def watch_schedule(
        self, *, budget: int, window: Callable[[], Window], effective: Callable[[], int]
    ) -> None:
        """The configured budget, the schedule's window in force and each tier's floor and ceiling
        in it once the adaptive cut is applied (as the scheduler squeezes the window)."""

        def squeezed() -> Window:
            return window().squeezed(budget - min(budget, effective()))

        def limits(pick: Callable[[Window, Tier], int]) -> Callable[[CallbackOptions], Iterable[Observation]]:
            def observe(_: CallbackOptions) -> Iterable[Observation]:
                current = squeezed()
                return [Observation(pick(current, t), {"tier": t.value}) for t in Tier]

            return observe

        m = self._meter
        m.create_observable_gauge(
            "inferq_budget", [lambda _: [Observation(budget)]], description="configured concurrency budget"
        )
        m.create_observable_gauge(
            "inferq_schedule_window_info",
            [lambda _: [Observation(1, {"window": window().name})]],
            description="the schedule's window in force (value 1, name in the label)",
        )
        m.create_observable_gauge(
            "inferq_tier_floor",
            [limits(lambda w, t: w.limits[t].floor)],
            description="slots guaranteed to a tier in the window in force, after adaptive cuts",
        )
        m.create_observable_gauge(
            "inferq_tier_ceiling",
            [limits(lambda w, t: w.limits[t].ceiling)],
            description="most slots a tier may hold in the window in force, after adaptive cuts",
        )

    def watch_circuits(self, states: Callable[[], Mapping[str, int]]) -> None:
        """Each backend's circuit: 0 closed, 1 half-open (probing), 2 open (passed over)."""
        self._meter.create_observable_gauge(
            "inferq_backend_circuit_state",
            [lambda _: [Observation(v, {"backend": name}) for name, v in states().items()]],
            description="each backend's circuit breaker: 0 closed, 1 half-open, 2 open",
        )

    def watch_paused(self, by_tier: Callable[[], Mapping[str, int]]) -> None:
        """Paused partitions per tier, counted when scraped (not at every pause decision)."""
        self._meter.create_observable_gauge(
            "inferq_paused_partitions_by_tier",
            [lambda _: [Observation(n, {"tier": t}) for t, n in by_tier().items()]],
            description="paused partitions by tier (HIGH, MEDIUM, LOW, or retry for the retry topic)",
        )

    def watch_poison(self, ratios: Callable[[], Mapping[str, float]]) -> None:
        def observe(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(r, {"topic": topic}) for topic, r in ratios().items()]

        self._meter.create_observable_gauge(
            "inferq_poison_ratio", [observe], description="share of undecodable records, last 60 s, by topic"
        )

    def watch_tenants(
        self,
        calls: Callable[[], Mapping[str, int]],
        waiting: Callable[[], Mapping[str, int]],
        deferred: Callable[[], int],
    ) -> None:
        """Per tenant label: backend calls running here (its concurrency tokens in use) and requests
        held in the read-ahead; and how many records wait deferred in Kafka."""

        def per_tenant(
            source: Callable[[], Mapping[str, int]],
        ) -> Callable[[CallbackOptions], Iterable[Observation]]:
            def observe(_: CallbackOptions) -> Iterable[Observation]:
                labelled: dict[str, int] = {}
                for tenant, value in source().items():
                    label = self._tenant_label(tenant)
                    labelled[label] = labelled.get(label, 0) + value
                return [Observation(v, {"tenant": label}) for label, v in labelled.items()]

            return observe

        m = self._meter
        m.create_observable_gauge(
            "inferq_tenant_tokens_in_use",
            [per_tenant(calls)],
            description="backend calls in flight by tenant, this process",
        )
        m.create_observable_gauge(
            "inferq_tenant_readahead_waiting",
            [per_tenant(waiting)],
            description="requests in the read-ahead by tenant",
        )
        m.create_observable_gauge(
            "inferq_readahead_deferred",
            [lambda _: [Observation(deferred())]],
            description="records left in Kafka because their tenant was over its read-ahead share",
        )

    def observe_readahead(self, readahead: ReadAhead, paused_partitions: int) -> None:
        for tier in Tier:
            self._waiting[tier] = readahead.held(tier)
        self._paused_partitions = paused_partitions

    def observe_consumer_lag(self, by_tier: Mapping[Tier, int]) -> None:
        self._consumer_lag = dict(by_tier)

    def record_backend_call(
        self,
        tier: Tier,
        failure: BackendError | None,
        seconds: float,
        tenant: str = "default",
        backend: str = "default",
    ) -> None:
        labels = {
            "tier": tier.value,
            "status": call_status(failure),
            "tenant": self._tenant_label(tenant),
            "backend": backend,
        }
        self._backend_calls.add(1, labels)
        self._backend_duration.record(max(0.0, seconds), {"tier": tier.value})

    def record_queue_wait(self, tier: Tier, seconds: float, tenant: str) -> None:
        self._queue_wait.record(max(0.0, seconds), {"tier": tier.value, "tenant": self._tenant_label(tenant)})

    def record_outcome(self, tier: Tier, result: InferenceResult) -> None:
        labels = {
            "tier": tier.value,
            "status": result.status.value,
            "tenant": self._tenant_label(result.tenant),
        }
        self._outcomes.add(1, labels)
        self._end_to_end.record(max(0.0, result.end_to_end_ms / 1000), labels)

    def record_expired(self, tier: Tier, reason: str) -> None:
        self._expired.add(1, {"tier": tier.value, "reason": reason})

    def record_skipped_redo(self) -> None:
        self._skipped.add(1)

    def record_copy_skipped(self, tier: Tier) -> None:
        self._copies_skipped.add(1, {"tier": tier.value})

    def record_retry(self, tier: Tier) -> None:
        self._retries.add(1, {"tier": tier.value})

    def record_chunk(self, tier: Tier) -> None:
        self._chunks.add(1, {"tier": tier.value})

    def record_failed_mid_stream(self, tier: Tier) -> None:
        self._failed_mid_stream.add(1, {"tier": tier.value})

    def record_evicted(self, tier: Tier) -> None:
        self._evicted.add(1, {"tier": tier.value})

    def record_promoted(self, count: int) -> None:
        self._promoted.add(count, {"tier": Tier.LOW.value})

    def record_dead_letter(self, topic: str) -> None:
        self._dead_letters.add(1, {"topic": topic})

    def record_clamped(self, field: str) -> None:
        self._clamped.add(1, {"field": field})

    def record_refused(self, tenant: str, cause: str) -> None:
        self._refused.add(1, {"tenant": self._tenant_label(tenant), "cause": cause})

    def record_unwritable(self, kind: str) -> None:
        self._unwritable.add(1, {"kind": kind})
