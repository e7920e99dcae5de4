"""The results ASGI app: consumes the reply topic into the store; serves ``GET /v1/requests/{id}``.

aiokafka is the consumer here: this service is one event loop that both serves HTTP and consumes,
its volume is modest, and an async consumer needs no thread hand-off. Offsets are committed after
the batch is in SQLite, so a crash redoes a batch (duplicates are dropped by request_id).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from services.messaging.admin import require_topics
from services.messaging.codec import result_codec
from services.messaging.errors import DecodeError
from services.messaging.records import InferenceResult
from services.results.settings import ResultsSettings
from services.results.store import ResultStore, public_view
from services.telemetry import meter, metrics_endpoint

log = logging.getLogger("inferq.results")


class ResultConsumer:
    def __init__(self, settings: ResultsSettings, store: ResultStore) -> None:
        self._settings = settings
        self._store = store
        self._codec = result_codec()
        self._consumer = AIOKafkaConsumer(
            settings.kafka.topics.results,
            **settings.kafka.aiokafka_config(),
            group_id=settings.group_id,
            # Committed only after the batch is stored.
            enable_auto_commit=False,
            # Every result ever produced is owed to its caller, including those before we started.
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
        )
        m = meter("inferq.results")
        self._stored = m.create_counter("inferq_results_stored_total", description="first results stored")
        self._duplicates = m.create_counter(
            "inferq_results_duplicates_total", description="repeated results for a request_id, dropped"
        )
        self._undecodable = m.create_counter("inferq_results_undecodable_total", description="poison results")
        self.ready = asyncio.Event()

    async def run(self) -> None:
        await self._consumer.start()
        self.ready.set()
        try:
            while True:
                try:
                    await self._consume_once()
                except KafkaError as exc:
                    # A broker outage must not end consumption: results are owed to their callers.
                    log.error(  # noqa: TRY400 - a traceback per retry is noise
                        "consuming results failed, trying again in 1 s: %s", exc
                    )
                    await asyncio.sleep(1.0)
        finally:
            await self._consumer.stop()

    async def _consume_once(self) -> None:
        batches = await self._consumer.getmany(timeout_ms=200, max_records=1000)
        if not batches:
            return
        decoded: list[InferenceResult] = []
        for tp, records in batches.items():
            for record in records:
                try:
                    decoded.append(self._codec.decode(record.value or b""))
                except DecodeError as exc:
                    self._undecodable.add(1)
                    log.error(  # noqa: TRY400 - the traceback adds nothing to the reason
                        "undecodable result %s[%d]@%d skipped: %s", tp.topic, tp.partition, record.offset, exc
                    )
        stored, duplicates = self._store.put_many(decoded)
        self._stored.add(stored)
        self._duplicates.add(duplicates)
        await self._consumer.commit()


def create_app(settings: ResultsSettings, *, check_topics: bool = True) -> Starlette:
    """Composition root of the results service."""
    store = ResultStore(settings.db_path)
    # aiokafka binds its clients to the running loop, so the consumer is built in the lifespan.
    consumer: ResultConsumer | None = None

    async def get_result(request: Request) -> Response:
        request_id = request.path_params["request_id"]
        result = store.get(request_id)
        if result is None:
            return JSONResponse({"error": f"no result for request_id {request_id!r} (yet)"}, status_code=404)
        return JSONResponse(public_view(result))

    async def healthz(_: Request) -> Response:
        ready = consumer is not None and consumer.ready.is_set()
        return JSONResponse({"status": "ok" if ready else "starting", "results": store.count()})

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        nonlocal consumer
        if check_topics:
            await asyncio.to_thread(require_topics, settings.kafka, [settings.kafka.topics.results])
        consumer = ResultConsumer(settings, store)
        task = asyncio.create_task(consumer.run(), name="results-consumer")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 10.0)
            store.close()

    return Starlette(
        routes=[
            Route("/v1/requests/{request_id}", get_result, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
