"""The rate budget: requests and tokens per minute per model, beside the concurrency budget.

Pure and synchronous, with an injected clock. A start needs both a concurrency token (``tokens/``)
and room here. Each model's limits come from the settings (``INFERQ_DISPATCHER_RATE_LIMITS``) and from the
responses' rate-limit headers (``x-ratelimit-limit-*``); where both are known the lower one holds.
A model with neither is unlimited: every start is allowed, so with no limits configured and no
headers seen the dispatcher behaves as before. Its starts are still counted (for at most
`MAX_UNLIMITED_MODELS` such models at once): when the first answer teaches its limit, the calls
started before it, still in flight, are in the minute, and the next starts wait for room instead
of going past the limit just learned (that answer's ``remaining`` is the backend's count when it
received that call, before the calls started with it).

Accounting is a sliding log over the last minute: every start is an entry of its estimated tokens
(each message's characters / 4 plus ``max_tokens``, or the record's ``estimated_tokens``) and one request.
A start is allowed only if the minute ending now, with it added, stays within both limits; since the
sum over any minute is largest over a minute that ends at a start, no minute ever holds more than
the limit of estimates. A start stays counted a second past its minute (`SLACK_MS`), since the
backend receives it a little later than we start it. After the call, `settle` replaces the estimate
with the response's `usage` (the difference returned to or taken from the window).

What the backend reports beats what we counted: ``x-ratelimit-remaining-*`` with its
``x-ratelimit-reset-*`` says the backend counts more than we do (other clients on the same key),
so the excess is entered as an entry that leaves the window when the backend says it resets; a
``retry-after`` on a 429 holds every start of that model until it has passed.

Priority (the floors): each tier owns a share of each limit, its floor's share of the concurrency
budget (HIGH 6 of 10 at peak: 60% of the minute's tokens). A tier may not take what the tiers above
it still have unused of their shares in the current minute, so LOW cannot spend the last of the
minute's tokens that HIGH's floor needs; HIGH may use everything. As under the concurrency budget,
the scheduler names the tier that starts next, and a tier the rate budget refuses blocks the lower
ones (nothing overtakes a waiting HIGH for want of tokens).

Header values are untrusted: a count that is negative, not an integer or above `MAX_COUNT`, and a
duration that is malformed, negative or above `MAX_WAIT_S`, is ignored.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from inferq.messaging.tiers import Tier

WINDOW_MS = 60_000
# A start stays counted this much longer than the minute: the backend dates a call when it receives
# it, a little after we started it, so its minute ends a little after ours (and a call we free too
# early would be one over its limit: a 429). Costs at most 1/61 of the limit.
SLACK_MS = 1_000
HELD_MS = WINDOW_MS + SLACK_MS
# Above this a header's count is not believed (no API grants a billion tokens a minute per key).
MAX_COUNT = 1_000_000_000
# A reset or retry-after longer than this is not believed.
MAX_WAIT_S = 3600.0
# Characters per token for the estimate before the call (OpenAI's rule of thumb for English).
CHARS_PER_TOKEN = 4  # the one home: the simulated backend and the scenarios count with it too
# The answer's tokens when the request sets no `max_tokens` (its usage corrects it after the call).
DEFAULT_COMPLETION_TOKENS = 256
# Models with no limit known whose starts are counted at once (a caller may name any model):
# beyond it a new one's starts are not counted until one with an empty minute is forgotten.
MAX_UNLIMITED_MODELS = 256
# When that many are counted and none could be forgotten, looked at again after this long: a look
# passes over every model, too dear for each start of an uncounted one.
UNLIMITED_FULL_RECHECK_MS = 1_000


@dataclass(frozen=True)
class RateLimit:
    """One model's limits per minute; None: that one is not limited."""

    rpm: int | None = None
    tpm: int | None = None

    def __post_init__(self) -> None:
        for name, value in (("rpm", self.rpm), ("tpm", self.tpm)):
            if value is not None and not 1 <= value <= MAX_COUNT:
                raise ValueError(f"{name} must be between 1 and {MAX_COUNT}, got {value}")


@dataclass(frozen=True)
class RateHeaders:
    """What a response's rate-limit headers said, each None when absent or not believable."""

    limit_requests: int | None = None
    limit_tokens: int | None = None
    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    reset_requests_s: float | None = None
    reset_tokens_s: float | None = None
    retry_after_s: float | None = None


