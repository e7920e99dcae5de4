"""The bounds every field of a request obeys, wherever it came from (HTTP or a producer writing to
Kafka directly). One table, so ingest refuses with 422 exactly what the dispatcher would otherwise
have to dead-letter or clamp.

Integers match their Avro types (`int` is 32-bit signed, `long` 64-bit); times are epoch ms.
"""

from __future__ import annotations

import re

AVRO_INT_MAX = 2**31 - 1
AVRO_LONG_MAX = 2**63 - 1

# Identifiers: request ids, sessions, tenants, scenarios, models.
ID_PATTERN = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
MAX_ID_CHARS = 128
MAX_SCENARIO_CHARS = 64
MAX_TENANT_CHARS = 64
MAX_MODEL_CHARS = 128

MAX_MESSAGES = 256
MAX_MESSAGE_CHARS = 512_000
MAX_ESTIMATED_TOKENS = 2_000_000

# A deadline further away than this is a mistake, not a batch job (the LOW topic keeps 7 days).
MAX_DEADLINE_MS = 7 * 24 * 3_600_000
# A created_at_ms this far in the future is a wrong clock, not a request.
MAX_CLOCK_SKEW_MS = 60_000

# Kafka topic names: legal characters, at most 249 of them.
TOPIC_PATTERN = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")
MAX_ORIGIN_REGION_CHARS = 64

# The roles of chat messages (the chat-completions API refuses others).
MESSAGE_ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})

# Chat-completions parameters a request may carry in `params` (each value JSON-encoded), with their
# bounds; any other key is refused. `model`, `messages`, `stream` and `n` are never a caller's: the
# dispatcher sets the model and messages, reads one non-streamed choice, and pays for each.
RESERVED_PARAMS = frozenset({"model", "messages", "stream", "n"})
NUMBER_PARAMS: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
}
INTEGER_PARAMS: dict[str, tuple[int, int]] = {
    "max_tokens": (1, MAX_ESTIMATED_TOKENS),
    "max_completion_tokens": (1, MAX_ESTIMATED_TOKENS),
    "seed": (-AVRO_LONG_MAX - 1, AVRO_LONG_MAX),
}
STRING_PARAMS: dict[str, int] = {"user": MAX_ID_CHARS}
# "stop": one string or a list of them.
MAX_STOP_SEQUENCES = 4
MAX_STOP_CHARS = 256
ALLOWED_PARAMS = frozenset({*NUMBER_PARAMS, *INTEGER_PARAMS, *STRING_PARAMS, "stop"})
MAX_PARAMS = len(ALLOWED_PARAMS)
# One JSON-encoded value; the longest legal one ("stop") is far shorter.
MAX_PARAM_CHARS = 2048
