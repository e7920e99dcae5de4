"""`inferq report --tenant`: one tenant's part of a run, and names no record could carry refused."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from inferq.messaging.records import InferenceResult, Status
from inferq.messaging.tiers import Tier
from inferq.tools.measures import MeasuredRequest
from inferq.tools.report.cli import register
from inferq.tools.report.documents import RunDocument, load_documents, outcome_from_record, write_documents
from inferq.tools.report.stats import RequestCounts, request_counts
from inferq.tools.report.tenants import check_tenant, describe_tenants, document_of_tenant, tenant_counts
from inferq.tools.traces.files import load_trace

H, L = Tier.HIGH, Tier.LOW


def o(
    rid: str, tenant: str, tier: Tier, enq: int, disp: int | None, done: int, status: str = "OK"
) -> MeasuredRequest:
    return MeasuredRequest(rid, tier, status, enq, disp, done, tenant)


# Budget 4. Tenant a floods: three chats that waited 1 s each and an expired brief; tenant b's one
# chat started at once and its brief waited 2 s.
RUN = [
    o("r:1", "a", H, 0, 1_000, 1_100),
    o("r:2", "a", H, 0, 1_000, 1_100),
    o("r:3", "a", H, 0, 1_000, 1_100),
    o("r:4", "a", L, 0, None, 5_000, "EXPIRED"),
    o("r:5", "b", H, 500, 500, 600),
    o("r:6", "b", L, 0, 2_000, 3_000),
]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="inferq")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["report", *argv])


@pytest.mark.parametrize("name", ["acme", "nightly-batch", "eu.app_2:x", "a" * 64])
def test_a_tenant_name_records_can_carry_is_accepted(name: str) -> None:
    assert check_tenant(name) == name
    assert parse(["run1", "--tenant", name]).tenant == name


@pytest.mark.parametrize(
    "name",
    ["", "a" * 65, "a b", "acme\n", "../etc", "café", "a/b", "x" * 10_000, "\x00"],
)
def test_a_name_no_record_can_carry_is_refused_before_anything_is_read(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(["run1", "--tenant", name])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "a tenant is 1-64 letters" in err
    assert len(err) < 600  # a 10,000-character name is not echoed back whole


def test_a_result_and_a_record_carry_their_tenant_and_old_records_are_default() -> None:
    result = InferenceResult(
        request_id="r:9",
        tier=H,
        status=Status.OK,
        model="inferq-fast",
        enqueued_at_ms=0,
        completed_at_ms=2,
        attempts=1,
        dispatcher_id="d",
        dispatched_at_ms=1,
        tenant="acme",
    )
    assert MeasuredRequest.from_result(result).tenant == "acme"
    record = {"request_id": "r:9", "tier": "HIGH", "status": "OK", "enqueued_at_ms": 0}
    record |= {"dispatched_at_ms": 1, "completed_at_ms": 2}
    assert outcome_from_record(record).tenant == "default"
    assert outcome_from_record(record | {"tenant": "b"}).tenant == "b"


def test_one_tenants_summary_holds_only_its_waits_and_outcomes() -> None:
    whole = RunDocument("run", "r", 4, RUN)
    b = document_of_tenant(whole, "b")
    assert [x.request_id for x in b.outcomes] == ["r:5", "r:6"]
    s = b.summary()
    assert s.tier(H).by_status == {"OK": 1} and s.tier(L).by_status == {"OK": 1}
    assert s.tier(H).queue_wait_s is not None and s.tier(H).queue_wait_s.mean == 0.0
    assert s.tier(L).queue_wait_s is not None and s.tier(L).queue_wait_s.mean == 2.0
    assert s.max_in_flight == 1  # b never held two tokens; the run as a whole held three (a's chats)
    assert whole.summary().max_in_flight == 3
    a = document_of_tenant(whole, "a").summary()
    assert a.tier(H).queue_wait_s is not None and a.tier(H).queue_wait_s.mean == 1.0
    assert a.tier(L).by_status == {"EXPIRED": 1}
    assert document_of_tenant(whole, "nobody").outcomes == []


def test_a_documents_request_counts_are_not_split_so_they_are_dropped() -> None:
    doc = RunDocument("simulation", "s", 4, RUN, {t: RequestCounts(9, 9, 0) for t in Tier}, {"p": 1})
    narrowed = document_of_tenant(doc, "a")
    assert narrowed.requests is None
    assert narrowed.params == {"p": 1, "tenant": "a"}


def test_tenants_are_counted_busiest_first() -> None:
    counts = tenant_counts(RUN)
    assert counts == {"a": 4, "b": 2}
    assert list(counts) == ["a", "b"]
    assert describe_tenants(counts) == "a 4, b 2"
    many = {f"t{i}": 1 for i in range(12)}
    assert describe_tenants(many, limit=2) == "t0 1, t1 1 and 10 more"


def test_request_records_are_read_for_one_tenant(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    lines = [
        {"request_id": "r:1", "tier": "HIGH", "sent_at_ms": 0, "created_at_ms": 0, "tenant": "a"},
        {"request_id": "r:x", "tier": "HIGH", "sent_at_ms": 0, "tenant": "a"},  # a's 429
        {"request_id": "r:5", "tier": "HIGH", "sent_at_ms": 0, "created_at_ms": 500, "tenant": "b"},
        {"request_id": "r:6", "tier": "LOW", "sent_at_ms": 0, "created_at_ms": 0, "tenant": "b"},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    b = load_trace(path, start_ms=0, tenant="b")
    assert [x.request_id for x in b.arrivals] == ["r:6", "r:5"] and b.without_tenant == 0
    counts = request_counts(b, [x for x in RUN if x.tenant == "b"])
    assert counts[H] == RequestCounts(submitted=1, accepted=1, missing=0)
    a = load_trace(path, start_ms=0, tenant="a")
    assert a.submitted(H) == 2 and len(a.arrivals) == 1
    # A file from before records carried a tenant cannot be split: say so rather than guess.
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({"request_id": "r:1", "tier": "HIGH", "created_at_ms": 0}) + "\n")
    assert load_trace(old, start_ms=0, tenant="a").without_tenant == 1
    assert load_trace(old, start_ms=0).without_tenant == 0


def test_report_of_documents_for_one_tenant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "run.json"
    write_documents(source, [RunDocument("run", "r", 4, RUN)])
    out = tmp_path / "out"
    args = parse([str(source), "--tenant", "b", "--out", str(out)])
    assert args.func(args) == 0
    [doc] = load_documents(out / "report.json")
    assert {x.tenant for x in doc.outcomes} == {"b"}
    assert sorted(x.request_id for x in doc.outcomes) == ["r:5", "r:6"]  # none of a's
    assert doc.params["tenant"] == "b"
    printed = capsys.readouterr().out
    assert "tenant b only" in printed
    high = next(line for line in printed.splitlines() if line.startswith("HIGH outcomes"))
    assert "OK 1" in high  # a's three chats are not counted


def test_report_for_a_tenant_with_no_outcomes_fails_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "run.json"
    write_documents(source, [RunDocument("run", "r", 4, RUN)])
    args = parse([str(source), "--tenant", "c"])
    assert args.func(args) == 1
    assert "no outcomes of tenant 'c'" in capsys.readouterr().out
    assert not (tmp_path / "run-report-c").exists()


def test_default_folder_of_a_tenants_report_is_its_own(tmp_path: Path) -> None:
    source = tmp_path / "run.json"
    write_documents(source, [RunDocument("run", "r", 4, RUN)])
    args = parse([str(source), "--tenant", "a"])
    assert args.func(args) == 0
    assert (tmp_path / "run-report-a" / "report.json").is_file()
    assert not (tmp_path / "run-report").exists()  # the whole run's report is not overwritten
