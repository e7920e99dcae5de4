"""The start-up and readiness topic check asks the brokers once, however many topics it needs."""

from __future__ import annotations

import pytest

from inferq.messaging import admin
from inferq.messaging.errors import MissingTopicsError
from inferq.messaging.kafka_config import KafkaSettings

pytestmark = pytest.mark.kafka


def test_every_needed_topic_is_checked_with_one_metadata_request(
    kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[object] = []
    real = admin.watched_admin

    def counting(settings: KafkaSettings) -> object:
        opened.append(settings)
        return real(settings)

    monkeypatch.setattr(admin, "watched_admin", counting)
    needed = [*kafka_settings.topics.all_requests, kafka_settings.topics.retry]
    admin.require_topics(kafka_settings, needed)
    assert len(needed) == 4 and len(opened) == 1

    with pytest.raises(MissingTopicsError) as missing:
        admin.require_topics(kafka_settings, [*needed, f"{kafka_settings.topics.retry}.absent"])
    assert missing.value.missing == [f"{kafka_settings.topics.retry}.absent"]
    assert len(opened) == 2
