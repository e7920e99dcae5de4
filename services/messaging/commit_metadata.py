"""The dispatcher group's commit metadata: offsets completed beyond the commit point.

Requests of one partition finish in any order; the commit stays at the lowest offset whose outcome
is not yet written, and the offsets already answered beyond it travel in the commit's metadata (as
Confluent's Parallel Consumer does): ``v2:`` then comma-separated offsets or ``a-b`` ranges relative
to the committed offset, then ``;``, e.g. ``v2:2-4,7;`` on a commit at 100 says 102, 103, 104 and
107 are done. The terminator is there because confluent-kafka 2.16 reads the metadata aiokafka
committed as a C string that is not terminated: bytes after it come along (``v1:2`` read back as
``v1:2}U``, measured), and trailing digits would have read as more offsets done (a request skipped,
never called). What follows the first ``;`` is ignored; metadata without one is ignored whole
(``v1:``, written before the terminator, included: its work is redone).

Two readers: the dispatcher that takes a partition over skips those offsets instead of calling the
LLM again, and ingest's admission does not count them as backlog (a slow or stuck commit must not
read as a full tier).

Metadata is read from the broker, where anything with the group's id may have written it, so
`parse` trusts nothing: at most `MAX_SPAN` offsets beyond the commit (the dispatcher never tracks
more than that per partition: ``services/dispatcher/offsets.py``), offsets relative 1 and up (the
committed offset itself is by definition not done), ascending, and at most `LIMIT_BYTES` of text.
Anything else, even one bad part, makes the whole metadata ignored: the work is redone (results are
deduplicated by request id), never skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

PREFIX = "v2:"
END = ";"
# Kafka's default offset.metadata.max.bytes is 4096; a commit with more is refused.
LIMIT_BYTES = 4000
# How far beyond its commit point one dispatcher may complete a partition's records; also the
# largest relative offset `parse` accepts.
MAX_SPAN = 10_000


def _ranges(sorted_offsets: list[int]) -> Iterator[tuple[int, int]]:
    start = prev = sorted_offsets[0]
    for offset in sorted_offsets[1:]:
        if offset != prev + 1:
            yield start, prev
            start = offset
        prev = offset
    yield start, prev


def encode(done: Iterable[int], committed: int, limit_bytes: int = LIMIT_BYTES) -> str:
    """The offsets of `done` beyond `committed` (at most `MAX_SPAN` beyond), cut to `limit_bytes`;
    "" when there are none. An offset left out is simply redone by a next owner."""
    beyond = sorted(o for o in done if committed < o <= committed + MAX_SPAN)
    if not beyond:
        return ""
    parts: list[str] = []
    size = len(PREFIX) + len(END)
    for start, end in _ranges(beyond):
        part = f"{start - committed}" if start == end else f"{start - committed}-{end - committed}"
        if size + len(part) + 1 > limit_bytes:
            break
        parts.append(part)
        size += len(part) + 1
    return PREFIX + ",".join(parts) + END


def _relative(text: str) -> int | None:
    # Digits only: int() would also take "+3", " 3", "3_0" and non-ASCII digits.
    if not text or len(text) > len(str(MAX_SPAN)) or not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if 1 <= value <= MAX_SPAN else None


def parse(text: str | None, committed: int) -> set[int]:
    """Offsets completed beyond `committed`, from a commit's metadata; empty if there are none, if the
    metadata is not ours, or if any part of it is malformed or out of bounds."""
    if not text or not text.startswith(PREFIX) or committed < 0:
        return set()
    body, end, _ = text[len(PREFIX) :].partition(END)  # after the terminator: a reader's garbage
    if not end or len(PREFIX) + len(body) + len(END) > LIMIT_BYTES:
        return set()
    done: set[int] = set()
    previous_end = 0
    for part in body.split(","):
        low_text, dash, high_text = part.partition("-")
        low = _relative(low_text)
        high = _relative(high_text) if dash else low
        if low is None or high is None or high < low or low <= previous_end:
            return set()  # foreign or damaged: redo rather than skip
        done.update(range(committed + low, committed + high + 1))
        previous_end = high
    return done


def count_done(text: str | None, committed: int, *, start: int, end: int) -> int:
    """How many offsets in [`start`, `end`) the metadata of a commit at `committed` says are done."""
    return sum(1 for offset in parse(text, committed) if start <= offset < end)


def readable_metadata(tp: Any) -> str | None:
    """A commit's metadata as confluent-kafka returns it (`TopicPartition.metadata`), as text, or
    None when it cannot be read: with the bytes it reads past the end (see above) it raises
    UnicodeDecodeError when they are not UTF-8, which ended ingest's backlog thread and, in a
    dispatcher taking partitions over, the assignment itself (its partitions were never served)."""
    try:
        metadata = tp.metadata
    except UnicodeDecodeError:
        return None
    return metadata if isinstance(metadata, str) else None
