"""The official openai SDK's `embeddings.create` against inferq on the real broker (the pipeline of
`test_openai_sdk`: ingest, dispatcher, results and the simulated backend as processes): one text
and a list, HIGH and LOW scenarios, float and base64 (the SDK's default), and the same vectors from
the results service's ``GET /v1/requests/{id}``.
"""

from __future__ import annotations

import math

import httpx
import openai
import pytest
from openai.types import CreateEmbeddingResponse

from inferq.messaging import limits
from inferq.tools.simbackend.embeddings import DEFAULT_DIMENSIONS, vector
from inferq.tools.stack.pipeline import Pipeline
from tests.e2e.test_openai_sdk import ACME, BETA, pipeline, sdk, stored

__all__ = ["pipeline"]  # the module's pipeline fixture, shared, not copied

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MEMORIES = ["likes green tea", "walks the dog at seven", "sister is called Ana"]


def test_one_text_is_a_high_embedding_whose_vector_the_results_service_keeps(pipeline: Pipeline) -> None:
    client = sdk(pipeline)
    raw = client.embeddings.with_raw_response.create(
        model="inferq", input="what did I say about tea?", encoding_format="float"
    )
    response = raw.parse()
    assert isinstance(response, CreateEmbeddingResponse)
    assert raw.headers["x-inferq-tier"] == "HIGH"  # chat_embedding, the endpoint's default scenario
    assert response.object == "list" and response.model == "text-embedding-3-small"
    [item] = response.data
    assert item.index == 0 and len(item.embedding) == DEFAULT_DIMENSIONS
    assert item.embedding == pytest.approx(vector("what did I say about tea?"), abs=1e-6)
    assert math.isclose(math.fsum(v * v for v in item.embedding), 1.0, rel_tol=1e-4)
    assert response.usage.prompt_tokens == response.usage.total_tokens > 0
    request_id = raw.headers["x-inferq-request-id"]
    outcome = stored(pipeline, request_id, ACME)
    assert outcome.status_code == 200
    assert outcome.json()["status"] == "OK"
    assert outcome.json()["embeddings"] == [item.embedding]
    # Another tenant's key: like an id nobody sent.
    other = httpx.get(
        f"{pipeline.results_url}/v1/requests/{request_id}",
        headers=BETA.headers(),
        timeout=10,
    )
    assert other.status_code == 404
    client.close()


def test_a_list_in_bulk_is_low_with_the_dimensions_asked_and_base64_by_default(pipeline: Pipeline) -> None:
    client = sdk(pipeline)
    raw = client.embeddings.with_raw_response.create(
        model="text-embedding-3-small",
        input=MEMORIES,
        dimensions=64,
        extra_headers={"X-Inferq-Scenario": "memory_embedding"},
    )
    # The SDK asked base64 (it does unless told otherwise) and decoded the 32-bit floats itself.
    assert b'"encoding_format":"base64"' in raw.http_request.content
    assert raw.headers["x-inferq-tier"] == "LOW"
    response = raw.parse()
    assert [item.index for item in response.data] == [0, 1, 2]
    for text, item in zip(MEMORIES, response.data, strict=True):
        assert len(item.embedding) == 64
        assert item.embedding == pytest.approx(vector(text, 64), abs=1e-6)
    assert response.data[0].embedding != response.data[1].embedding
    outcome = stored(pipeline, raw.headers["x-inferq-request-id"], ACME)
    assert outcome.json()["tier"] == "LOW"
    assert outcome.json()["embeddings"] == [item.embedding for item in response.data]
    client.close()


def test_hostile_embedding_bodies_are_the_sdks_bad_request(pipeline: Pipeline) -> None:
    client = sdk(pipeline)
    too_many = ["x"] * (limits.MAX_EMBEDDING_INPUTS + 1)
    cases: list[tuple[dict[str, object], str]] = [
        ({"input": too_many}, "input"),
        ({"input": ["ok", "y" * (limits.MAX_EMBEDDING_INPUT_CHARS + 1)]}, "input[1]"),
        ({"input": [[1, 2, 3]]}, "input"),
        ({"input": []}, "input"),
        ({"input": "hi", "dimensions": 0}, "dimensions"),
        ({"input": "hi", "dimensions": limits.MAX_EMBEDDING_DIMENSIONS + 1}, "dimensions"),
        # 200 vectors of the default 1,536 dimensions would not fit a result record.
        ({"input": ["z"] * 200}, "input"),
    ]
    for fields, param in cases:
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model="inferq", encoding_format="float", **fields)  # type: ignore[arg-type]
        assert refused.value.param == param, fields
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="no-such-embedder", input="hi")
    client.close()
