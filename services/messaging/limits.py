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
# How long before the broker appended a request record its created_at_ms may be, by default (a
# producer's buffering and retries, a MirrorMaker's lag): the dispatcher raises an earlier one to it.
MAX_APPEND_LAG_MS = 5 * 60_000

# A webhook's URL (`callback_url`); its other rules are services/webhooks' (the tenant's hosts...).
MAX_CALLBACK_URL_CHARS = 2_048

# Kafka topic names: legal characters, at most 249 of them.
TOPIC_PATTERN = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")

# Chat-completions parameters a request may carry (`params`), and their bounds. Anything else is
# refused (`model`, `messages`, `stream`: the dispatcher owns those), except a pass-through
# name its tenant lists (`PASSTHROUGH_NAME_PATTERN` below).
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
        "n",
        "logprobs",
        "top_logprobs",
        # The rest of the chat-completions API (`inferq.messaging.param_rules` bounds them).
        "logit_bias",
        "user",
        "metadata",
        "max_completion_tokens",
        "reasoning_effort",
        "modalities",
        "store",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "service_tier",
        "verbosity",
        "prediction",
        "web_search_options",
        "moderation",
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

# `n`: how many choices one request asks for (each is a whole answer: the token estimate counts
# each); `top_logprobs`: OpenAI's own bound, and only with `logprobs` true.
MAX_CHOICES = 8
MAX_TOP_LOGPROBS = 20
# OpenAI's defaults of these: a request that sets one to it asks for nothing (ingest does not write
# it, and a tenant needs no entitlement for it).
PARAM_DEFAULTS: dict[str, object] = {"n": 1, "logprobs": False}


def at_default(name: str, value: object) -> bool:
    """Whether `value` is `name`'s default (of its type too: ``true`` is not ``1``)."""
    default = PARAM_DEFAULTS.get(name, ...)
    return type(value) is type(default) and value == default


# Parameters a tenant may use only as far as another one is entitled (`tool_choice` goes with `tools`;
# `max_completion_tokens` is `max_tokens`' newer name, within its cap).
ENTITLED_WITH = {
    "tool_choice": "tools",
    "parallel_tool_calls": "tools",
    "max_completion_tokens": "max_tokens",
    "top_logprobs": "logprobs",
}

# The other chat-completions parameters (`inferq.messaging.param_rules` applies these, at ingest and
# in the dispatcher). `logit_bias`: token ids (decimal text) to a bias; OpenAI takes at most 300.
MAX_LOGIT_BIAS_TOKENS = 300
LOGIT_BIAS_TOKEN_PATTERN = re.compile(r"^[0-9]{1,10}$")
MAX_LOGIT_BIAS = 100
# `metadata`: OpenAI's own bounds. Its `inferq_*` keys are inferq's choices (scenario, priority,
# deadline), never forwarded.
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
INFERQ_METADATA_PREFIX = "inferq_"
# `user`, `safety_identifier`, `prompt_cache_key`: an end user's or a cache's name, as text.
MAX_END_USER_CHARS = 512
# The enumerations the installed `openai` SDK (3.57) spells out.
REASONING_EFFORTS = frozenset({"none", "minimal", "low", "medium", "high", "xhigh", "max"})
SERVICE_TIERS = frozenset({"auto", "default", "flex", "scale", "priority", "fast"})
VERBOSITIES = frozenset({"low", "medium", "high"})
SEARCH_CONTEXT_SIZES = frozenset({"low", "medium", "high"})
PROMPT_CACHE_RETENTIONS = frozenset({"in_memory", "24h"})
# Output modalities inferq carries: text only (an audio answer has no place in a result record).
MODALITIES = frozenset({"text"})
# `prediction.content`: the text an answer is expected to repeat (a file being edited), one text or
# at most this many text parts.
MAX_PREDICTION_CHARS = 32_768
MAX_PREDICTION_PARTS = 16
# `web_search_options`, `moderation`, `prompt_cache_options`: small objects; each text in them.
MAX_OPTION_TEXT_CHARS = 128

