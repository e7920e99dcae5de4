"""The simulated backend's sync answers to `n`, `logprobs` / `top_logprobs` and its refusal trigger,
each validated as the SDK's `ChatCompletion`; and OpenAI's refusals of their bad values."""

from __future__ import annotations

from typing import Any

import httpx

from inferq.tools.simbackend import SimBackendSettings
from inferq.tools.simbackend.choices import REFUSAL_TEXT, REFUSE_MARKER
from inferq.tools.simbackend.protocol import count_tokens
from tests.unit.test_simbackend import CHAT, HELLO, RecordingSleep, client_for, run_async, simulated


def posted(body: dict[str, Any]) -> httpx.Response:
    async def scenario() -> httpx.Response:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            return await client.post(CHAT, json=body)

    return run_async(scenario)


def test_n_gives_that_many_distinct_choices_and_the_usage_counts_them_all() -> None:
    one = simulated(HELLO)
    three = simulated({**HELLO, "n": 3})

    assert [c.index for c in three.choices] == [0, 1, 2]
    texts = [c.message.content for c in three.choices]
    assert texts == [
        "sim reply to: hello there",
        "sim reply 2 to: hello there",
        "sim reply 3 to: hello there",
    ]
    assert three.usage is not None and one.usage is not None
    assert three.usage.completion_tokens == sum(count_tokens(t or "") for t in texts)
    assert three.usage.prompt_tokens == one.usage.prompt_tokens


def test_a_tight_max_tokens_cuts_the_longer_choice_only() -> None:
    # "sim reply to: hello there" is 25 characters (7 tokens), "sim reply 2 to: ..." 27 (7 tokens too);
    # at 6 tokens both are cut, at 7 neither: the prefixes differ by 2 characters.
    cut = simulated({**HELLO, "n": 2, "max_tokens": 6})
    assert [c.finish_reason for c in cut.choices] == ["length", "length"]
    body = {**HELLO, "messages": [{"role": "user", "content": "hello ther"}], "n": 2, "max_tokens": 6}
    assert [c.finish_reason for c in simulated(body).choices] == ["stop", "length"]


def test_logprobs_list_each_token_with_its_top_alternatives() -> None:
    answer = simulated({**HELLO, "logprobs": True, "top_logprobs": 3})
    logprobs = answer.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None and logprobs.refusal is None
    text = answer.choices[0].message.content or ""
    assert "".join(t.token for t in logprobs.content) == text
    assert len(logprobs.content) == count_tokens(text)
    for entry in logprobs.content:
        assert -1 < entry.logprob <= 0 and entry.bytes == list(entry.token.encode())
        assert entry.top_logprobs[0].token == entry.token and len(entry.top_logprobs) == 3
        ranked = [t.logprob for t in entry.top_logprobs]
        assert ranked == sorted(ranked, reverse=True)


def test_logprobs_without_top_logprobs_have_no_alternatives_and_without_logprobs_none() -> None:
    plain = simulated({**HELLO, "logprobs": True})
    assert plain.choices[0].logprobs is not None and plain.choices[0].logprobs.content is not None
    assert all(entry.top_logprobs == [] for entry in plain.choices[0].logprobs.content)
    assert simulated(HELLO).choices[0].logprobs is None


def test_the_refusal_marker_gets_a_refusal_with_no_content() -> None:
    asked = {**HELLO, "messages": [{"role": "user", "content": f"please {REFUSE_MARKER}"}]}
    refused = simulated({**asked, "n": 2, "logprobs": True})

    for choice in refused.choices:
        assert (choice.message.content, choice.message.refusal) == (None, REFUSAL_TEXT)
        assert choice.finish_reason == "stop"
        assert choice.logprobs is not None and choice.logprobs.content is None
        assert "".join(t.token for t in choice.logprobs.refusal or []) == REFUSAL_TEXT
    assert refused.usage is not None and refused.usage.completion_tokens == 2 * count_tokens(REFUSAL_TEXT)


def test_bad_n_and_logprobs_values_are_400_naming_the_parameter() -> None:
    for fields, param in [
        ({"n": 0}, "n"),
        ({"n": "2"}, "n"),
        ({"logprobs": "yes"}, "logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ]:
        response = posted({**HELLO, **fields})
        assert response.status_code == 400, fields
        assert response.json()["error"]["param"] == param, fields
    alone = posted({**HELLO, "top_logprobs": 2})
    assert alone.status_code == 400 and "only allowed with logprobs" in alone.json()["error"]["message"]
