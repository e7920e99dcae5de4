"""What `inferq mirror` runs: the clusters, the replication flows and MirrorMaker 2's properties.

Two kinds of cluster: one central cluster, where the dispatcher group, the LLM backend and the
results store run, and one cluster per region, where that region's backends produce requests and
read their reply topic. Each region gets two flows:

    <region> -> central   the region's request topics (``<prefix>.requests.{high,medium,low}``)
    central -> <region>   the region's reply topic (``<prefix>.results.<region>``)

Nothing else is mirrored: no retry or dead-letter topic, no consumer group offsets.

**Replication policy: `IdentityReplicationPolicy`.** A mirrored topic keeps its name, so a
region's requests land in the central cluster's own ``<prefix>.requests.<tier>`` topics, beside
the requests produced centrally, and the reply topic the dispatcher writes (``reply_to`` =
``<prefix>.results.eu``) arrives in eu under the name eu's consumers already read. Why not the
default policy (``eu.<prefix>.requests.high`` on central): the dispatcher would have to subscribe to
one more topic set per region and map each to its tier, and ingest's admission and the lag probes
would have to sum them; the reply flow would land as ``central.<prefix>.results.eu`` and every eu
reader would need another name. Identity keeps every product component unchanged, and the tier of
a request is still its topic's. What it costs: the topic name no longer says where a record came
from (the record's ``origin_region`` does; MirrorMaker's per-topic metrics do), and identity cannot
detect cycles, which is why the flows here are disjoint by construction (requests only towards
central, one reply topic only back to its region; `MirrorConfig` refuses a region named like the
central cluster). Heartbeat topics keep the prefix even under identity (``eu.heartbeats``), so
they never loop.

**Delivery: at least once.** After a crash MirrorMaker copies again what it copied since its last
committed source offsets (``offset.flush.interval.ms``, 2 s here instead of Connect's 60 s, bounds
that window). The duplicates are the same records: the results side drops repeats by (tenant,
request_id); the dispatcher skips a copy of a request it answered OK already
(``services/dispatcher/answered.py``) and serves it again only when the first still runs, or was
answered by another dispatcher of the group. Exactly-once mirroring
(Connect's ``exactly.once.source.support``) would need every consumer of the mirrored topics to
read ``read_committed``; see docs/deployment.md, Regions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferq.messaging.reply_topics import region_problem
from inferq.messaging.topics import TopicNames
from inferq.tools.paths import find_project_root

CENTRAL = "central"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
DEFAULT_FLUSH_INTERVAL_MS = 2_000
DEFAULT_HEAP = "512m"
_BOOTSTRAP = re.compile(r"[A-Za-z0-9.\-]+:\d{1,5}(,[A-Za-z0-9.\-]+:\d{1,5})*")
# Kafka's own rule for topic names, so a prefix can neither break a line of the properties file
# nor name topics Kafka would refuse.
_TOPIC_PREFIX = re.compile(r"[A-Za-z0-9._\-]{1,200}")


@dataclass(frozen=True)
class Flow:
    """One replication flow: `topics` (exact names) copied from `source` to `target` unchanged."""

    source: str
    target: str
    topics: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"

    @property
    def heartbeats_topic(self) -> str:
        """Where the target receives the source's heartbeats (the prefix is kept under identity)."""
        return f"{self.source}.heartbeats"


def topic_regex(names: tuple[str, ...]) -> str:
    """`names` as one Java regular expression matching exactly them (MirrorMaker's filter matches
    the whole name), escaped for a .properties file (whose reader eats one backslash)."""
    pattern = "|".join(re.escape(name) for name in names)
    return pattern.replace("\\", "\\\\")


