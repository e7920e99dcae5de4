"""The chunk topics beside one results replica's reply topics, read from a point in time
(`kafka_chunk_feed`, for `chunk_reader.ChunkReader`).

No group, like the replica's reader of results (`feed`): every partition is this process's and
nothing is committed, since chunks are transient and read only for the event streams open here.
The consumer is the callers' follower's (`inferq.delivery.follower.KafkaReplyFeed`).
"""

from __future__ import annotations

from inferq.delivery.follower import KafkaReplyFeed
from inferq.results.settings import ResultsSettings


def kafka_chunk_feed(
    settings: ResultsSettings, from_ms: int, *, client_id: str = "inferq-results-chunks"
) -> KafkaReplyFeed:
    """Every partition of the chunk topic beside each of `settings`' reply topics
    (`TopicNames.chunks_for`; every chunk topic, by `chunks_pattern`, for a service of all regions),
    each positioned at the first record written at or after `from_ms`, or at its end when there is
    none. A partition assigned later (a regional topic found by pattern) is read from its end."""
    names = settings.kafka.topics
    return KafkaReplyFeed(
        settings.kafka,
        [names.chunks_for(topic) for topic in settings.reply_topics],
        client_id=client_id,
        pattern=names.chunks_pattern if settings.all_regions else None,
        from_ms=from_ms,
    )
