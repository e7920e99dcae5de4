"""The chat body's fields against the installed `openai` SDK's `CompletionCreateParams`: every field
the SDK can send is either accepted (and, unless it is inferq's own, forwarded to the backend) or
refused by name. A newer SDK with a new field fails here with the list of new names, instead of
its callers meeting a silent "Unrecognized request argument".

When a refused name becomes served, move it from `KNOWN_REFUSED` to the body and `ChatParams`.
"""

from __future__ import annotations

from openai.types.chat import completion_create_params

from inferq.ingest.chat.body import REFUSED, ChatCompletionBody
from inferq.ingest.validation import ChatParams

# The fields inferq refuses by name (400 unsupported_parameter), each with why in docs/api.md.
KNOWN_REFUSED = frozenset({"functions", "function_call", "audio"})
# The body's own fields: what inferq reads itself and never forwards as a parameter (the model is
# chosen by the dispatcher, the stream between the backend and inferq is the dispatcher's,
# `stream_options.include_usage` decides inferq's own usage chunk).
BODY_OWN = frozenset({"model", "messages", "stream", "stream_options"})


def sdk_fields() -> frozenset[str]:
    streaming = completion_create_params.CompletionCreateParamsStreaming
    non_streaming = completion_create_params.CompletionCreateParamsNonStreaming
    return frozenset().union(*(t.__required_keys__ | t.__optional_keys__ for t in (streaming, non_streaming)))


def test_every_field_the_sdk_can_send_is_accepted_or_refused_by_name() -> None:
    new = sdk_fields() - set(ChatCompletionBody.model_fields) - set(REFUSED)
    assert not new, f"the openai SDK sends fields inferq neither accepts nor refuses by name: {sorted(new)}"


def test_the_refused_names_are_the_known_ones_and_the_sdk_still_has_them() -> None:
    assert set(REFUSED) == KNOWN_REFUSED
    assert sdk_fields() >= KNOWN_REFUSED


def test_every_accepted_field_is_the_sdks_and_all_but_the_bodys_own_reach_the_backend() -> None:
    accepted = set(ChatCompletionBody.model_fields)
    assert accepted <= sdk_fields(), sorted(accepted - sdk_fields())
    assert accepted - BODY_OWN == set(ChatParams.model_fields)
