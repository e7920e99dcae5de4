"""One table of every setting: it covers every field of every settings model of the product, each
variable is described once for every service that reads it, and the dispatcher's own are under
INFERQ_DISPATCHER_ with their previous names still read."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from pydantic_settings import BaseSettings

import inferq
from inferq.config.table import SERVICES, disagreements, renamed, table
from inferq.dispatcher.settings import DispatcherSettings
from inferq.ingest.settings import IngestSettings
from inferq.settings.table import settings_of


def _product_settings_models() -> list[type[BaseSettings]]:
    """Every settings class of the product (tooling aside), found by importing its modules."""
    for module in pkgutil.walk_packages(inferq.__path__, "inferq."):
        if not module.name.startswith("inferq.tools") and not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found, todo = [], [BaseSettings]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("inferq.") and not sub.__module__.startswith("inferq.tools"):
                found.append(sub)
    return found


def test_the_table_covers_every_field_of_every_settings_model() -> None:
    models = _product_settings_models()
    assert {m.__name__ for m in models} >= {"DispatcherSettings", "IngestSettings", "ResultsSettings"}
    in_table = {row.setting.name for row in table()}
    missing = [
        f"{model.__name__}.{'.'.join(s.path)} ({s.name})"
        for model in models
        for s in settings_of(model)
        if s.name not in in_table
    ]
    assert missing == []


def test_every_row_says_what_it_is_for() -> None:
    undescribed = [row.setting.name for row in table() if not row.setting.description]
    assert undescribed == []
    assert all(row.setting.default and row.setting.type for row in table())


def test_a_shared_value_is_one_variable_described_the_same_for_every_service() -> None:
    assert disagreements() == []
    by_name = {row.setting.name: row.services for row in table()}
    assert by_name["INFERQ_BUDGET"] == ("ingest", "dispatcher")
    assert by_name["INFERQ_TYPICAL_LATENCY_S"] == ("ingest", "dispatcher")
    assert by_name["INFERQ_SCENARIO_TIERS"] == ("ingest", "dispatcher")
    assert by_name["INFERQ_MODEL_FAST"] == ("ingest", "dispatcher")
    assert by_name["INFERQ_DISPATCHER_GROUP_ID"] == ("ingest", "dispatcher")
    assert by_name["INFERQ_KAFKA_BOOTSTRAP_SERVERS"] == tuple(SERVICES)


def test_secrets_are_marked() -> None:
    secret = {row.setting.name for row in table() if row.setting.secret}
    assert secret == {
        "INFERQ_DISPATCHER_BACKEND_API_KEY",
        "INFERQ_KAFKA_SASL_PASSWORD",
        "INFERQ_KAFKA_SSL_KEY_PASSWORD",
        "INFERQ_REDIS_PASSWORD",
        "INFERQ_WEBHOOK_SECRET",
    }


def test_the_dispatchers_own_settings_have_its_prefix_and_their_old_names_are_read() -> None:
    own = [s for s in settings_of(DispatcherSettings) if len(s.path) == 1]
    shared = {"INFERQ_BUDGET", "INFERQ_TYPICAL_LATENCY_S", "INFERQ_SCENARIO_TIERS", "INFERQ_COORDINATION"}
    shared |= {"INFERQ_MODEL_FAST", "INFERQ_MODEL_ACCURATE", "INFERQ_MODEL_CHEAP"}
    assert [s.name for s in own if not s.name.startswith("INFERQ_DISPATCHER_")] == sorted(
        shared, key=[s.name for s in own].index
    )
    # Each of the dispatcher's own variables was INFERQ_<FIELD> (INFERQ_DISPATCHER_ID kept its name),
    # but those added after the rename, which never had an old name.
    added_since = {"INFERQ_DISPATCHER_CREATED_AT_MAX_LAG_S", "INFERQ_DISPATCHER_MAX_PREEMPTIONS"}
    added_since |= {"INFERQ_DISPATCHER_STREAM_CHUNK_CHARS"}
    added_since |= {"INFERQ_DISPATCHER_BACKEND_PREEMPTIBLE"}  # INFERQ_BACKEND_PREEMPTIBLE: its other name
    old_of = {new: old for old, new in DispatcherSettings.RENAMED.items()}
    not_renamed = [s.name for s in own if s.name.startswith("INFERQ_DISPATCHER_") and s.name not in old_of]
    assert sorted(not_renamed) == sorted({"INFERQ_DISPATCHER_ID"} | added_since)
    wrong = [
        (old_of[s.name], s.name)
        for s in own
        if s.name in old_of
        and s.name.startswith("INFERQ_DISPATCHER_")
        and old_of[s.name] != f"INFERQ_{s.path[0].upper()}"
    ]
    assert wrong == []


def test_no_old_name_is_a_current_one() -> None:
    current = {row.setting.name for row in table()}
    assert sorted(set(renamed()) & current) == []
    assert set(renamed().values()) <= current


@pytest.mark.parametrize("model", [DispatcherSettings, IngestSettings])
def test_every_new_name_of_a_model_is_one_it_reads(model: type[DispatcherSettings | IngestSettings]) -> None:
    names = {s.name for s in settings_of(model)}
    assert set(model.RENAMED.values()) <= names
