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

# A webhook's URL (`callback_url`); its other rules are services/webhooks' (the tenant's hosts...).
MAX_CALLBACK_URL_CHARS = 2_048

# Kafka topic names: legal characters, at most 249 of them.
TOPIC_PATTERN = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")

# Chat-completions parameters a request may carry (`params`), and their bounds. Anything else
# (`model`, `messages`, `stream`, `n`, unknown names) is refused: the dispatcher owns those.
ALLOWED_PARAMS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "response_format",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
    }
)
MAX_TEMPERATURE = 2.0
MAX_TOP_P = 1.0
# presence_penalty and frequency_penalty lie in [-MAX_PENALTY, MAX_PENALTY].
MAX_PENALTY = 2.0
MAX_COMPLETION_TOKENS = 32_768
MAX_STOP_SEQUENCES = 4
MAX_STOP_CHARS = 128
RESPONSE_FORMATS = frozenset({"text", "json_object", "json_schema"})

# Function calling and structured output (`inferq.messaging.tool_rules` applies these, at ingest and
# in the dispatcher). OpenAI's own limit on the number of tools.
MAX_TOOLS = 128
# A function's name, as OpenAI takes it.
TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
MAX_TOOL_DESCRIPTION_CHARS = 4_096
# A tool's `parameters` schema and `response_format`'s `json_schema.schema`, in bytes of compact
# UTF-8 JSON; all tools together are bounded too, so a record stays well under Kafka's 1 MB.
MAX_TOOL_SCHEMA_BYTES = 16_384
MAX_TOOLS_BYTES = 262_144
MAX_RESPONSE_SCHEMA_BYTES = 65_536
# How deep a schema or a call's arguments may nest (a JSON value's depth: a scalar is 0).
MAX_TOOL_JSON_DEPTH = 32
# The assistant's `tool_calls` in one message, and each call's `arguments` (a JSON text).
MAX_TOOL_CALLS = 128
MAX_TOOL_ARGUMENTS_CHARS = 65_536
# The JSON text of one message's `tool_calls`, as the record carries it.
MAX_TOOL_CALLS_CHARS = 262_144
# A `tool_call_id` (OpenAI's "call_...", vLLM's "chatcmpl-tool-..."), and a message's `name`.
TOOL_CALL_ID_PATTERN = re.compile(r"^[A-Za-z0-9._:\-]{1,256}$")
MAX_MESSAGE_NAME_CHARS = 64
# Parameters a tenant may use only as far as another one is entitled (`tool_choice` goes with `tools`).
ENTITLED_WITH = {"tool_choice": "tools", "parallel_tool_calls": "tools"}

# The dispatcher's additions (records written straight to Kafka); ingest sets the region itself.
MAX_ORIGIN_REGION_CHARS = 64
# The roles of chat messages (ingest's `Role`; the chat-completions API refuses others).
MESSAGE_ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})
# Never a caller's to set: named in a refusal's reason.
RESERVED_PARAMS = frozenset({"model", "messages", "stream", "n"})
# A record's `params` map holds JSON-encoded values: this many at most, each at most this long (the
# longest allowed value, a stop list, is far shorter), checked before anything is decoded.
MAX_PARAMS = len(ALLOWED_PARAMS)
MAX_PARAM_CHARS = 2048
# The parameters that may be longer: the tools, and a response format with its schema.
MAX_PARAM_CHARS_OF = {
    "tools": MAX_TOOLS_BYTES,
    "response_format": MAX_RESPONSE_SCHEMA_BYTES + MAX_PARAM_CHARS,
    "tool_choice": MAX_PARAM_CHARS,
}

# What a result carries of the backend's answer besides its text (`InferenceResult`), bounded so a
# backend cannot grow a record with them: a value past these bounds is dropped, never cut (a cut
# fingerprint or counter would be a wrong one).
# The `finish_reason`s of the chat-completions API; another value is not passed on.
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
# `system_fingerprint`: OpenAI's are "fp_" and a dozen hex digits.
SYSTEM_FINGERPRINT_PATTERN = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
# `usage.prompt_tokens_details` / `completion_tokens_details`: counters (cached_tokens,
# reasoning_tokens...), at most this many per map, each named like an identifier.
MAX_TOKEN_DETAILS = 16
TOKEN_DETAIL_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")

# Embeddings (``POST /v1/embeddings``; `inferq.messaging.embedding_rules` applies these, at ingest
# and in the dispatcher). OpenAI's own limit on the inputs of one request.
MAX_EMBEDDING_INPUTS = 2_048
# One input's characters: about 8,192 tokens, what OpenAI's embedding models take.
MAX_EMBEDDING_INPUT_CHARS = 32_768
# `dimensions`: text-embedding-3-large has 3,072; room for larger models.
MAX_EMBEDDING_DIMENSIONS = 4_096
# The vectors of one result, in bytes of Avro floats (inputs x dimensions x 4): well under a reply
# topic's record limit (1 MB by default), with room for the result's other fields. A request whose
# vectors could not fit is refused before it is queued; vectors from the backend over it fail it.
MAX_EMBEDDING_RESULT_BYTES = 600_000
# The dimensions a request that names none is counted with: OpenAI's text-embedding-3-small.
ASSUMED_EMBEDDING_DIMENSIONS = 1_536
