"""`inferq topics create|list`: the topic table on the broker; `inferq acls apply`: who may use it.

Both take their connection from the environment (``INFERQ_KAFKA_*``, ``INFERQ_TOPIC_PREFIX``): on a
secured broker, an administrator's credentials.
"""

from __future__ import annotations

import argparse
import os
import re

from inferq.messaging.acls import ServicePrincipals, apply_grants, service_grants
from inferq.messaging.admin import create_topics, existing_topics
from inferq.messaging.errors import MessagingError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.replication import Replication
from inferq.messaging.reply_topics import region_problem


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("topics", help="create or list the pipeline's topics")
    sub = parser.add_subparsers(dest="topics_command", required=True)
    create = sub.add_parser(
        "create",
        help="create every topic of the table (idempotent)",
        description=(
            "Create every topic of the table, and with --region NAME the reply topic of that region, "
            "<prefix>.results.NAME, configured as the results topic. Idempotent."
        ),
    )
    create.add_argument(
        "--region",
        action="append",
        default=[],
        metavar="NAME",
        help="also create <prefix>.results.NAME (1-32 lowercase letters, digits or '-'); repeatable",
    )
    create.add_argument(
        "--replication-factor",
        type=int,
        default=None,
        metavar="N",
        help="copies of each partition (default: 3 on a cluster of at least 3 brokers, else 1)",
    )
    create.add_argument(
        "--min-insync-replicas",
        type=int,
        default=None,
        metavar="N",
        help="replicas that must hold a write before acks=all answers (default: 2 with replication "
        "factor 3 on a cluster, else the broker's)",
    )
    create.set_defaults(func=_create)
    listing = sub.add_parser(
        "list", help="the topic table and whether each topic exists, then the regional reply topics"
    )
    listing.set_defaults(func=_list)
    _register_acls(subparsers)


def _register_acls(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("acls", help="grant each service the least access it needs (Kafka ACLs)")
    sub = parser.add_subparsers(dest="acls_command", required=True)
    apply = sub.add_parser(
        "apply",
        help="create the ACLs of ingest, dispatcher and results for the topic prefix (idempotent)",
        description=(
            "Create the ACLs each service needs on the topics of $INFERQ_TOPIC_PREFIX, connecting "
            "with $INFERQ_KAFKA_* (a super user's credentials). See services/messaging/acls.py."
        ),
    )
    defaults = ServicePrincipals()
    apply.add_argument("--ingest-user", default=defaults.ingest, help="default: %(default)s")
    apply.add_argument("--dispatcher-user", default=defaults.dispatcher, help="default: %(default)s")
    apply.add_argument("--results-user", default=defaults.results, help="default: %(default)s")
    apply.add_argument(
        "--dispatcher-group",
        # INFERQ_GROUP_ID: the previous release's name, read for one more release like the services do.
        default=os.environ.get("INFERQ_DISPATCHER_GROUP_ID")
        or os.environ.get("INFERQ_GROUP_ID", defaults.dispatcher_group),
        help="the dispatchers' consumer group (default: $INFERQ_DISPATCHER_GROUP_ID, else %(default)s)",
    )
    apply.add_argument(
        "--results-group",
        default=os.environ.get("INFERQ_RESULTS_GROUP_ID", defaults.results_group),
        help="the results service's group (default: $INFERQ_RESULTS_GROUP_ID, else %(default)s)",
    )
    apply.add_argument("--dry-run", action="store_true", help="print the ACLs, create nothing")
    apply.set_defaults(func=_apply_acls)


def _apply_acls(args: argparse.Namespace) -> int:
    settings = KafkaSettings()
    who = ServicePrincipals(
        ingest=args.ingest_user,
        dispatcher=args.dispatcher_user,
        results=args.results_user,
        dispatcher_group=args.dispatcher_group,
        results_group=args.results_group,
    )
    grants = service_grants(settings.topics, who)
    for grant in grants:
        print(grant)
    if args.dry_run:
        return 0
    try:
        created = apply_grants(settings, grants)
    except MessagingError as exc:
        print(f"error: {exc}")
        return 1
    print(f"{created} ACLs in place on {settings.bootstrap_servers}")
    return 0


def _create(args: argparse.Namespace) -> int:
    settings = KafkaSettings()
    for region in args.region:
        problem = region_problem(region)
        if problem is not None:
            print(f"error: --region {region}: {problem}")
            return 2
    asked = args.replication_factor is not None or args.min_insync_replicas is not None
    chosen_by = "as asked" if asked else "the default"

    def choose(brokers: int) -> Replication:
        replication = Replication.for_brokers(
            brokers, factor=args.replication_factor, min_insync=args.min_insync_replicas
        )
        print(f"{brokers} broker(s): {replication.describe()} ({chosen_by})")
        return replication

    try:
        outcome = create_topics(settings, regions=args.region, replication=choose)
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    except MessagingError as exc:
        print(f"error: {exc}")
        return 1
    for name, state in outcome.items():
        print(f"{name:32} {state}")
    return 0


def _retention(ms: int) -> str:
    return f"{ms // 3_600_000} h" if ms >= 3_600_000 else f"{ms // 60_000} min"


def _list(_: argparse.Namespace) -> int:
    settings = KafkaSettings()
    try:
        present = existing_topics(settings)
    except MessagingError as exc:
        print(f"error: {exc}")
        return 1
    topics = settings.topics
    regional = re.compile(topics.results_pattern)
    regions = sorted(
        name[len(topics.results) + 1 :] for name in present if regional.match(name) and name != topics.results
    )
    for spec in topics.specs() + [s for r in regions for s in topics.regional_specs(r)]:
        state = "present" if spec.name in present else "MISSING"
        print(
            f"{spec.name:32} {spec.partitions:3} partitions  {_retention(spec.retention_ms):>6} retention  "
            f"{state:8} {spec.purpose}"
        )
    return 0
