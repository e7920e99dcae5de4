"""infra/container/compose.yaml, read as Docker Compose reads it: valid by the Compose
Specification's schema (tests/support/compose-spec.json, from compose-spec/compose-go v2.16.2,
Apache-2.0: the schema `docker compose` validates with), and every part wired to what the others
really read. The public images it names cannot be pulled here, so the stack itself is not started:
tests/container runs the image's services against a real broker.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from inferq.cli import build_parser
from inferq.dispatcher.settings import DispatcherSettings
from inferq.ingest.settings import IngestSettings
from inferq.messaging.kafka_config import KafkaSettings
from inferq.results.settings import ResultsSettings
from inferq.tenancy.bind import is_loopback

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "infra" / "container"
COMPOSE = COMPOSE_DIR / "compose.yaml"
SCHEMA = ROOT / "tests" / "support" / "compose-spec.json"
# What a user sets in the shell (or infra/container/.env) before `docker compose up`.
USER_ENV = {"TENANTS_FILE": "./tenants.toml"}
INFERQ_SERVICES = {"topics", "ingest", "dispatcher", "results", "sim-backend"}
SETTINGS: dict[str, type[BaseSettings]] = {
    "topics": KafkaSettings,
    "ingest": IngestSettings,
    "dispatcher": DispatcherSettings,
    "results": ResultsSettings,
}
_VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:-|:\?)(?P<arg>[^}]*))?\}")


class MissingVariableError(Exception):
    pass


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ${NAME}, ${NAME:-default} and ${NAME:?message}, through lists and mappings."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        if env.get(name):
            return env[name]
        if op == ":?":
            raise MissingVariableError(f"{name}: {arg}")
        return arg if op == ":-" else ""

    return _VARIABLE.sub(one, value)


def load(env: dict[str, str] = USER_ENV) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    # Compose ignores the top-level x-* keys once their anchors are merged.
    return interpolate({k: v for k, v in loaded.items() if not k.startswith("x-")}, env)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load()


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = compose["services"]
    return found


def environment(service: dict[str, Any]) -> dict[str, str]:
    """The variables a service's container gets (a variable without a value passes the user's on:
    left out, as for a user who sets none)."""
    return {k: str(v) for k, v in service.get("environment", {}).items() if v is not None}


def sim_port(services: dict[str, Any]) -> int:
    command = services["sim-backend"]["command"]
    return int(command[command.index("--port") + 1])


def settings_of(name: str, service: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as patch:
        for key, value in environment(service).items():
            patch.setenv(key, value)
        return SETTINGS[name]()


@pytest.fixture(autouse=True)
def _no_inferq_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings must see the compose file's variables only, not the test runner's."""
    for key in list(os.environ):
        if key.startswith(("INFERQ_", "KAFKA_")):
            monkeypatch.delenv(key)


def test_the_file_is_valid_compose() -> None:
    raw = yaml.safe_load(COMPOSE.read_text())
    jsonschema.validate(raw, json.loads(SCHEMA.read_text()))


def test_without_a_tenants_file_compose_refuses_to_start_and_says_why() -> None:
    with pytest.raises(MissingVariableError, match="TENANTS_FILE"):
        load({})


def test_the_stack_has_every_part(services: dict[str, Any]) -> None:
    assert set(services) == INFERQ_SERVICES | {"kafka", "redis", "prometheus", "grafana"}
    assert services["kafka"]["image"].startswith("apache/kafka:4.")
    # The simulated backend is opt-in; everything else starts by default.
    assert {n for n, s in services.items() if s.get("profiles")} == {"sim-backend"}
    assert services["sim-backend"]["profiles"] == ["sim"]


def test_the_inferq_services_run_one_image_built_from_this_checkout(services: dict[str, Any]) -> None:
    images = {services[n]["image"] for n in INFERQ_SERVICES}
    assert len(images) == 1
    for name in INFERQ_SERVICES:
        build = services[name]["build"]
        assert (COMPOSE_DIR / build["context"] / build["dockerfile"]).resolve() == (
            COMPOSE_DIR / "Dockerfile"
        ).resolve()


