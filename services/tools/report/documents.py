"""The JSON document of one run, real (`inferq report`) or simulated (`inferq simulate --json`).

    {"kind": "run" | "simulation", "name": ..., "budget": 10, "params": {...},
     "requests": {"HIGH": {"submitted": .., "accepted": .., "missing": ..}, ...} | null,
     "summary": {...},            # for readers; recomputed from the outcomes when loaded
     "outcomes": [{"request_id", "tier", "status", "enqueued_at_ms", "dispatched_at_ms",
                   "completed_at_ms", "tenant"}, ...]}

Outcomes use the result schema's field names, so a document's outcomes read like results. A
report file holds several documents as {"runs": [...]}; `load_documents` accepts either shape. An
outcome without `tenant` (a document from before tenants, a simulation) is tenant "default".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from inferq.messaging.tiers import Tier
from inferq.tools.measures import MeasuredRequest
from inferq.tools.report.errors import DocumentError
from inferq.tools.report.stats import RequestCounts, Summary, summarize


@dataclass
class RunDocument:
    kind: str
    name: str
    budget: int
    outcomes: list[MeasuredRequest]
    requests: dict[Tier, RequestCounts] | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> Summary:
        return summarize(self.outcomes, self.budget, self.requests)


def outcome_from_record(record: Mapping[str, Any]) -> MeasuredRequest:
    """An `InferenceResult`-shaped mapping (decoded Avro or JSON) as an outcome."""
    dispatched = record.get("dispatched_at_ms")
    return MeasuredRequest(
        request_id=str(record["request_id"]),
        tier=Tier(str(record["tier"])),
        status=str(record["status"]),
        enqueued_ms=int(record["enqueued_at_ms"]),
        dispatched_ms=None if dispatched is None else int(dispatched),
        completed_ms=int(record["completed_at_ms"]),
        tenant=str(record.get("tenant") or "default"),
    )


def outcome_record(o: MeasuredRequest) -> dict[str, Any]:
    return {
        "request_id": o.request_id,
        "tier": o.tier.value,
        "status": o.status,
        "enqueued_at_ms": o.enqueued_ms,
        "dispatched_at_ms": o.dispatched_ms,
        "completed_at_ms": o.completed_ms,
        "tenant": o.tenant,
    }


def summary_dict(summary: Summary) -> dict[str, Any]:
    data = asdict(summary)
    data["utilization"]["over_run"] = summary.utilization.over_run
    data["utilization"]["while_waiting"] = summary.utilization.while_waiting
    return data


def to_dict(doc: RunDocument) -> dict[str, Any]:
    return {
        "kind": doc.kind,
        "name": doc.name,
        "budget": doc.budget,
        "params": doc.params,
        "requests": None if doc.requests is None else {t.value: asdict(c) for t, c in doc.requests.items()},
        "summary": summary_dict(doc.summary()),
        "outcomes": [outcome_record(o) for o in doc.outcomes],
    }


def from_dict(data: Mapping[str, Any]) -> RunDocument:
    requests = data.get("requests")
    return RunDocument(
        kind=str(data["kind"]),
        name=str(data["name"]),
        budget=int(data["budget"]),
        outcomes=[outcome_from_record(r) for r in data["outcomes"]],
        requests=None
        if requests is None
        else {Tier(t): RequestCounts(**counts) for t, counts in requests.items()},
        params=dict(data.get("params") or {}),
    )


def write_documents(path: Path, docs: Sequence[RunDocument]) -> None:
    """One document as itself, several as {"runs": [...]}."""
    body = to_dict(docs[0]) if len(docs) == 1 else {"runs": [to_dict(d) for d in docs]}
    path.parent.mkdir(parents=True, exist_ok=True)
    # Compact: a document of 10,000 outcomes is a few MB; the table is the human-readable view.
    path.write_text(json.dumps(body, separators=(",", ":")), encoding="utf-8")


def load_documents(path: Path) -> list[RunDocument]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DocumentError(path, exc.strerror or str(exc)) from exc
    except json.JSONDecodeError as exc:
        raise DocumentError(path, f"not JSON (line {exc.lineno}): {exc.msg}") from exc
    try:
        items = data["runs"] if isinstance(data, dict) and "runs" in data else [data]
        return [from_dict(item) for item in items]
    except (KeyError, TypeError, ValueError) as exc:
        raise DocumentError(path, f"not a simulate/report document: {exc!r}") from exc
