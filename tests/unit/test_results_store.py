"""The results table (SQLite, first result wins) and the async store that keeps it off the event loop."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

import pytest

from inferq.messaging.records import InferenceResult
from inferq.results.errors import StoreNotOpenError
from inferq.results.store import WORKER_THREAD_NAME, ResultStore
from inferq.results.table import ResultsTable
from inferq.results.view import public_view
from tests.support.fakes import a_result as result
from tests.support.fakes import result_record as record
from tests.support.loop import in_loop


def worker_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(WORKER_THREAD_NAME))


# --- the table ----------------------------------------------------------------------------------


def test_first_result_wins_and_duplicates_are_counted(tmp_path):
    table = ResultsTable(tmp_path / "r.db")
    assert table.put_many([result("a"), result("b")]) == (2, 0)
    assert table.put_many([result("a", status="FAILED", completed_at_ms=99), result("c")]) == (1, 1)
    assert table.get("default", "a").status == "OK"
    assert table.count() == 3
    assert table.get("default", "zzz") is None
    table.close()


def test_results_survive_reopen_in_wal_mode(tmp_path):
    ResultsTable(tmp_path / "r.db").put_many([result("a")])
    assert ResultsTable(tmp_path / "r.db").get("default", "a") == result("a")
    with sqlite3.connect(tmp_path / "r.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_public_view_timings():
    view = public_view(result("a"))
    assert view["timings"] == {
        "enqueued_at_ms": 0,
        "dispatched_at_ms": 10,
        "completed_at_ms": 30,
        "queue_wait_ms": 10,
        "inference_ms": 20,
        "end_to_end_ms": 30,
    }
    expired = public_view(
        InferenceResult.from_record(
            record("b", status="EXPIRED") | {"dispatched_at_ms": None, "output": None}
        )
    )
    assert expired["timings"]["queue_wait_ms"] is None
    assert "output" not in expired


# --- the async store ----------------------------------------------------------------------------


@in_loop
async def test_store_keeps_the_first_result_and_counts_duplicates(tmp_path):
    async with ResultStore(tmp_path / "r.db") as store:
        assert await store.put_many([result("a"), result("b")]) == (2, 0)
        assert await store.put_many(r for r in [result("a", status="FAILED"), result("c")]) == (1, 1)
        assert (await store.get("default", "a")) == result("a")
        assert await store.get("default", "zzz") is None
        assert await store.count() == 3


def test_reads_made_while_a_batch_is_written_wait_for_it_and_the_loop_keeps_running(tmp_path):
    batch = [result(f"r{i}") for i in range(5_000)]

    async def scenario() -> tuple[int, list[int], list[InferenceResult | None]]:
        async with ResultStore(tmp_path / "r.db") as store:
            write = asyncio.create_task(store.put_many(batch))
            await asyncio.sleep(0)  # the write is on the worker now
            counts = [asyncio.create_task(store.count()) for _ in range(10)]
            gets = [asyncio.create_task(store.get("default", f"r{i}")) for i in (0, 2_500, 4_999)]
            ticks = 0
            # With SQLite on the loop, nothing else would run until the write returned.
            while not write.done():
                ticks += 1
                await asyncio.sleep(0)
            assert await write == (5_000, 0)
            return ticks, list(await asyncio.gather(*counts)), list(await asyncio.gather(*gets))

    ticks, counts, gets = asyncio.run(scenario())
    assert ticks > 0
    assert counts == [5_000] * 10  # each read saw the whole batch, never part of it
    assert [g.request_id for g in gets if g is not None] == ["r0", "r2500", "r4999"]


@in_loop
async def test_close_lets_a_write_in_flight_finish_and_ends_the_worker(tmp_path):
    before = worker_threads()

    store = ResultStore(tmp_path / "r.db")
    await store.open()
    assert worker_threads() == before + 1
    write = asyncio.create_task(store.put_many([result(f"r{i}") for i in range(1_000)]))
    await asyncio.sleep(0)
    await asyncio.gather(store.close(), store.close())  # concurrent closes: both wait for one
    await store.close()  # and again, later: nothing to do
    stored, _ = await write
    async with ResultStore(tmp_path / "r.db") as reopened:
        assert (stored, await reopened.count()) == (1_000, 1_000)
    assert worker_threads() == before


@in_loop
async def test_a_closed_or_unopened_store_refuses_calls(tmp_path):
    store = ResultStore(tmp_path / "r.db")
    with pytest.raises(StoreNotOpenError, match="not open"):
        await store.count()
    await store.open()
    await store.open()  # idempotent
    await store.close()
    with pytest.raises(StoreNotOpenError):
        await store.get("default", "a")
    with pytest.raises(StoreNotOpenError):
        await store.open()
    never_opened = ResultStore(tmp_path / "other.db")
    await never_opened.close()
    assert not (tmp_path / "other.db").exists()


def test_a_store_that_cannot_open_leaves_no_worker_behind(tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    before = worker_threads()

    async def scenario() -> None:
        store = ResultStore(tmp_path / "a-file" / "r.db")
        with pytest.raises(OSError):
            await store.open()
        with pytest.raises(StoreNotOpenError):
            await store.count()

    asyncio.run(scenario())
    assert worker_threads() == before


# --- tenants ------------------------------------------------------------------------------------


def tenant_result(tenant: str, request_id: str, output: str) -> InferenceResult:
    return InferenceResult.from_record(record(request_id) | {"tenant": tenant, "output": output})


def test_the_same_id_of_two_tenants_is_two_results_each_read_by_its_own_tenant(tmp_path):
    table = ResultsTable(tmp_path / "r.db")
    assert table.put_many([tenant_result("acme", "x", "acme's"), tenant_result("beta", "x", "beta's")]) == (
        2,
        0,
    )
    assert table.put_many([tenant_result("acme", "x", "again")]) == (0, 1)
    assert table.get("acme", "x").output == "acme's"
    assert table.get("beta", "x").output == "beta's"
    assert table.get("gamma", "x") is None
    assert table.get("default", "x") is None
    table.close()


OLD_SCHEMA = """
CREATE TABLE results (
    request_id TEXT PRIMARY KEY, tier TEXT NOT NULL, status TEXT NOT NULL, output TEXT, error TEXT,
    model TEXT NOT NULL, usage TEXT, enqueued_at_ms INTEGER NOT NULL, dispatched_at_ms INTEGER,
    completed_at_ms INTEGER NOT NULL, attempts INTEGER NOT NULL, dispatcher_id TEXT NOT NULL{stored}
)
"""


@pytest.mark.parametrize("with_stored_at", [True, False])
def test_a_database_from_before_tenants_is_migrated_under_tenant_default(tmp_path, with_stored_at):
    path = tmp_path / "r.db"
    with sqlite3.connect(path) as db:
        db.execute(
            OLD_SCHEMA.format(stored=", stored_at_ms INTEGER NOT NULL DEFAULT 0" if with_stored_at else "")
        )
        columns = (
            "request_id, tier, status, output, model, usage, enqueued_at_ms, completed_at_ms, attempts, "
            "dispatcher_id"
        )
        for rid in ("a", "b"):
            db.execute(
                f"INSERT INTO results ({columns}) VALUES (?, 'HIGH', 'OK', 'old', 'm', NULL, 0, 30, 1, 'd')",  # noqa: S608
                (rid,),
            )
    table = ResultsTable(path)
    assert table.count() == 2
    migrated = table.get("default", "a")
    assert migrated is not None and (migrated.tenant, migrated.output) == ("default", "old")
    assert table.get("acme", "a") is None
    # The new key takes the same id from another tenant, and still drops a repeat.
    assert table.put_many([tenant_result("acme", "a", "new"), tenant_result("default", "b", "dup")]) == (1, 1)
    table.close()
    with sqlite3.connect(path) as db:
        key = [row[1] for row in db.execute("PRAGMA table_info(results)") if row[5] > 0]
        assert key == ["tenant", "request_id"]
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables == {"results", "reply_positions"}  # no table left over from the move
    assert ResultsTable(path).count() == 3  # opened again: nothing left to migrate


def told_result(request_id: str) -> InferenceResult:
    """A result that carries everything the backend said about its answer."""
    usage = {
        "prompt_tokens": 4,
        "completion_tokens": 3,
        "total_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 2},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    return InferenceResult.from_record(
        record(request_id)
        | {
            "usage": usage,
            "finish_reason": "length",
            "system_fingerprint": "fp_44709d6fcb",
            "output": "cut sh",
        }
    )


def test_a_database_from_before_results_said_why_they_stopped_gains_the_fields(tmp_path):
    """A table written by the previous release (keyed by tenant, no finish_reason column): opened,
    its rows read with none of the new fields, and new results keep them across a reopen."""
    path = tmp_path / "r.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE results (tenant TEXT NOT NULL DEFAULT 'default', request_id TEXT NOT NULL, "
            "tier TEXT NOT NULL, status TEXT NOT NULL, output TEXT, error TEXT, model TEXT NOT NULL, "
            "usage TEXT, enqueued_at_ms INTEGER NOT NULL, dispatched_at_ms INTEGER, "
            "completed_at_ms INTEGER NOT NULL, attempts INTEGER NOT NULL, dispatcher_id TEXT NOT NULL, "
            "stored_at_ms INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (tenant, request_id))"
        )
        db.execute(
            "INSERT INTO results (request_id, tier, status, output, model, usage, enqueued_at_ms, "
            "completed_at_ms, attempts, dispatcher_id) VALUES ('old', 'HIGH', 'OK', 'o', 'm', "
            """'{"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}', 0, 30, 1, 'd')"""
        )
    table = ResultsTable(path)
    old = table.get("default", "old")
    assert old is not None and (old.finish_reason, old.system_fingerprint) == (None, None)
    assert "finish_reason" not in public_view(old) and "system_fingerprint" not in public_view(old)
    assert public_view(old)["usage"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    assert table.put_many([told_result("new")]) == (1, 0)
    table.close()

    stored = ResultsTable(path).get("default", "new")
    assert stored == told_result("new")
    view = public_view(stored)
    assert (view["finish_reason"], view["system_fingerprint"]) == ("length", "fp_44709d6fcb")
    assert view["usage"] == {
        "prompt_tokens": 4,
        "completion_tokens": 3,
        "total_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 2},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
