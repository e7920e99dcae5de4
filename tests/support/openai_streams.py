"""OpenAI SDK streams in threads, for the chaos tests that break something while callers read: each
stream's pieces, its end or its error go to one queue, which the test reads with bounded waits."""

from __future__ import annotations

import queue
from typing import Any

import openai

# (stream number, "text" | "end" | "error", value): ("text", (completion id, piece)), ("end", None),
# ("error", the error event's body as the SDK raised it).
StreamEvent = tuple[int, str, Any]


def stream_into(url: str, n: int, events: queue.Queue[StreamEvent]) -> None:
    """One SDK stream of a long analysis (the caller's whole deadline: two minutes) from ingest at
    `url`; every piece, the end or the error goes to `events`."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="open-mode", max_retries=0, timeout=180)
    try:
        stream = client.chat.completions.create(
            model="inferq",
            messages=[{"role": "user", "content": f"tell me a long story number {n}"}],
            stream=True,
            extra_headers={"X-Inferq-Scenario": "emotion_analysis", "X-Inferq-Deadline-Ms": "120000"},
        )
        for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    events.put((n, "text", (chunk.id, choice.delta.content)))
        events.put((n, "end", None))
    except openai.APIError as exc:
        events.put((n, "error", exc.body))
    finally:
        client.close()
