"""The services as processes (`Pipeline`) for an e2e test: topics and ports of its own."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from inferq.messaging.admin import create_topics
from inferq.messaging.kafka_config import KafkaSettings
from inferq.tools.stack.pipeline import Pipeline, PipelinePorts, PortsInUseError
from tests.support.inprocess import free_port


def slow_streams(*, speed: float = 1, **env: str) -> dict[str, Any]:
    """`running_pipeline` options for breaking something mid-stream: at backend `speed` 1 an
    analysis takes 2.8 s, its tokens about a quarter of a second apart (at 0.25, four times as
    long), each chunk sent at once on its own; the schedule pinned (not the hour's) and the adaptive
    budget off. `env`: settings on top."""
    return {
        "backend_args": ["--speed", str(speed)],
        "extra_env": {
            "INFERQ_DISPATCHER_SCHEDULE_PIN": "normal",
            "INFERQ_DISPATCHER_ADAPTIVE": "false",
            "INFERQ_DISPATCHER_STREAM_CHUNK_TOKENS": "1",
            "INFERQ_DISPATCHER_STREAM_CHUNK_LINGER_MS": "0",
            **env,
        },
    }


# How many times a start whose ports were taken meanwhile chooses them again.
_PORT_ATTEMPTS = 3


def _free_ports() -> PipelinePorts:
    return PipelinePorts(
        ingest=free_port(),
        results=free_port(),
        dispatcher=free_port(),
        backend=free_port(),
        ingest_metrics=free_port(),
        results_metrics=free_port(),
    )


@contextlib.contextmanager
def running_pipeline(
    bootstrap: str,
    work_dir: Path,
    *,
    name: str,
    regions: Sequence[str] = (),
    dispatchers: int = 1,
    clean_exits: bool = True,
    **options: Any,
) -> Iterator[Pipeline]:
    """A started `Pipeline` (`options`: its fields) with `dispatchers` dispatchers on fresh topics,
    prefixed `name` and a uuid (with the reply topic of each of `regions`), and free ports; stopped
    on the way out. With `clean_exits` every service must then have exited 0 (a test that kills one
    says False)."""
    prefix = f"{name}{uuid.uuid4().hex[:10]}"
    create_topics(KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix), regions=regions)
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        pipeline = Pipeline(
            bootstrap=bootstrap, work_dir=work_dir, ports=_free_ports(), topic_prefix=prefix, **options
        )
        try:
            pipeline.start(dispatchers=dispatchers)
            break
        except PortsInUseError:
            # A port derived from a free one (a spare backend's, a replica's) was taken meanwhile by
            # another process of this busy machine: nothing started yet, so choose the ports again.
            if attempt == _PORT_ATTEMPTS:
                raise
        except BaseException:
            pipeline.stop()  # the start's error is the one to see, not the exits it caused
            raise
    try:
        yield pipeline
    finally:
        codes = pipeline.stop()
        if clean_exits:
            assert all(code == 0 for code in codes.values()), f"unclean exits: {codes}"
