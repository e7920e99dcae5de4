"""`inferq topics create|list`: the topic table on the broker."""

from __future__ import annotations

import argparse

from services.messaging.admin import create_topics, existing_topics
from services.messaging.errors import MessagingError
from services.messaging.kafka_config import KafkaSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("topics", help="create or list the pipeline's topics")
    sub = parser.add_subparsers(dest="topics_command", required=True)
    create = sub.add_parser("create", help="create every topic of the table (idempotent)")
    create.set_defaults(func=_create)
    listing = sub.add_parser("list", help="the topic table and whether each topic exists")
    listing.set_defaults(func=_list)


def _create(_: argparse.Namespace) -> int:
    settings = KafkaSettings()
    try:
        outcome = create_topics(settings)
    except MessagingError as exc:
        print(f"error: {exc}")
        return 1
    for name, state in outcome.items():
        print(f"{name:32} {state}")
    return 0


def _list(_: argparse.Namespace) -> int:
    settings = KafkaSettings()
    try:
        present = existing_topics(settings)
    except MessagingError as exc:
        print(f"error: {exc}")
        return 1
    for spec in settings.topics.specs():
        state = "present" if spec.name in present else "MISSING"
        hours = spec.retention_ms // 3_600_000
        print(
            f"{spec.name:32} {spec.partitions:3} partitions  {hours:4} h retention  {state:8} {spec.purpose}"
        )
    return 0