@dataclass(frozen=True)
class MirrorConfig:
    """One MirrorMaker 2 process for one central cluster and its regions.

    `regions` maps each region (a reply-topic region name, also its cluster alias) to its cluster's
    bootstrap servers. `home` holds the generated properties, the pid file and the logs.
    """

    home: Path
    central: str
    regions: Mapping[str, str]
    topic_prefix: str = "inferq"
    heap: str = DEFAULT_HEAP
    flush_interval_ms: int = DEFAULT_FLUSH_INTERVAL_MS
    project_root: Path = field(default_factory=find_project_root)

    def __post_init__(self) -> None:
        object.__setattr__(self, "home", Path(self.home).resolve())
        object.__setattr__(self, "project_root", Path(self.project_root).resolve())
        object.__setattr__(self, "regions", dict(sorted(self.regions.items())))
        if not self.regions:
            raise ValueError("at least one region is needed")
        for region, bootstrap in self.regions.items():
            problem = region_problem(region)
            if problem is not None:
                raise ValueError(f"region {region!r}: {problem}")
            if region == CENTRAL:
                raise ValueError(
                    f"a region may not be named {CENTRAL!r}: that is the central cluster's alias"
                )
            if _BOOTSTRAP.fullmatch(bootstrap) is None:
                raise ValueError(
                    f"region {region!r}: bootstrap servers must be host:port[,host:port], got {bootstrap!r}"
                )
        if _BOOTSTRAP.fullmatch(self.central) is None:
            raise ValueError(
                f"central: bootstrap servers must be host:port[,host:port], got {self.central!r}"
            )
        clusters = [self.central, *self.regions.values()]
        if len(set(clusters)) != len(clusters):
            raise ValueError(
                "every cluster needs its own bootstrap servers (a flow from a cluster to itself loops)"
            )
        if _TOPIC_PREFIX.fullmatch(self.topic_prefix) is None:
            raise ValueError(
                f"topic prefix must be 1-200 of Kafka's topic characters, got {self.topic_prefix!r}"
            )
        if not 100 <= self.flush_interval_ms <= 600_000:
            raise ValueError(f"flush_interval_ms must be 100..600000, got {self.flush_interval_ms}")
        if re.fullmatch(r"\d+[mg]", self.heap) is None:
            raise ValueError(f"heap must be like 512m or 1g, got {self.heap!r}")

    @property
    def topics(self) -> TopicNames:
        return TopicNames(self.topic_prefix)

    @property
    def properties_file(self) -> Path:
        return self.home / "mm2.properties"

    @property
    def settings_file(self) -> Path:
        """The options of the last start, so `stop` and `status` need only ``--home``."""
        return self.home / "mirror.json"

    @property
    def pid_file(self) -> Path:
        return self.home / "mirror.pid"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def log_file(self) -> Path:
        return self.logs_dir / "server.log"  # the name infra/kafka/log4j2.properties writes

    @property
    def console_log(self) -> Path:
        return self.logs_dir / "mirror.out"

    def bootstrap_of(self, alias: str) -> str:
        return self.central if alias == CENTRAL else self.regions[alias]

    def flows(self) -> list[Flow]:
        """Per region: its requests to central, its reply and chunk topics back."""
        flows: list[Flow] = []
        for region in self.regions:
            flows.append(Flow(region, CENTRAL, tuple(self.topics.all_requests)))
            reply = self.topics.regional_results(region)
            flows.append(Flow(CENTRAL, region, (reply, self.topics.chunks_for(reply))))
        return flows

    def properties(self) -> str:
        """The mm2.properties of dedicated mode (`org.apache.kafka.connect.mirror.MirrorMaker`)."""
        aliases = [CENTRAL, *self.regions]
        lines = [
            "# Written by `inferq mirror start` (services/tools/mirror/config.py); edits are lost.",
            f"clusters={','.join(aliases)}",
            *(f"{alias}.bootstrap.servers={self.bootstrap_of(alias)}" for alias in aliases),
            "# Mirrored topics keep their names: see config.py for why.",
            f"replication.policy.class={IDENTITY_POLICY}",
        ]
        flows = self.flows()
        for flow in flows:
            lines += [f"{flow.name}.enabled=true", f"{flow.name}.topics={topic_regex(flow.topics)}"]
        named = {flow.name for flow in flows}
        # Between two regions nothing flows; MirrorMaker would still run heartbeats there.
        for source in aliases:
            for target in aliases:
                if source != target and f"{source}->{target}" not in named:
                    lines += [
                        f"{source}->{target}.enabled=false",
                        f"{source}->{target}.emit.heartbeats.enabled=false",
                    ]
        lines += [
            "# No consumer group is mirrored: the dispatcher group lives on central only. (Offset syncs",
            "# and the checkpoint connector stay on, idle: turned off, MirrorMaker refuses to configure",
            "# its checkpoint connector and logs that as an error at every start.)",
            "groups.exclude=.*",
            "sync.group.offsets.enabled=false",
            "# Each cluster's topic settings and ACLs are its own (`inferq topics create` on each).",
            "sync.topic.configs.enabled=false",
            "sync.topic.acls.enabled=false",
            "# Heartbeats every second: `inferq mirror status` reads their age, start waits for the first.",
            "emit.heartbeats.interval.seconds=1",
            "# A topic created after the start is mirrored within seconds, not Connect's 10 minutes.",
            "refresh.topics.interval.seconds=5",
            "tasks.max=1",
            "# Settings of the Connect worker run per target cluster: MirrorMaker passes a worker only",
            "# the keys prefixed with its target's alias (and a few families), not top-level ones.",
            "# Source offsets committed often (Connect: 60 s): what a crash makes MirrorMaker copy again.",
            *(f"{alias}.offset.flush.interval.ms={self.flush_interval_ms}" for alias in aliases),
            "# One MirrorMaker node: after a crash nobody else could take its tasks, so the restarted",
            "# node takes them at once instead of Connect waiting 5 minutes for the lost node to return.",
            *(f"{alias}.scheduled.rebalance.max.delay.ms=0" for alias in aliases),
            "# Connect's plugins all have ServiceLoader manifests; scanning the class path by reflection",
            "# instead took 48 s per worker on a busy 2-core machine.",
            "plugin.discovery=service_load",
            *(f"{alias}.plugin.discovery=service_load" for alias in aliases),
            "# Single-node clusters here; a production cluster keeps the defaults (3).",
            "replication.factor=1",
            "heartbeats.topic.replication.factor=1",
            "checkpoints.topic.replication.factor=1",
            "offset-syncs.topic.replication.factor=1",
            "offset.storage.replication.factor=1",
            "status.storage.replication.factor=1",
            "config.storage.replication.factor=1",
        ]
        return "\n".join(lines) + "\n"

    def to_json(self) -> str:
        saved: dict[str, Any] = {
            "central": self.central,
            "regions": dict(self.regions),
            "topic_prefix": self.topic_prefix,
            "heap": self.heap,
            "flush_interval_ms": self.flush_interval_ms,
        }
        return json.dumps(saved, indent=1)

    @classmethod
    def load(cls, home: Path, project_root: Path) -> MirrorConfig | None:
        """The configuration of the last start in `home`, or None when there was none."""
        try:
            saved = json.loads((Path(home) / "mirror.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(saved, dict):
            return None
        return cls(home=home, project_root=project_root, **saved)
