"""Which topics a record written straight to Kafka may name as its `reply_to`.

Stand-in for ``services.messaging.reply_topics`` (ingest's rule, being written beside this branch),
with the same signature and the same rule, so the dispatcher checks exactly what ingest refuses
with 422: ``<prefix>.results``, or ``<prefix>.results.<region>`` where the region is 1 to 32
lowercase letters, digits or '-' and not one of the topic table's words; never a request, retry or
dead-letter topic. Once the shared module is on main this file becomes an import of it.
"""

from __future__ import annotations

import re

from services.messaging.topics import TopicNames

# Kafka refuses longer topic names.
MAX_TOPIC_CHARS = 249
REGION_PATTERN = re.compile(r"[a-z0-9-]{1,32}")
RESERVED_REGIONS = frozenset({"requests", "retry", "dlq", "results"})


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
    return topic not in {*topics.all_requests, topics.retry, topics.dlq}
