"""Results service settings (env prefix ``INFERQ_RESULTS_``; Kafka under ``INFERQ_KAFKA_``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.readiness import ReadinessSettings
from inferq.messaging.reply_topics import region_problem
from inferq.serving import HttpLimits, LogSettings
from inferq.tenancy.settings import TenancySettings
from inferq.webhooks.settings import WebhookSettings

# `INFERQ_RESULTS_REGION=all`: the results topic and every regional one, by pattern.
ALL_REGIONS = "all"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3_600, "d": 86_400}


def parse_duration_s(value: Any) -> Any:
    """Seconds from "7d", "36h", "90m", "45s" or a plain number of seconds; anything else as is
    (pydantic then says what is wrong with it)."""
    if isinstance(value, str):
        match = _DURATION.match(value.lower())
        if match is None:
            raise ValueError(f"{value!r} is not a duration: a number of seconds, or with d, h, m or s")
        return float(match[1]) * _UNIT_S[match[2]]
    return value


class ResultsSettings(BaseSettings):
    """The results service's own settings (``INFERQ_RESULTS_*``) and its blocks: Kafka, the tenants
    file, webhooks."""

    model_config = SettingsConfigDict(
        env_prefix="INFERQ_RESULTS_",
        extra="ignore",
        populate_by_name=True,
        use_attribute_docstrings=True,
        # A refused value may be a URL with a key in it: errors never quote the input.
        hide_input_in_errors=True,
    )

    host: str = "127.0.0.1"
    """The address to listen on (--host); another than loopback needs a tenants file."""
    port: int = 8701
    """The port to listen on (--port)."""
    metrics_host: str | None = None
    """The address of /metrics (it names the tenants and their volumes: expose it to the scraper
    only); unset, the API's (--host)."""
    metrics_port: int = Field(default=8704, ge=0, le=65_535)
    """The port of /metrics (--metrics-port), never the API's; 0: a free port the system picks
    (logged at start)."""
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    tenants: TenancySettings = Field(default_factory=TenancySettings)
    """INFERQ_TENANTS_FILE and its reload interval, shared with ingest."""
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    """INFERQ_WEBHOOK_* and INFERQ_CALLBACK_HOSTS: delivery of callback_url webhooks, shared with ingest."""
    group_id: str = "inferq-results"
    """The group the replicas share: not to read (each reads every partition itself) but to decide
    which replica sends each reply partition's webhooks (`ownership`); its offsets are done watermarks."""
    session_timeout_ms: int = Field(default=10_000, ge=1_000, le=300_000)
    """How soon a replica that died without leaving is declared dead and its partitions' webhooks
    move to a survivor (the brokers' group.min.session.timeout.ms must allow it; 6 s by default)."""
    region: str | None = None
    """Which reply topics this service serves (--region): unset, the results topic; a region's name, that
    region's (<prefix>.results.<region>); "all", the results topic and every regional one."""
    db_path: Path = Path(".inferq/results.db")
    """The SQLite file the results are stored in."""
    retention_s: float = Field(
        default=7 * 86_400,
        ge=60,
        validation_alias="INFERQ_RESULTS_RETENTION",
    )
    """How long a result is kept and served after it was stored ("7d", "36h" or seconds); past it
    the result is no longer served (404) and the next purge deletes it."""
    max_results: int = Field(default=1_000_000, ge=1)
    """At most this many results are kept; past it the oldest stored are deleted first. Rows, not
    bytes: an output is bounded by max_tokens, so rows bound the disk too, and a count is exact."""
    purge_interval_s: float = Field(default=60.0, gt=0, le=3_600)
    """How often expired results are deleted."""
    max_wait_s: int = Field(default=60, ge=1, le=600)
    """The largest ?wait= of a long poll (seconds); a larger one is refused (422)."""
    events_max_s: float = Field(default=300.0, gt=0, le=3_600)
    """An event stream ends (event: timeout) after this long without the outcome; the client reconnects."""
    events_keepalive_s: float = Field(default=15.0, gt=0, le=300)
    """A comment line on a quiet event stream this often: proxies keep it open, a gone client is noticed."""
    max_waiters: int = Field(default=10_000, ge=1, le=1_000_000)
    """Callers waiting at once (long polls and event streams); past it 503 with Retry-After."""
    chunk_replay_s: float = Field(default=120.0, ge=0, le=600)
    """When an /events stream opens while the chunk reader is stopped, the reader starts reading the
    chunk topics this many seconds back, so a stream opened mid-answer still gets the answer from its
    start (an answer older than this starts with a gap; its result holds the whole text). At most
    10 min: the chunk topics keep 15."""
    chunk_reader_grace_s: float = Field(default=30.0, ge=0, le=600)
    """The chunk reader stops once no /events stream has been open for this long (a client that
    reconnects within it finds the reader running, and the chunks since kept)."""

    @field_validator("region")
    @classmethod
    def _a_region_or_all(cls, value: str | None) -> str | None:
        if value is None or value == ALL_REGIONS:
            return value
        problem = region_problem(value)
        if problem is not None:
            raise ValueError(f"{problem} (or {ALL_REGIONS!r})")
        return value

    @property
    def consumer_group(self) -> str:
        """The consumer group: `group_id`, with ``-<region>`` (or ``-all``) appended for a regional
        service, so that services of different regions never share (and split) one group; the
        results principal's ACLs grant the groups ``<group_id>-*`` for them (``acls.py``)."""
        return self.group_id if self.region is None else f"{self.group_id}-{self.region}"

    @property
    def all_regions(self) -> bool:
        """Whether this service serves the results topic and every regional one (by pattern)."""
        return self.region == ALL_REGIONS

    @property
    def reply_topics(self) -> list[str]:
        """The topics this service must find at start: the results topic or the region's."""
        topics = self.kafka.topics
        if self.region is None or self.region == ALL_REGIONS:
            return [topics.results]
        return [topics.regional_results(self.region)]

    @field_validator("retention_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration_s(value)


# Every settings class the results service reads (its `--help` and `inferq config show` list their variables).
READ_BY_RESULTS: tuple[type[BaseSettings], ...] = (
    ResultsSettings,
    HttpLimits,
    ReadinessSettings,
    LogSettings,
)
