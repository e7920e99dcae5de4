"""How far a consumer group is behind on one partition: the one rule every backlog figure uses.

Ingest's admission (the group's committed offsets), the dispatcher's eviction pressure (its own
fetch positions) and the benchmarks all count the records of a partition not yet consumed this way.
Admission also subtracts what the dispatchers answered beyond their commit point (`unhandled`):
the commit stays at the lowest offset whose outcome is not written yet, so one slow call would
otherwise make every record answered behind it read as backlog.
"""

from __future__ import annotations

from inferq.messaging import commit_metadata


def partition_lag(*, high: int, low: int, committed: int | None) -> int:
    """Records of one partition between the group's position and the high watermark.

    `committed` is the group's next offset to read (a commit, or a consumer's fetch position); None
    or negative (librdkafka's OFFSET_INVALID) means the group has none and would start at the
    earliest record. A position below the low watermark points at records retention already
    deleted, so only what is still there counts.
    """
    start = low if committed is None or committed < 0 else max(committed, low)
    return max(0, high - start)


def unhandled(*, high: int, low: int, committed: int | None, metadata: str | None) -> int:
    """Records of one partition the group has still to handle: its lag, less the offsets its commit
    metadata (``commit_metadata.py``, bounded and distrusted) says are answered already."""
    lag = partition_lag(high=high, low=low, committed=committed)
    if committed is None or committed < 0 or lag == 0:
        return lag
    done = commit_metadata.count_done(metadata, committed, start=max(committed, low), end=high)
    return max(0, lag - done)
