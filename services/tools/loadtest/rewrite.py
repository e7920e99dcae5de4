"""Rewriting a recorded request for replay, in place in its Avro bytes where that is safe.

A replayed request is a new request: its id goes into the run's namespace (``<run_id>:<id>``),
it is created now, it keeps its deadline length (``expire_at_ms - created_at_ms``), and it is a
first attempt. Decoding and re-encoding the whole record with fastavro costs ~30 µs a record on
a 2-core machine, which caps replay far below 100,000 records/s. But the fields to change are the
first ones of the record: request_id, tenant, origin_region, scenario, tier, created_at_ms,
expire_at_ms, attempt, then everything else unchanged (a recorded webhook is dropped: a load test
never calls a caller's endpoint). So the fast path reads three short string
lengths, two 6-byte varints and one byte, and splices new bytes in front of the untouched tail
(~2 µs). Anything unusual takes the slow, exact path: another writer schema version, a string of
64 bytes or more (2-byte length), a timestamp whose varint is not 6 bytes (before 1974 or after
2039), an attempt over 63, a `not_before_ms` set (a retry record), a streamed request, a
`callback_url` or an embedding request.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace

from inferq.messaging.codec import TypedCodec, request_codec
from inferq.messaging.records import InferenceRequest

# The 13 bytes after `tier`: created_at_ms and expire_at_ms as 6-byte varints, attempt as 1 byte.
# A varint byte has its high bit set exactly when more bytes follow; the low bit of a zigzag
# varint's first byte is the sign, checked too so the deadline arithmetic below holds.
_VARINTS = 13
_MASK = int.from_bytes(b"\x81" + b"\x80" * 5 + b"\x81" + b"\x80" * 6, "little")
_SHAPE = int.from_bytes(b"\x80" * 5 + b"\x00" + b"\x80" * 5 + b"\x00" + b"\x00", "little")
_FIRST_ATTEMPT = b"\x02"  # zigzag varint of 1

Rewrite = Callable[[bytes], bytes | None]


def zigzag_varint(value: int) -> bytes:
    """Avro's encoding of an int or long: zigzag, then base-128 varint, low group first."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _six_groups(v: int) -> int:
    """The 42-bit number held in a 6-byte varint read as a little-endian integer."""
    return (
        (v & 0x7F)
        | (v >> 1 & 0x3F80)
        | (v >> 2 & 0x1FC000)
        | (v >> 3 & 0xFE00000)
        | (v >> 4 & 0x7F0000000)
        | (v >> 5 & 0x3F800000000)
    )


class Rewriter:
    """Rewrites recorded `InferenceRequest` bytes for one replay run; filters by scenario on the way.

    `at(now_ms)` returns the rewrite function for one instant (a batch of records sent together);
    it returns None for a record filtered out by scenario. Undecodable records raise `DecodeError`.
    """

    def __init__(
        self,
        run_id: str,
        *,
        scenarios: Collection[str] | None = None,
        codec: TypedCodec[InferenceRequest] | None = None,
    ) -> None:
        self.run_id = run_id
        self.codec = codec or request_codec()
        self.scenarios = frozenset(scenarios) if scenarios else None
        self._prefix = f"{run_id}:".encode()
        self._scenario_bytes = frozenset(s.encode() for s in self.scenarios) if self.scenarios else None
        self.slow = 0  # records that took the decode/encode path: a test and a benchmark watch it

    def rewrite(self, raw: bytes, now_ms: int) -> bytes | None:
        return self.at(now_ms)(raw)

    def at(self, now_ms: int) -> Rewrite:
        header = self.codec.avro.header
        prefix, plen = self._prefix, len(self._prefix)
        wanted = self._scenario_bytes
        created = zigzag_varint(now_ms)
        # Deadline lengths repeat (tier defaults), so each one's expire bytes are computed once.
        expires: dict[int, bytes] = {}
        heads: dict[int, bytes] = {}
        from_bytes = int.from_bytes
        slow = self._slow

        def rewrite(raw: bytes) -> bytes | None:
            try:
                n = raw[10]
                q = 11 + (n >> 1)
                a = raw[q]
                q += 1 + (a >> 1)
                b = raw[q]
                q += 1 + (b >> 1)
                c = raw[q]
                s0 = q + 1
                q = s0 + (c >> 1)
            except IndexError:
                return slow(raw, now_ms)
            v = from_bytes(raw[q + 1 : q + 1 + _VARINTS], "little")
            # The record ends params, not_before_ms, stream, callback_url, embedding_input,
            # embedding_dimensions. raw[-6:] is six 00 bytes exactly when the last five are null or
            # false: params ends in a 0 (null, or a map's end), a null union branch and `false` are a
            # 0, a set not_before_ms ends 02 00 (zero) or a non-zero byte, a set callback_url ends in
            # its last character, and a set embedding_input or embedding_dimensions has its 02 branch.
            if (n | a | b | c) & 0x80 or (v & _MASK) != _SHAPE or any(raw[-6:]) or raw[:10] != header:
                return slow(raw, now_ms)
            if wanted is not None and raw[s0:q] not in wanted:
                return None
            # Both zigzag values are even (positive longs): their difference halved is the deadline length.
            deadline2 = _six_groups(v >> 48) - _six_groups(v & 0xFFFFFFFFFFFF)
            tail = expires.get(deadline2)
            if tail is None:
                tail = expires[deadline2] = created + zigzag_varint(now_ms + deadline2 // 2) + _FIRST_ATTEMPT
            head = heads.get(n)
            if head is None:
                head = heads[n] = header + zigzag_varint(plen + (n >> 1)) + prefix
            return b"".join((head, raw[11 : q + 1], tail, raw[q + 1 + _VARINTS :]))

        return rewrite

    def _slow(self, raw: bytes, now_ms: int) -> bytes | None:
        self.slow += 1
        request = self.codec.decode(raw)
        if self.scenarios is not None and request.scenario not in self.scenarios:
            return None
        return self.encode_fresh(request, now_ms)

    def encode_fresh(self, request: InferenceRequest, now_ms: int) -> bytes:
        """Encode a decoded request as a fresh replayed one (the exact path)."""
        fresh = replace(
            request,
            request_id=f"{self.run_id}:{request.request_id}",
            created_at_ms=now_ms,
            expire_at_ms=now_ms + (request.expire_at_ms - request.created_at_ms),
            attempt=1,
            not_before_ms=None,
            callback_url=None,
        )
        return self.codec.encode(fresh)
