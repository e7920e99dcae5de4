"""Every choice of an answer in the results service: stored, served by ``GET /v1/requests/{id}``
and POSTed in a webhook's body; a database from before results carried choices gains the column."""

from __future__ import annotations

import json
import sqlite3

from starlette.testclient import TestClient

from inferq.client.models import Outcome
from inferq.messaging.codec import result_codec
from inferq.messaging.records import Choice
from inferq.results.app import create_app
from inferq.results.settings import ResultsSettings
from inferq.results.table import ResultsTable
from inferq.results.view import public_view
from inferq.results.webhooks import result_body
from tests.support.fakes import FakeResultFeed, a_result
from tests.support.waiting import wait_until

LOGPROBS = {"content": [{"token": "one", "logprob": -0.5, "bytes": [111, 110, 101], "top_logprobs": []}]}
CALLS = [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]
CHOICES = (
    Choice(0, "one", "stop", logprobs=json.dumps(LOGPROBS)),
    Choice(1, None, "tool_calls", tool_calls=json.dumps(CALLS)),
    Choice(2, None, "stop", refusal="I can't help with that."),
)
SHOWN = [
    {"index": 0, "content": "one", "finish_reason": "stop", "logprobs": LOGPROBS},
    {"index": 1, "content": None, "finish_reason": "tool_calls", "tool_calls": CALLS},
    {"index": 2, "content": None, "finish_reason": "stop", "refusal": "I can't help with that."},
]


def test_get_serves_every_choice_and_the_first_at_the_top(tmp_path) -> None:
    feed = FakeResultFeed()
    app = create_app(ResultsSettings(db_path=tmp_path / "r.db"), check_topics=False, feed=lambda: feed)
    with TestClient(app) as client:
        feed.push([result_codec().encode(a_result("many", output="one", choices=CHOICES))])
        found = wait_until(
            lambda: client.get("/v1/requests/many"), "the result", done=lambda r: r.status_code == 200
        )
    view = found.json()
    assert view["choices"] == SHOWN
    assert view["output"] == "one"


def test_a_result_of_one_plain_choice_shows_no_choices_as_before() -> None:
    assert "choices" not in public_view(a_result("one"))


def test_a_webhook_body_carries_every_choice() -> None:
    body = json.loads(result_body(a_result("hooked", output="one", choices=CHOICES)))
    assert body["choices"] == SHOWN


def test_a_database_from_before_choices_gains_the_column_and_keeps_its_rows(tmp_path) -> None:
    path = tmp_path / "r.db"
    ResultsTable(path).put_many([a_result("old")])
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE results DROP COLUMN choices")
    table = ResultsTable(path)
    assert table.get("default", "old") == a_result("old")
    table.put_many([a_result("new", output="one", choices=CHOICES)])
    table.close()
    stored = ResultsTable(path).get("default", "new")
    assert stored is not None and stored.choices == CHOICES


def test_the_client_librarys_outcome_keeps_every_choice_and_writes_them_back() -> None:
    """What `inferq.client` (and the batch CLI's result lines) give a caller: the same choices."""
    view = public_view(a_result("many", output="one", choices=CHOICES))
    outcome = Outcome.from_view(view)
    assert outcome.choices == SHOWN
    assert outcome.to_json()["choices"] == SHOWN
    assert "choices" not in Outcome.from_view(public_view(a_result("one"))).to_json()
