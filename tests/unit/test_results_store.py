from services.messaging.records import InferenceResult
from services.results.store import ResultStore, public_view


def result(rid, status="OK", completed=30):
    return InferenceResult.from_record(record(rid, status, completed))


def record(rid, status="OK", completed=30):
    return {
        "request_id": rid,
        "tier": "HIGH",
        "status": status,
        "output": "hi",
        "error": None,
        "model": "m",
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        "enqueued_at_ms": 0,
        "dispatched_at_ms": 10,
        "completed_at_ms": completed,
        "attempts": 1,
        "dispatcher_id": "d",
    }


def test_first_result_wins_and_duplicates_are_counted(tmp_path):
    store = ResultStore(tmp_path / "r.db")
    assert store.put_many([result("a"), result("b")]) == (2, 0)
    assert store.put_many([result("a", status="FAILED", completed=99), result("c")]) == (1, 1)
    assert store.get("a").status == "OK"
    assert store.count() == 3
    assert store.get("zzz") is None


def test_results_survive_reopen(tmp_path):
    ResultStore(tmp_path / "r.db").put_many([result("a")])
    assert ResultStore(tmp_path / "r.db").get("a") == result("a")


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
