"""The topic table, declared once: names, partitions and retention.

Partition counts bound each tier's consumer parallelism across dispatcher instances: HIGH gets the
most so chat spreads over every dispatcher of the group. Keys are the session (or user) id, so one
user's chat stays in order within its partition.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from inferq.messaging.tiers import Tier

HOUR_MS = 3_600_000
MINUTE_MS = 60_000
# The last words of the topic table's names: never a region (a regional reply topic's last word).
RESERVED_TOPIC_WORDS = frozenset({"requests", "retry", "dlq", "results", "chunks"})
# A region, as a regular expression (`inferq.messaging.reply_topics.region_problem` says why not).
REGION_REGEX = r"[a-z0-9-]{1,32}"


# The broker stamps each record of a request topic with the time it appended it: the dispatcher
# bounds a record's created_at_ms by that (a producer's clock would bound nothing).
LOG_APPEND_TIME = "LogAppendTime"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    retention_ms: int
    purpose: str
    timestamp_type: str | None = None
    # A topic whose records matter only minutes rolls its segments that often: retention deletes
    # closed segments only (the broker's default segment lasts a week).
    segment_ms: int | None = None

    def config(self) -> dict[str, str]:
        config = {"retention.ms": str(self.retention_ms)}
        if self.timestamp_type is not None:
            config["message.timestamp.type"] = self.timestamp_type
        if self.segment_ms is not None:
            config["segment.ms"] = str(self.segment_ms)
        return config


@dataclass(frozen=True)
class TopicNames:
    """Topic names under one configurable prefix (default ``inferq``)."""

    prefix: str = "inferq"

    def requests(self, tier: Tier) -> str:
        return f"{self.prefix}.requests.{tier.value.lower()}"

    def requests_by_name(self, tier: str) -> str:
        return self.requests(Tier(tier))

    @property
    def results(self) -> str:
        return f"{self.prefix}.results"

    def regional_results(self, region: str) -> str:
        """The reply topic of `region` (``<prefix>.results.<region>``); which regions are valid is
        `inferq.messaging.reply_topics.region_problem`'s rule."""
        return f"{self.results}.{region}"

    @property
    def results_pattern(self) -> str:
        """A regular expression matching the results topic and every regional one (the region rule
        of `inferq.messaging.reply_topics`, its reserved words left out: ``<prefix>.results.retry``
        is the retry topic of a pipeline whose prefix is ``<prefix>.results``), for a consumer that
        serves all regions."""
        reserved = "|".join(sorted(RESERVED_TOPIC_WORDS))
        return rf"^{re.escape(self.results)}(\.(?!({reserved})$){REGION_REGEX})?$"

    @property
    def chunks(self) -> str:
        """The streamed answers' chunks of the results topic's callers (transient: docs/streaming.md)."""
        return f"{self.prefix}.chunks"

    def chunks_for(self, reply_topic: str) -> str:
        """The chunk topic beside `reply_topic`: ``<prefix>.chunks`` for the results topic,
        ``<prefix>.chunks.<region>`` for a region's."""
        if reply_topic.startswith(f"{self.results}."):
            return f"{self.chunks}{reply_topic.removeprefix(self.results)}"
        return self.chunks

    @property
    def chunks_pattern(self) -> str:
        """`results_pattern`'s twin for the chunk topics."""
        reserved = "|".join(sorted(RESERVED_TOPIC_WORDS))
        return rf"^{re.escape(self.chunks)}(\.(?!({reserved})$){REGION_REGEX})?$"

    @property
    def retry(self) -> str:
        return f"{self.prefix}.retry"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}.dlq"

    @property
    def all_requests(self) -> list[str]:
        return [self.requests(t) for t in Tier]

    def tier_of(self, topic: str) -> Tier | None:
        for tier in Tier:
            if topic == self.requests(tier):
                return tier
        return None

    def regional_results_spec(self, region: str) -> TopicSpec:
        """A region's reply topic: configured as the results topic, under its own name."""
        results = next(spec for spec in self.specs() if spec.name == self.results)
        return TopicSpec(
            self.regional_results(region),
            results.partitions,
            results.retention_ms,
            f"results of region {region}",
        )

    def regional_chunks_spec(self, region: str) -> TopicSpec:
        """A region's chunk topic: configured as the chunk topic, under its own name."""
        chunks = next(spec for spec in self.specs() if spec.name == self.chunks)
        return TopicSpec(
            self.chunks_for(self.regional_results(region)),
            chunks.partitions,
            chunks.retention_ms,
            f"streamed chunks of region {region}",
            segment_ms=chunks.segment_ms,
        )

    def regional_specs(self, region: str) -> list[TopicSpec]:
        """The topics a region adds: its reply topic and its chunk topic."""
        return [self.regional_results_spec(region), self.regional_chunks_spec(region)]

    def specs(self) -> list[TopicSpec]:
        """Every topic the pipeline needs, with partitions and retention."""
        return [
            TopicSpec(
                self.requests(Tier.HIGH), 6, 24 * HOUR_MS, "realtime chat; keyed by session", LOG_APPEND_TIME
            ),
            TopicSpec(
                self.requests(Tier.MEDIUM), 3, 24 * HOUR_MS, "analysis and recommendations", LOG_APPEND_TIME
            ),
            TopicSpec(
                self.requests(Tier.LOW),
                3,
                7 * 24 * HOUR_MS,
                "briefs and batch; may wait hours",
                LOG_APPEND_TIME,
            ),
            TopicSpec(self.retry, 3, 24 * HOUR_MS, "requests waiting to be retried, with not_before_ms"),
            TopicSpec(self.results, 6, 24 * HOUR_MS, "terminal results keyed by request_id"),
            TopicSpec(
                self.chunks,
                6,
                15 * MINUTE_MS,
                "streamed answers' chunks keyed by request_id; transient (the result holds the answer)",
                segment_ms=5 * MINUTE_MS,
            ),
            TopicSpec(self.dlq, 1, 14 * 24 * HOUR_MS, "dead letters: poison records, exhausted retries"),
        ]