# Fields added to the API later: a top-level field inferq does not know, named like this, goes
# through as a JSON value within these bounds, for a tenant entitled to it by name.
PASSTHROUGH_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_PASSTHROUGH_PARAMS = 8
MAX_PASSTHROUGH_BYTES = 8_192
MAX_PASSTHROUGH_DEPTH = 8

# The dispatcher's additions (records written straight to Kafka); ingest sets the region itself.
MAX_ORIGIN_REGION_CHARS = 64
# The roles of chat messages (ingest's `Role`; the chat-completions API refuses others).
MESSAGE_ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})
# Never a caller's to set: named in a refusal's reason.
RESERVED_PARAMS = frozenset({"model", "messages", "stream"})
# Names never passed through, whoever is entitled: the reserved ones, those inferq sets itself
# (`stream_options`) and those it refuses by name (`inferq.ingest.chat.body.REFUSED`).
NOT_PASSTHROUGH = RESERVED_PARAMS | {"stream_options", "functions", "function_call", "audio"}
# A record's `params` map holds JSON-encoded values: this many at most, each at most this long (the
# longest allowed value, a stop list, is far shorter), checked before anything is decoded.
MAX_PARAMS = len(ALLOWED_PARAMS) + MAX_PASSTHROUGH_PARAMS
MAX_PARAM_CHARS = 2048
# The parameters that may be longer: the tools, and a response format with its schema.
MAX_PARAM_CHARS_OF = {
    "tools": MAX_TOOLS_BYTES,
    "response_format": MAX_RESPONSE_SCHEMA_BYTES + MAX_PARAM_CHARS,
    "tool_choice": MAX_PARAM_CHARS,
    # 300 pairs of a 10-digit id and a bias, quoted and spaced as `json.dumps` writes them.
    "logit_bias": MAX_LOGIT_BIAS_TOKENS * 24,
    # Texts as `json.dumps` escapes them: up to 12 characters for one (an astral one, \ud83d\ude00).
    "metadata": MAX_METADATA_PAIRS * ((MAX_METADATA_KEY_CHARS + MAX_METADATA_VALUE_CHARS) * 12 + 8) + 2,
    "prediction": MAX_PREDICTION_CHARS * 12 + MAX_PARAM_CHARS,
    "web_search_options": MAX_PARAM_CHARS * 4,
    **dict.fromkeys(("user", "safety_identifier", "prompt_cache_key"), MAX_END_USER_CHARS * 12 + 2),
}
# A pass-through value (`MAX_PASSTHROUGH_BYTES` of compact UTF-8 JSON) as `json.dumps` writes it.
MAX_PASSTHROUGH_CHARS = MAX_PASSTHROUGH_BYTES * 6

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
# A streamed piece's `logprobs.content` entries, in characters of compact JSON.
MAX_STREAM_LOGPROBS_CHARS = 16_384
# What the dispatcher gathers into one chunk record (text, tool-call pieces, logprobs), about: past
# it the next piece starts another chunk, so a slow broker (pieces pile up while one chunk is being
# acknowledged) never grows a record toward Kafka's 1 MB, even in 4-byte UTF-8.
MAX_CHUNK_CHARS = 131_072
# A choice's `message.refusal` (the model's words declining), in characters.
MAX_REFUSAL_CHARS = 16_384
# A choice's `logprobs` (OpenAI's object, kept as compact JSON text), in characters, and all of an
# answer's together: with every choice's text they must fit one Kafka record (1 MB by default).
MAX_LOGPROBS_CHARS = 262_144
MAX_ANSWER_LOGPROBS_CHARS = 524_288
# How deep a `logprobs` object nests: {"content": [{"top_logprobs": [{"bytes": [..]}]}]} is 5.
MAX_LOGPROBS_DEPTH = 6

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