_DURATION_PART = re.compile(r"([0-9]{1,9}(?:\.[0-9]{1,9})?)(ms|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration_s(value: str | None) -> float | None:
    """OpenAI's reset duration ("1s", "6m0s", "20ms", "1h2m3.5s") or plain seconds ("2", "0.5"),
    in seconds; None for anything else or beyond `MAX_WAIT_S`."""
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > 40:
        return None
    seconds: float | None = None
    if re.fullmatch(r"[0-9]{1,9}(?:\.[0-9]{1,9})?", text):
        seconds = float(text)
    else:
        position, total = 0, 0.0
        for part in _DURATION_PART.finditer(text):
            if part.start() != position:
                return None
            total += float(part.group(1)) * _UNIT_S[part.group(2)]
            position = part.end()
        if position != len(text) or position == 0:
            return None
        seconds = total
    return seconds if math.isfinite(seconds) and 0 <= seconds <= MAX_WAIT_S else None


def parse_count(value: str | None) -> int | None:
    """A non-negative integer count of at most `MAX_COUNT`; None for anything else."""
    if value is None:
        return None
    text = value.strip()
    if not re.fullmatch(r"[0-9]{1,10}", text):
        return None
    count = int(text)
    return count if count <= MAX_COUNT else None


def read_headers(headers: Mapping[str, str], *, status: int | None = None) -> RateHeaders:
    """The rate-limit headers of a response (names in any case). A ``retry-after`` counts only on a
    429 (or a 200's headers, `status` None): on a 503 or another failure it is that request's retry
    delay (``retries.py``), not the model's rate limit, and holding every start of the model for it
    would keep requests that could be tried meanwhile from trying."""
    lower = {str(name).lower(): str(value) for name, value in headers.items()}
    if status is not None and status != 429:
        lower.pop("retry-after", None)
    return RateHeaders(
        limit_requests=parse_count(lower.get("x-ratelimit-limit-requests")),
        limit_tokens=parse_count(lower.get("x-ratelimit-limit-tokens")),
        remaining_requests=parse_count(lower.get("x-ratelimit-remaining-requests")),
        remaining_tokens=parse_count(lower.get("x-ratelimit-remaining-tokens")),
        reset_requests_s=parse_duration_s(lower.get("x-ratelimit-reset-requests")),
        reset_tokens_s=parse_duration_s(lower.get("x-ratelimit-reset-tokens")),
        retry_after_s=parse_duration_s(lower.get("retry-after")),
    )


def estimate_tokens(
    prompt_chars: Iterable[int], max_tokens: int | None, estimated_tokens: int | None, *, choices: int = 1
) -> int:
    """A request's cost before the call: the record's `estimated_tokens` when it gives one, else each
    message's characters / 4 (rounded up) plus `max_tokens` (`DEFAULT_COMPLETION_TOKENS` when unset)
    for each of its `choices` (`n`: each is a whole answer); at least 1."""
    if estimated_tokens is not None and estimated_tokens > 0:
        return estimated_tokens
    prompt = sum(-(-max(0, chars) // CHARS_PER_TOKEN) for chars in prompt_chars)
    answer = max_tokens if max_tokens is not None and max_tokens > 0 else DEFAULT_COMPLETION_TOKENS
    return max(1, prompt + answer * max(1, choices))


@dataclass
class _Entry:
    at_ms: int
    amount: int
    # None: the backend's excess over our count (nobody's floor).
    tier: Tier | None


class _Window:
    """A sliding log of one limit's use over the last minute, in date order."""

    def __init__(self) -> None:
        self._entries: deque[_Entry] = deque()

    def prune(self, now_ms: int) -> None:
        while self._entries and self._entries[0].at_ms <= now_ms - HELD_MS:
            self._entries.popleft()

    def empty(self, now_ms: int) -> bool:
        self.prune(now_ms)
        return not self._entries

    def used(self, now_ms: int, tier: Tier | None = None, *, every_tier: bool = True) -> int:
        self.prune(now_ms)
        return sum(e.amount for e in self._entries if every_tier or e.tier is tier)

    def add(self, entry: _Entry, now_ms: int) -> None:
        # Pruned here too: nothing else prunes the log of a model with no limit known.
        self.prune(now_ms)
        # An excess entry is dated back (to leave when the backend resets): kept in date order, so
        # pruning stays at the left end.
        if not self._entries or self._entries[-1].at_ms <= entry.at_ms:
            self._entries.append(entry)
            return
        position = bisect.bisect_right([e.at_ms for e in self._entries], entry.at_ms)
        self._entries.insert(position, entry)


@dataclass
class _ModelState:
    configured: RateLimit
    learned_rpm: int | None = None
    learned_tpm: int | None = None
    requests: _Window = field(default_factory=_Window)
    tokens: _Window = field(default_factory=_Window)
    held_until_ms: int = 0

    @property
    def rpm(self) -> int | None:
        return _lower(self.configured.rpm, self.learned_rpm)

    @property
    def tpm(self) -> int | None:
        return _lower(self.configured.tpm, self.learned_tpm)

    def forgettable(self, now_ms: int) -> bool:
        """No limit known, not held, nothing in its minute: nothing lost by forgetting it."""
        return (
            self.rpm is None
            and self.tpm is None
            and now_ms >= self.held_until_ms
            and self.requests.empty(now_ms)
            and self.tokens.empty(now_ms)
        )


def _lower(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


@dataclass
class Charge:
    """One start's entries in its model's windows; `RateBudget.settle` corrects its tokens."""

    model: str
    tier: Tier
    tokens: int
    _entry: _Entry | None = None
    _request: _Entry | None = None


class RateBudget:
    def __init__(
        self,
        configured: Mapping[str, RateLimit],
        *,
        floor_shares: Mapping[Tier, float] | None = None,
        clock_ms: Callable[[], int],
    ) -> None:
        self._models = {model: _ModelState(limit) for model, limit in configured.items()}
        self._configured = frozenset(configured)
        shares = dict(floor_shares or {})
        if any(not 0 <= s <= 1 for s in shares.values()) or sum(shares.values()) > 1 + 1e-9:
            raise ValueError(f"floor shares must be within [0, 1] and sum to at most 1, got {shares}")
        self._shares = shares
        self._clock_ms = clock_ms
        # Until then `MAX_UNLIMITED_MODELS` are counted and no new one is (`_counted_unlimited`).
        self._unlimited_full_until_ms = 0

    def set_floor_shares(self, floor_shares: Mapping[Tier, float]) -> None:
        """The tiers' shares of each limit (their floors' share of the concurrency budget), e.g. when
        the schedule's window changes."""
        if any(not 0 <= s <= 1 for s in floor_shares.values()) or sum(floor_shares.values()) > 1 + 1e-9:
            raise ValueError(f"floor shares must be within [0, 1] and sum to at most 1, got {floor_shares}")
        self._shares = dict(floor_shares)

    def limited(self, model: str) -> bool:
        """Whether `model` has any limit known (configured or learned)."""
        state = self._models.get(model)
        return state is not None and (state.rpm is not None or state.tpm is not None)

    def allows(self, model: str, tier: Tier, tokens: int) -> bool:
        """Whether a `tier` request of `model` costing `tokens` may start now."""
        state = self._models.get(model)
        if state is None:
            return True
        now = self._clock_ms()
        if now < state.held_until_ms:
            return False
        return self._fits(state.requests, state.rpm, tier, 1, now) and self._fits(
            state.tokens, state.tpm, tier, tokens, now
        )

    def take(self, model: str, tier: Tier, tokens: int, *, force: bool = False) -> Charge | None:
        """Enter a start of `tokens` if `allows` (or `force`: it starts anyway); None (nothing
        entered) if not."""
        if not force and not self.allows(model, tier, tokens):
            return None
        now = self._clock_ms()
        state = self._models.get(model) or self._counted_unlimited(model, now)
        if state is None:
            return Charge(model, tier, tokens)
        request = _Entry(now, 1, tier)
        state.requests.add(request, now)
        entry = _Entry(now, self._cost(tokens, state.tpm), tier)
        state.tokens.add(entry, now)
        return Charge(model, tier, tokens, entry, request)

    def refund(self, charge: Charge) -> None:
        """The start `charge` entered did not happen after all (no token, or expired): its request
        and tokens go back to the window."""
        for entry in (charge._entry, charge._request):
            if entry is not None:
                entry.amount = 0

    def settle(self, charge: Charge, used_tokens: int) -> None:
        """The call's `usage` said it cost `used_tokens`: the window gets the difference back or pays
        it (an entry already out of the window is left alone)."""
        if charge._entry is not None and used_tokens >= 0:
            charge._entry.amount = min(used_tokens, MAX_COUNT)

    def observe(self, model: str, headers: RateHeaders) -> None:
        """Learn from a response's rate-limit headers (a 200's or a 429's)."""
        state = self._models.get(model)
        if state is None:
            if not any(v is not None for v in vars(headers).values()):
                return
            state = self._models[model] = _ModelState(RateLimit())
        now = self._clock_ms()
        if headers.limit_requests is not None and headers.limit_requests > 0:
            state.learned_rpm = headers.limit_requests
        if headers.limit_tokens is not None and headers.limit_tokens > 0:
            state.learned_tpm = headers.limit_tokens
        self._excess(state.requests, state.rpm, headers.remaining_requests, headers.reset_requests_s, now)
        self._excess(state.tokens, state.tpm, headers.remaining_tokens, headers.reset_tokens_s, now)
        if headers.retry_after_s is not None:
            state.held_until_ms = max(state.held_until_ms, now + int(headers.retry_after_s * 1000))

    def count_others(self, model: str, *, requests: int, tokens: int, until_ms: int) -> None:
        """Count `requests` and `tokens` of someone else's in `model`'s minute until `until_ms` (no
        tier's: nobody's floor). The local share of the group's budget counts so what the group had
        spent when Redis went away (``shared_rate/``)."""
        state = self._models.get(model)
        if state is None:
            state = self._models[model] = _ModelState(RateLimit())
        now = self._clock_ms()
        for window, amount in ((state.requests, requests), (state.tokens, tokens)):
            if amount > 0:
                window.add(_Entry(until_ms - HELD_MS, min(amount, MAX_COUNT), None), now)

    def hold(self, model: str, until_ms: int) -> None:
        """No start of `model` before `until_ms` (a retry-after learned elsewhere)."""
        state = self._models.get(model)
        if state is None:
            state = self._models[model] = _ModelState(RateLimit())
        state.held_until_ms = max(state.held_until_ms, until_ms)

    def _counted_unlimited(self, model: str, now: int) -> _ModelState | None:
        """A new state for `model`, which has no limit known, to count its starts in; None when
        `MAX_UNLIMITED_MODELS` are counted already (the ones with an empty minute forgotten first)."""
        if now < self._unlimited_full_until_ms:
            return None
        unlimited = [name for name, state in self._models.items() if state.rpm is None and state.tpm is None]
        if len(unlimited) >= MAX_UNLIMITED_MODELS:
            for name in unlimited:
                if self._models[name].forgettable(now) and name not in self._configured:
                    del self._models[name]
            if sum(1 for name in unlimited if name in self._models) >= MAX_UNLIMITED_MODELS:
                self._unlimited_full_until_ms = now + UNLIMITED_FULL_RECHECK_MS
                return None
        state = self._models[model] = _ModelState(RateLimit())
        return state

    def used(self, model: str) -> tuple[int, int]:
        """(requests, tokens) counted in the minute ending now."""
        state = self._models.get(model)
        if state is None:
            return (0, 0)
        now = self._clock_ms()
        return (state.requests.used(now), state.tokens.used(now))

    def _fits(self, window: _Window, limit: int | None, tier: Tier, amount: int, now: int) -> bool:
        if limit is None:
            return True
        reserved = 0.0
        for above in Tier:
            if above.rank >= tier.rank:
                continue
            share = self._shares.get(above, 0.0) * limit
            reserved += max(0.0, share - window.used(now, above, every_tier=False))
        return window.used(now) + self._cost(amount, limit) <= limit - math.ceil(reserved - 1e-9)

    @staticmethod
    def _cost(amount: int, limit: int | None) -> int:
        # A request dearer than the whole minute would wait for ever: it counts as the whole minute
        # (it starts on an empty window; the backend decides).
        return amount if limit is None else min(amount, limit)

    @staticmethod
    def _excess(
        window: _Window, limit: int | None, remaining: int | None, reset_s: float | None, now: int
    ) -> None:
        if limit is None or remaining is None:
            return
        backend_used = max(0, limit - remaining)
        ours = window.used(now)
        if backend_used > ours:
            reset_ms = int(min(reset_s if reset_s is not None else 60.0, 60.0) * 1000)
            # Dated so that it leaves the window when the backend says its count resets.
            window.add(_Entry(now + reset_ms - HELD_MS, backend_used - ours, None), now)
