"""Two ingest replicas behind one load balancer: each answers the synchronous and streamed chats of
its own callers (each follows the whole reply topic, so an outcome reaches whichever replica holds
its caller)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from tests.support.inprocess import free_port
from tests.support.pipeline import running_pipeline

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

CALLS_PER_REPLICA = 12


@pytest.fixture(scope="module")
def replicas(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    with running_pipeline(
        kafka_bootstrap,
        tmp_path_factory.mktemp("ingest-replicas"),
        name="e2eir",
        budget=4,
        backend_args=["--speed", "5"],
    ) as pipeline:
        second = free_port()
        pipeline.add_ingest(second)
        yield [pipeline.ingest_url, f"http://127.0.0.1:{second}"]


def _chat(base_url: str, index: int, stream: bool) -> str:
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=60)
    messages = [{"role": "user", "content": f"replica call {index}"}]
    if not stream:
        answer = client.chat.completions.create(model="inferq", messages=messages)  # type: ignore[arg-type]
        return answer.choices[0].message.content or ""
    chunks = client.chat.completions.create(model="inferq", messages=messages, stream=True)  # type: ignore[arg-type]
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.mark.parametrize("stream", [False, True], ids=["sync", "streamed"])
def test_every_replica_answers_its_own_callers(replicas: list[str], stream: bool) -> None:
    calls = [(url, i) for url in replicas for i in range(CALLS_PER_REPLICA)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda call: _chat(call[0], call[1], stream), calls))
    assert len(answers) == len(calls)
    assert all(answer.strip() for answer in answers), "every call got its answer, on both replicas"
