"""Trace files read: what `inferq simulate` replays and what `inferq report` counts as submitted.

Two file formats, told apart by their first bytes:

- **JSONL**, one object per line (blank lines skipped). Fields:

  | field | meaning |
  | --- | --- |
  | `created_at_ms` | arrival, epoch ms: when ingest accepted the request (absolute form) |
  | `sent_ms` / `sent_at_ms` | arrival, epoch ms, when `created_at_ms` is absent (a load generator's record) |
  | `offset_ms` | arrival, ms after the trace's start, when no epoch time is given (offset form) |
  | `expire_at_ms` | deadline, epoch ms (absolute form only) |
  | `deadline_ms` | deadline, ms after the arrival; default by tier: HIGH 5 s, MEDIUM 30 s, LOW 12 h |
  | `answer_tier` / `tier` | `HIGH`, `MEDIUM`, `LOW` (ingest's choice first); default by `scenario` |
  | `scenario` | e.g. `realtime_chat`; default `unknown` |
  | `request_id` | default `line-<n>` |
  | `outcome` | a load generator's answer: only `accepted` requests queued |
  | `tenant` | the request's tenant (what `--tenant` of `inferq report` selects by) |

  A request ingest refused never queued: it is not an arrival, it is counted in
  `Trace.unaccepted`. A record is refused when its `outcome` is not `accepted`, or, without an
  `outcome`, when it has a send time but no `created_at_ms`. So the load generator's
  `.inferq/runs/<run_id>/requests.jsonl` is a trace of what the pipeline really received.

- **Avro object container** (`Obj\\x01`), records shaped like `InferenceRequest` (fields
  `created_at_ms`, `expire_at_ms`, `tier`, `request_id`, and `scenario` when present), or records
  holding one in a `request` field (`schemas/trace_record.avsc`, what `inferq trace export` writes).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fastavro

from inferq.messaging.tiers import Tier, TierPolicy
from inferq.tools.traces.arrival import Arrival
from inferq.tools.traces.errors import TraceError

if TYPE_CHECKING:
    from fastavro._read import reader as AvroReader  # the class; `fastavro.reader` is its alias

AVRO_MAGIC = b"Obj\x01"


@dataclass
class Trace:
    arrivals: list[Arrival]
    unaccepted: dict[Tier, int] = field(default_factory=lambda: dict.fromkeys(Tier, 0))
    # Read for one tenant: the records left out because they name no tenant (written before records
    # carried one), so whether they were that tenant's is unknown.
    without_tenant: int = 0

    def submitted(self, tier: Tier) -> int:
        return self.unaccepted[tier] + sum(1 for a in self.arrivals if a.tier is tier)


def parse_record(
    record: Mapping[str, Any],
    *,
    index: int,
    start_ms: int,
    policy: TierPolicy | None = None,
) -> tuple[Tier, Arrival | None]:
    """One trace record as an arrival (None for a refused request), with its tier. Raises
    ValueError/KeyError/TypeError on a malformed record; the caller adds the file and line."""
    scenario = str(record.get("scenario") or "unknown")
    raw_tier = record.get("answer_tier") or record.get("tier")
    tier = Tier(str(raw_tier).upper()) if raw_tier else (policy or TierPolicy()).tier_for(scenario)
    created = _first(record, "created_at_ms", "sent_ms", "sent_at_ms")
    outcome = record.get("outcome")
    if outcome is not None and outcome != "accepted":
        return tier, None  # refused (429, 503) or failed to send: it never queued
    if outcome is None and record.get("created_at_ms") is None and created is not None:
        return tier, None  # sent, never accepted
    deadline = _first(record, "deadline_ms")
    if created is not None:
        expire = _first(record, "expire_at_ms")
        if expire is not None:
            deadline = expire - created
    elif record.get("offset_ms") is not None:
        created = start_ms + int(record["offset_ms"])
        if record.get("expire_at_ms") is not None and deadline is None:
            raise ValueError("an offset_ms arrival needs a relative deadline_ms, not an epoch expire_at_ms")
    else:
        raise ValueError("needs created_at_ms, sent_ms or offset_ms")
    arrival = Arrival(
        offset_ms=created - start_ms,
        scenario=scenario,
        tier=tier,
        deadline_ms=deadline,  # None: the tier's default
        index=index - 1,
        request_id=str(record.get("request_id") or f"line-{index}"),
        start_ms=start_ms,
    )
    return tier, arrival


def _first(record: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        if record.get(name) is not None:
            return int(record[name])
    return None


def build_trace(
    records: Iterable[Mapping[str, Any]],
    *,
    path: Path,
    start_ms: int,
    policy: TierPolicy | None = None,
    tenant: str | None = None,
) -> Trace:
    """The trace of `records`; with `tenant`, of that tenant's records only."""
    trace = Trace([])
    for index, record in enumerate(records, start=1):
        if tenant is not None:
            named = record.get("tenant")
            if named is None:
                trace.without_tenant += 1
                continue
            if named != tenant:
                continue
        try:
            tier, arrival = parse_record(record, index=index, start_ms=start_ms, policy=policy)
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(path, f"bad record: {exc}", line=index) from exc
        if arrival is None:
            trace.unaccepted[tier] += 1
        else:
            trace.arrivals.append(arrival)
    # Stable: arrivals of the same millisecond keep the file's order (Kafka's order within a tier).
    trace.arrivals.sort(key=lambda a: a.created_at_ms)
    return trace


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every non-blank line of `path` as a JSON object."""
    records: list[dict[str, Any]] = []
    try:
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TraceError(path, f"not JSON: {exc.msg}", line=number) from exc
                if not isinstance(value, dict):
                    raise TraceError(path, "not a JSON object", line=number)
                records.append(value)
    except OSError as exc:
        raise TraceError(path, exc.strerror or str(exc)) from exc
    return records


@contextmanager
def avro_container(path: Path, *, named: str | None = None) -> Iterator[AvroReader]:
    """The open reader of the Avro object container `path`; with `named`, the file's records must be
    that schema's. The one place a trace's Avro is opened (`inferq simulate`, `report`, `replay`)."""
    try:
        stream = path.open("rb")
    except OSError as exc:
        raise TraceError(path, f"cannot open: {exc.strerror or exc}") from exc
    with stream:
        try:
            reader = fastavro.reader(stream)
        except (ValueError, EOFError) as exc:
            raise TraceError(path, f"not an Avro object container file: {exc}") from exc
        if named is not None:
            name = reader.writer_schema.get("name") if isinstance(reader.writer_schema, dict) else None
            if name != named:
                raise TraceError(path, f"holds {name!r} records, not {named}")
        yield reader


def avro_records(path: Path, *, named: str | None = None) -> Iterator[dict[str, Any]]:
    """The records of the Avro container `path` in file order (see `avro_container`)."""
    with avro_container(path, named=named) as reader:
        try:
            for record in reader:
                if not isinstance(record, dict):
                    raise TraceError(path, f"a record that is not a record: {type(record).__name__}")
                yield record
        except (ValueError, EOFError) as exc:
            raise TraceError(path, f"unreadable Avro container: {exc}") from exc


def read_avro(path: Path) -> list[dict[str, Any]]:
    # `inferq trace export` wraps each request with where it was read (TraceRecord): unwrap it.
    return [dict(r["request"]) if isinstance(r.get("request"), dict) else dict(r) for r in avro_records(path)]


def load_trace(
    path: Path, *, start_ms: int, policy: TierPolicy | None = None, tenant: str | None = None
) -> Trace:
    """Read a JSONL or Avro container trace; `start_ms` anchors `offset_ms` arrivals; with `tenant`,
    only that tenant's records."""
    try:
        with path.open("rb") as stream:
            head = stream.read(len(AVRO_MAGIC))
    except OSError as exc:
        raise TraceError(path, exc.strerror or str(exc)) from exc
    records = read_avro(path) if head == AVRO_MAGIC else read_jsonl(path)
    return build_trace(records, path=path, start_ms=start_ms, policy=policy, tenant=tenant)
