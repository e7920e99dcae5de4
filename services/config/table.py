"""The table of every setting of every service, and docs/configuration.md made from it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pydantic_settings import BaseSettings

from inferq.dispatcher.settings import READ_BY_DISPATCHER
from inferq.ingest.settings import READ_BY_INGEST
from inferq.results.settings import READ_BY_RESULTS
from inferq.settings.renamed import renamed_of
from inferq.settings.table import Setting, effective, settings_in, settings_of

SERVICES: Mapping[str, tuple[type[BaseSettings], ...]] = {
    "ingest": READ_BY_INGEST,
    "dispatcher": READ_BY_DISPATCHER,
    "results": READ_BY_RESULTS,
}


@dataclass(frozen=True, slots=True)
class Row:
    """One variable of the table and the services that read it."""

    setting: Setting
    services: tuple[str, ...]


def table() -> list[Row]:
    """Every variable of every service, by name."""
    rows: dict[str, tuple[Setting, list[str]]] = {}
    for service, models in SERVICES.items():
        for setting in settings_in(models):
            rows.setdefault(setting.name, (setting, []))[1].append(service)
    return [Row(setting, tuple(services)) for _, (setting, services) in sorted(rows.items())]


def disagreements() -> list[str]:
    """Variables that two services describe differently (type, default, description or secrecy):
    a value read under one name must mean one thing."""
    seen: dict[str, set[tuple[str, str, str, bool]]] = {}
    for models in SERVICES.values():
        for s in settings_in(models):
            seen.setdefault(s.name, set()).add((s.type, s.default, s.description, s.secret))
    return sorted(name for name, kinds in seen.items() if len(kinds) > 1)


def renamed() -> dict[str, str]:
    """Old name → new name, over every service."""
    return dict(sorted(renamed_of(model for models in SERVICES.values() for model in models).items()))


_INTRO = """\
# Configuration

<!-- Generated from the settings models by `inferq config docs` (`make config-docs`); do not edit:
tests/unit/test_configuration_doc.py fails when this file differs from what the models give. -->

Every service reads its settings from environment variables, one name per value:

- a service's own settings: `INFERQ_INGEST_*`, `INFERQ_DISPATCHER_*`, `INFERQ_RESULTS_*`;
- a value several services read, under one bare name: `INFERQ_BUDGET` (the dispatcher group's
  concurrency budget, which ingest's admission also scales with), `INFERQ_TYPICAL_LATENCY_S` (the
  latency table), `INFERQ_SCENARIO_TIERS`, `INFERQ_MODEL_FAST` / `_ACCURATE` / `_CHEAP`,
  `INFERQ_DISPATCHER_GROUP_ID` (the dispatchers' group, whose lag ingest reads), `INFERQ_REGION`,
  `INFERQ_TOPIC_PREFIX`, and `INFERQ_COORDINATION` with the dispatcher group's Redis
  (`INFERQ_REDIS_*`);
- a block several services share keeps its prefix: `INFERQ_KAFKA_*` (and `KAFKA_BOOTSTRAP_SERVERS`),
  `INFERQ_TENANTS_*`, `INFERQ_WEBHOOK_*` (and `INFERQ_CALLBACK_HOSTS`), `INFERQ_HTTP_*`,
  `INFERQ_READY_*`, `INFERQ_LOG_*`.

`inferq <service> --help` lists a service's settings with their defaults; `inferq config show
[--service ingest|dispatcher|results]` prints the values in effect, secrets masked. JSON values
(objects and lists) are written as JSON in the variable.
"""


def _cell(text: str, *, code: bool = False) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    # Outside backticks a bare <prefix> would be read as an HTML tag and vanish.
    return f"`{text}`" if code else text.replace("<", "&lt;")


def markdown() -> str:
    """docs/configuration.md."""
    lines = [_INTRO, "## Every setting", ""]
    lines.append("| Variable | Read by | Type | Default | Secret | Description |")
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for row in table():
        s = row.setting
        name = f"`{s.name}`" + "".join(f" (or `{also}`)" for also in s.also)
        default = "unset" if s.default == "unset" else _cell(s.default, code=True)
        lines.append(
            f"| {name} | {', '.join(row.services)} | {_cell(s.type)} | {default} | "
            f"{'yes' if s.secret else ''} | {_cell(s.description)} |"
        )
    lines += [
        "",
        "## Names of the previous release",
        "",
        "Still read for one release, below the new name (when both are set, the new one is used); a",
        "service logs one warning at start for each old name it finds, naming the new one.",
        "",
        "| Old name | New name |",
        "| --- | --- |",
    ]
    lines += [f"| `{old}` | `{new}` |" for old, new in renamed().items()]
    return "\n".join(lines) + "\n"


def show_lines(service: str) -> Iterator[str]:
    """``NAME=value`` for each variable `service` reads, its value in effect, secrets masked."""
    seen: set[str] = set()
    for model in SERVICES[service]:
        settings = [s for s in settings_of(model) if s.name not in seen]
        seen.update(s.name for s in settings)
        for setting, value in effective(model(), settings):
            yield f"{setting.name}={'' if value == 'unset' else value}"