def test_every_command_is_an_inferq_command(services: dict[str, Any]) -> None:
    for name in INFERQ_SERVICES:
        command = services[name]["command"]
        # argparse exits (SystemExit) on an unknown command or option.
        build_parser(command[0]).parse_args(command)


def read_variables(settings: type[BaseSettings]) -> set[str]:
    """The environment variables `settings` reads: its prefix and each field's name, or the
    field's aliases, and those of the settings nested in it (read with their own prefixes)."""
    prefix = settings.model_config.get("env_prefix", "")
    names: set[str] = set()
    for field_name, field in settings.model_fields.items():
        nested = field.annotation
        if isinstance(nested, type) and issubclass(nested, BaseSettings):
            names |= read_variables(nested)
        elif isinstance(field.validation_alias, AliasChoices):
            names |= {c for c in field.validation_alias.choices if isinstance(c, str) and c.isupper()}
        elif isinstance(field.validation_alias, str):
            names.add(field.validation_alias)
        else:
            names.add(f"{prefix}{field_name}".upper())
    return names


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_every_variable_is_one_the_service_reads(name: str, services: dict[str, Any]) -> None:
    """The settings ignore a variable they do not know (extra="ignore"): a misspelt one would be
    silently without effect."""
    unread = set(services[name].get("environment", {})) - read_variables(SETTINGS[name])
    assert not unread, f"{name} does not read {sorted(unread)}"


