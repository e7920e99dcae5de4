"""Backend latency per tier for the simulation: from options or from a recorded run.

A tier's requests go to its model (HIGH: fast, MEDIUM: accurate, LOW: cheap; a promoted LOW
request still goes to the cheap one), so latency is keyed by the request's own tier. Options name
a tier or a model: `HIGH=0.4`, `fast=0.4` and `inferq-fast=0.4` are the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from inferq.messaging.tiers import DEFAULT_MEAN_LATENCY_S, Tier
from inferq.tools.measures import MeasuredRequest
from inferq.tools.report.documents import load_documents, outcome_from_record
from inferq.tools.report.errors import DocumentError
from inferq.tools.traces.files import read_jsonl

MODEL_TIERS: Mapping[str, Tier] = {
    "fast": Tier.HIGH,
    "accurate": Tier.MEDIUM,
    "cheap": Tier.LOW,
    "inferq-fast": Tier.HIGH,
    "inferq-accurate": Tier.MEDIUM,
    "inferq-cheap": Tier.LOW,
}


def tier_of_key(key: str) -> Tier:
    name = key.strip()
    if name.upper() in Tier.__members__:
        return Tier(name.upper())
    try:
        return MODEL_TIERS[name.lower()]
    except KeyError:
        choices = ", ".join([*Tier.__members__, *MODEL_TIERS])
        raise ValueError(f"unknown model or tier {key!r}; one of {choices}") from None


def parse_latency(
    options: Sequence[str], base: Mapping[Tier, float] = DEFAULT_MEAN_LATENCY_S
) -> dict[Tier, float]:
    """`MODEL=SECONDS` options over `base`."""
    latency = dict(base)
    for option in options:
        key, sep, value = option.partition("=")
        if not sep:
            raise ValueError(f"--latency wants MODEL=SECONDS, got {option!r}")
        seconds = float(value)
        if not seconds >= 0:
            raise ValueError(f"latency must be a number of seconds >= 0, got {value!r}")
        latency[tier_of_key(key)] = seconds
    return latency


def mean_inference_s(outcomes: Iterable[MeasuredRequest]) -> dict[Tier, float]:
    """Mean dispatched→completed seconds of OK outcomes, per tier that has any."""
    sums: dict[Tier, int] = {}
    counts: dict[Tier, int] = {}
    for o in outcomes:
        if o.status == "OK" and o.dispatched_ms is not None:
            sums[o.tier] = sums.get(o.tier, 0) + o.completed_ms - o.dispatched_ms
            counts[o.tier] = counts.get(o.tier, 0) + 1
    return {t: sums[t] / counts[t] / 1000 for t in counts}


def recorded_outcomes(path: Path) -> list[MeasuredRequest]:
    """Outcomes of a results JSONL (one `InferenceResult` as JSON per line, as `inferq report`
    writes to `results.jsonl`) or of a simulate/report JSON document."""
    if path.suffix == ".json":
        return [o for doc in load_documents(path) for o in doc.outcomes]
    outcomes = []
    for number, record in enumerate(read_jsonl(path), start=1):
        try:
            outcomes.append(outcome_from_record(record))
        except (KeyError, TypeError, ValueError) as exc:
            raise DocumentError(path, f"record {number} is not a result: {exc!r}") from exc
    return outcomes
