"""The results service with tenants, in-process: a result is read with its own tenant's key only."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from inferq.messaging.codec import result_codec
from inferq.messaging.records import InferenceResult
from inferq.results.app import create_app
from inferq.results.routes import Health, ReadMetrics, ResultRoutes
from inferq.results.settings import ResultsSettings
from inferq.results.store import ResultStore
from inferq.tenancy.registry import TenantRegistry
from inferq.tenancy.settings import TenancySettings
from tests.support.fakes import FakeResultFeed, InMemoryMetrics, labels, result_record
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import wait_until

CODEC = result_codec()
ACME, BETA = TenantSpec("acme"), TenantSpec("beta")


def of(tenant: str, request_id: str, output: str) -> bytes:
    return CODEC.encode(
        InferenceResult.from_record(result_record(request_id) | {"tenant": tenant, "output": output})
    )


class Results:
    def __init__(self, client: TestClient, feed: FakeResultFeed, path: Path) -> None:
        self.client = client
        self.feed = feed
        self.path = path

    def get(self, request_id: str, spec: TenantSpec | None = None, **kwargs: Any) -> Any:
        headers = spec.headers() if spec is not None else kwargs.pop("headers", {})
        return self.client.get(f"/v1/requests/{request_id}", headers=headers, **kwargs)


@pytest.fixture
def results(tmp_path: Path) -> Iterator[Results]:
    path = write_tenants(tmp_path / "tenants.toml", ACME, BETA)
    settings = ResultsSettings(
        db_path=tmp_path / "r.db", tenants=TenancySettings(file=path, reload_interval_s=0.05)
    )
    feed = FakeResultFeed()
    with TestClient(create_app(settings, check_topics=False, feed=lambda: feed)) as client:
        feed.push([of("acme", "x", "acme's"), of("beta", "x", "beta's"), of("acme", "mine", "acme only")])
        wait_until(lambda: client.get("/healthz").json()["results"], "the batch", done=lambda n: n == 3)
        yield Results(client, feed, path)


def test_each_tenant_reads_its_own_result_of_a_shared_id(results):
    assert results.get("x", ACME).json()["output"] == "acme's"
    assert results.get("x", BETA).json()["output"] == "beta's"


def test_another_tenants_id_is_404_exactly_like_an_id_nobody_sent(results):
    theirs = results.get("mine", BETA)
    nobody = results.get("never", BETA)
    assert theirs.status_code == nobody.status_code == 404
    assert theirs.json() == {"error": "no result for request_id 'mine' (yet)"}
    assert nobody.json() == {"error": "no result for request_id 'never' (yet)"}


@pytest.mark.parametrize(
    ("headers", "challenge"),
    [
        ({}, 'Bearer realm="inferq"'),
        ({"authorization": "Bearer not a key"}, 'Bearer realm="inferq", error="invalid_token"'),
        ({"authorization": "Bearer iq_unknownkeyofnobody"}, 'Bearer realm="inferq", error="invalid_token"'),
        ({"authorization": f"Basic {ACME.key}"}, 'Bearer realm="inferq", error="invalid_token"'),
    ],
)
def test_no_valid_key_is_401_before_anything_else(results, headers, challenge):
    for path in ("x", "bad id!"):
        response = results.get(path, headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == challenge
        assert ACME.key not in response.text and "iq_unknown" not in response.text
        assert "error" in response.json()


def test_a_tenant_parameter_must_be_the_keys_own(results):
    assert results.get("x", ACME, params={"tenant": "acme"}).json()["output"] == "acme's"
    other = results.get("x", ACME, params={"tenant": "beta"})
    assert other.status_code == 403 and "belongs to tenant 'acme'" in other.json()["error"]
    for bad in ({"tenant": "no way"}, {"tenant": "t" * 65}, [("tenant", "acme"), ("tenant", "acme")]):
        response = results.get("x", ACME, params=bad)
        assert response.status_code == 422
        assert "no way" not in response.text


def test_a_new_key_works_after_the_file_changes_and_a_removed_one_stops(results):
    rotated = TenantSpec("acme")
    write_tenants(results.path, rotated, BETA)
    wait_until(lambda: results.get("x", rotated).status_code, "the reload", done=lambda s: s == 200)
    assert results.get("x", ACME).status_code == 401


def test_open_mode_reads_the_tenant_named_in_the_query(tmp_path):
    feed = FakeResultFeed()
    app = create_app(ResultsSettings(db_path=tmp_path / "r.db"), check_topics=False, feed=lambda: feed)
    with TestClient(app) as client:
        feed.push([of("loadtest", "x", "theirs"), of("default", "y", "mine")])
        wait_until(lambda: client.get("/healthz").json()["results"], "the batch", done=lambda n: n == 2)
        assert client.get("/v1/requests/x", params={"tenant": "loadtest"}).json()["output"] == "theirs"
        assert client.get("/v1/requests/x").status_code == 404
        assert client.get("/v1/requests/y").json()["output"] == "mine"


def test_reads_and_refusals_are_counted_per_tenant_of_the_file(tmp_path):
    metrics = InMemoryMetrics()
    registry = TenantRegistry(write_tenants(tmp_path / "t.toml", ACME))
    registry.load()
    store = ResultStore(tmp_path / "r.db")
    routes = ResultRoutes(store, lambda: Health("ok"), tenants=registry, metrics=ReadMetrics(metrics.meter))

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with store:
            yield

    app = Starlette(routes=[Route("/v1/requests/{request_id}", routes.get_result)], lifespan=lifespan)
    with TestClient(app) as client:
        client.get("/v1/requests/x", headers=ACME.headers())
        client.get("/v1/requests/x")
        client.get("/v1/requests/x", headers={"authorization": "Bearer iq_nobody"})
        client.get("/v1/requests/x", headers=ACME.headers(), params={"tenant": "attacker-chosen"})
    assert metrics.points("inferq_results_reads_total") == {labels(tenant="acme", outcome="not_found"): 1}
    assert metrics.points("inferq_results_refused_total") == {
        labels(reason="unauthenticated_missing"): 1,
        labels(reason="unauthenticated_unknown"): 1,
        labels(reason="not_entitled", tenant="acme"): 1,
    }