def test_every_service_reaches_kafka_on_its_internal_listener(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    kafka = environment(services["kafka"])
    advertised = dict(
        reversed(entry.split("://", 1)) for entry in kafka["KAFKA_ADVERTISED_LISTENERS"].split(",")
    )
    internal = {v: k for k, v in advertised.items()}[kafka["KAFKA_INTER_BROKER_LISTENER_NAME"]]
    for name in SETTINGS:
        settings = settings_of(name, services[name], monkeypatch)
        kafka_settings = settings if isinstance(settings, KafkaSettings) else settings.kafka
        assert kafka_settings.bootstrap_servers == internal
        assert kafka_settings.topic_prefix == "inferq"


def test_the_broker_accepts_the_dispatchers_group_session(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    minimum = int(environment(services["kafka"])["KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS"])
    assert settings_of("dispatcher", services["dispatcher"], monkeypatch).session_timeout_ms >= minimum


def test_topics_are_made_once_kafka_is_healthy_and_before_the_services_start(
    services: dict[str, Any],
) -> None:
    assert services["topics"]["depends_on"] == {"kafka": {"condition": "service_healthy"}}
    assert services["topics"]["restart"] == "no"
    for name in ("ingest", "dispatcher", "results"):
        assert services[name]["depends_on"]["topics"] == {"condition": "service_completed_successfully"}
    assert services["dispatcher"]["depends_on"]["redis"] == {"condition": "service_healthy"}


def test_the_apis_listen_beyond_loopback_only_with_the_tenants_file_mounted(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ingest", "results"):
        settings = settings_of(name, services[name], monkeypatch)
        assert not is_loopback(settings.host), f"{name} would be unreachable from the other containers"
        mounts = {m["target"]: m for m in services[name]["volumes"] if isinstance(m, dict)}
        assert str(settings.tenants.file) in mounts, f"{name}: no tenants file at {settings.tenants.file}"
        assert mounts[str(settings.tenants.file)]["source"] == USER_ENV["TENANTS_FILE"]
        assert mounts[str(settings.tenants.file)]["read_only"] is True
        assert services[name]["ports"] == [f"{settings.port}:{settings.port}"]


def test_results_keep_their_database_in_a_volume(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The image sets INFERQ_RESULTS_DB_PATH (the Dockerfile's ENV): as the container would see it.
    dockerfile = (COMPOSE_DIR / "Dockerfile").read_text()
    db_path = Path(re.search(r"INFERQ_RESULTS_DB_PATH=(\S+)", dockerfile)[1])  # type: ignore[index]
    volumes = [v.split(":") for v in services["results"]["volumes"] if isinstance(v, str)]
    assert any(db_path.is_relative_to(target) and source in {"results-data"} for source, target in volumes)


def test_the_dispatcher_calls_the_simulated_backend_by_default_and_shares_its_budget_in_redis(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_of("dispatcher", services["dispatcher"], monkeypatch)
    assert settings.backend_url == f"http://sim-backend:{sim_port(services)}/v1"
    assert not is_loopback(settings.metrics_host)
    assert settings.coordination == "redis"
    assert settings.redis.url.startswith("redis://redis:")
    # The backend's key comes from the user's environment, never from the file.
    assert services["dispatcher"]["environment"]["INFERQ_DISPATCHER_BACKEND_API_KEY"] is None


def test_healthchecks_ask_each_service_on_its_own_port(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = {
        "ingest": settings_of("ingest", services["ingest"], monkeypatch).port,
        "results": settings_of("results", services["results"], monkeypatch).port,
        "dispatcher": settings_of("dispatcher", services["dispatcher"], monkeypatch).metrics_port,
        "sim-backend": sim_port(services),
    }
    for name, port in ports.items():
        assert f"http://127.0.0.1:{port}/healthz" in " ".join(services[name]["healthcheck"]["test"])


def test_prometheus_scrapes_each_service_under_the_job_names_the_rules_use(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    mounts = dict(reversed(v.split(":")[:2]) for v in services["prometheus"]["volumes"])
    config = yaml.safe_load((COMPOSE_DIR / mounts["/etc/prometheus/prometheus.yml"]).read_text())
    rules = (COMPOSE_DIR / mounts["/etc/prometheus/alerts.yml"]).resolve()
    assert rules == ROOT / "infra" / "prometheus" / "alerts.yml"
    assert config["rule_files"] == ["alerts.yml"]
    shipped = yaml.safe_load((ROOT / "infra" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {job["job_name"] for job in shipped["scrape_configs"]}
    assert jobs["inferq-ingest"]["static_configs"][0]["targets"] == [
        f"ingest:{settings_of('ingest', services['ingest'], monkeypatch).metrics_port}"
    ]
    assert jobs["inferq-results"]["static_configs"][0]["targets"] == [
        f"results:{settings_of('results', services['results'], monkeypatch).metrics_port}"
    ]
    # Every dispatcher of `--scale dispatcher=N`, by the service's name.
    assert jobs["inferq-dispatcher"]["dns_sd_configs"] == [
        {
            "names": ["dispatcher"],
            "type": "A",
            "port": settings_of("dispatcher", services["dispatcher"], monkeypatch).metrics_port,
            "refresh_interval": "15s",
        }
    ]


def test_grafana_gets_the_shipped_dashboard_and_the_composes_prometheus(services: dict[str, Any]) -> None:
    mounts = {
        target: (COMPOSE_DIR / source).resolve()
        for source, target, *_ in (v.split(":") for v in services["grafana"]["volumes"])
        if source.startswith(".")
    }
    provider = mounts["/etc/grafana/provisioning/dashboards/inferq.yml"]
    assert provider == ROOT / "infra" / "grafana" / "provisioning.yml"
    folder = yaml.safe_load(provider.read_text())["providers"][0]["options"]["path"]
    assert mounts[f"{folder}/inferq-dashboard.json"] == ROOT / "infra" / "grafana" / "inferq-dashboard.json"
    datasources = [t for t in mounts if t.startswith("/etc/grafana/provisioning/datasources/")]
    assert len(datasources) == 1
    source = yaml.safe_load(mounts[datasources[0]].read_text())["datasources"][0]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert "9090:9090" in services["prometheus"]["ports"][0]
