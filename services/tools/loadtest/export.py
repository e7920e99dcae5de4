"""`trace export`: a time range of the request topics, decoded, written to a trace file in timestamp order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferq.messaging.codec import request_codec
from inferq.messaging.errors import DecodeError
from inferq.tools.loadtest.source import TopicSource
from inferq.tools.loadtest.tracefile import write_trace


@dataclass
class ExportStats:
    written: int = 0
    undecodable: int = 0  # poison records in the range: left out of the trace, counted here
    by_tier: dict[str, int] = field(default_factory=dict)
    first_ts: int | None = None
    last_ts: int | None = None
    elapsed_s: float = 0.0


def export_trace(
    source: TopicSource,
    path: Path,
    *,
    metadata: dict[str, str],
    on_progress: Callable[[ExportStats], None] | None = None,
    stop: threading.Event | None = None,
) -> ExportStats:
    """Write every decodable request of `source`, oldest first, to `path`.

    When `stop` is set the export ends early with a complete, readable file of what it had read.
    """
    stats = ExportStats()
    decode = request_codec().avro.decode  # copied field by field into the trace file
    progress = on_progress or (lambda _: None)
    started = time.monotonic()

    def records() -> Iterator[dict[str, Any]]:
        for ts, tier, key, value, topic, partition, offset in source.ordered():
            if stop is not None and stop.is_set():
                return
            try:
                request = decode(value)
            except DecodeError:
                stats.undecodable += 1
                continue
            stats.first_ts = ts if stats.first_ts is None else stats.first_ts
            stats.last_ts = ts
            stats.written += 1
            stats.by_tier[tier] = stats.by_tier.get(tier, 0) + 1
            progress(stats)
            yield {
                "timestamp_ms": ts,
                "topic": topic,
                "partition": partition,
                "offset": offset,
                "key": key,
                "request": request,
            }

    write_trace(path, records(), metadata)
    stats.elapsed_s = time.monotonic() - started
    return stats


def summary(stats: ExportStats, path: Path) -> str:
    tiers = ", ".join(f"{t} {n:,}" for t, n in sorted(stats.by_tier.items())) or "none"
    span = ""
    if stats.first_ts is not None and stats.last_ts is not None:
        span = f", spanning {(stats.last_ts - stats.first_ts) / 1000:.1f} s"
    lines = [
        f"exported {stats.written:,} requests to {path} in {stats.elapsed_s:.2f} s{span}",
        f"  by tier: {tiers}; undecodable records left out: {stats.undecodable:,}",
    ]
    return "\n".join(lines)
