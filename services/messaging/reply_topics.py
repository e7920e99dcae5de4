"""Which topics a request may name as its `reply_to`: the one rule, for ingest and the dispatcher.

A caller chooses where its result is written, so the choice is a write permission on the cluster.
Allowed are only the pipeline's own reply topics:

- ``<prefix>.results``, the default reply topic;
- ``<prefix>.results.<region>``, a regional reply topic, where the region is 1 to 32 lowercase
  letters, digits or '-' (no '.' or '_': Kafka folds them together in metric names) and is not one of
  the pipeline's own topic words (``requests``, ``retry``, ``dlq``, ``results``), so the name can
  never be the request, retry or dead-letter topic of a pipeline whose prefix is ``<prefix>.results``.

Never a request, retry or dead-letter topic: a result written there would be read back as a request
(a loop) or poison a partition. A name over Kafka's 249 characters is refused too.

Ingest refuses anything else with 422; the dispatcher calls the same function for records written
straight to Kafka.
"""

from __future__ import annotations

import re

from inferq.messaging.topics import REGION_REGEX, RESERVED_TOPIC_WORDS, TopicNames

# Kafka refuses longer topic names.
MAX_TOPIC_CHARS = 249
REGION_PATTERN = re.compile(REGION_REGEX)
# Words of the topic table (services/messaging/topics.py): never a region.
RESERVED_REGIONS = RESERVED_TOPIC_WORDS


def is_allowed_reply_topic(topic: str, topics: TopicNames) -> bool:
    """Whether a result may be written to `topic` for a pipeline whose topics are `topics`."""
    if len(topic) > MAX_TOPIC_CHARS:
        return False
    if topic == topics.results:
        return True
    regional = topics.results + "."
    if not topic.startswith(regional):
        return False
    region = topic[len(regional) :]
    if region in RESERVED_REGIONS or REGION_PATTERN.fullmatch(region) is None:
        return False
    # Belt and braces: whatever the prefix, never one of this pipeline's own non-reply topics.
    return topic not in {*topics.all_requests, topics.retry, topics.dlq}


def region_problem(region: str) -> str | None:
    """What is wrong with `region` as the name of a regional reply topic, or None when it is fine."""
    if REGION_PATTERN.fullmatch(region) is None:
        return f"a region is 1-32 lowercase letters, digits or '-', got {region!r}"
    if region in RESERVED_REGIONS:
        return f"{region!r} is a word of the topic table, not a region"
    return None


def reply_topic_rule(topics: TopicNames) -> str:
    """The rule in words, for a refusal's message."""
    return (
        f"must be {topics.results!r} or {topics.results}.<region> "
        "(region: 1-32 lowercase letters, digits or '-')"
    )
