"""`inferq tenants key`, `inferq tenants webhook-secret`, `inferq tenants record-key` and `inferq
tenants check FILE`: make a key, a webhook secret or a record key, check a tenants file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inferq.messaging.topics import TopicNames
from inferq.tenancy.errors import NO_SERVICE_KEY, TenantsFileError
from inferq.tenancy.keys import hash_key, new_key
from inferq.tenancy.loading import load_tenants
from inferq.tenancy.model import Tenant, TenantDirectory
from inferq.tenancy.secret_forms import new_record_key, new_webhook_secret


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("tenants", help="API keys and the tenants file (INFERQ_TENANTS_FILE)")
    commands = parser.add_subparsers(dest="tenants_command", required=True)
    key = commands.add_parser("key", help="print a new random API key once, and its hash for the file")
    key.set_defaults(func=_key)
    secret = commands.add_parser(
        "webhook-secret", help="print a new random webhook signing secret for a tenant's webhook_secret"
    )
    secret.set_defaults(func=_webhook_secret)
    record_key = commands.add_parser(
        "record-key", help="print a new random key for signing records written straight to Kafka"
    )
    record_key.set_defaults(func=_record_key)
    check = commands.add_parser("check", help="validate a tenants file and summarise it")
    check.add_argument("file", type=Path, help="the tenants file (TOML)")
    check.add_argument(
        "--topic-prefix",
        default=None,
        help="check reply_topics against this pipeline's reply-topic rule (default: INFERQ_TOPIC_PREFIX)",
    )
    check.set_defaults(func=_check)


def _key(_: argparse.Namespace) -> int:
    key = new_key()
    print("API key (shown once: hand it to the tenant, keep no copy):")
    print(f"  {key}")
    print("Its hash, for the tenant's `keys` in the tenants file (the current key first, at most two):")
    print(f'  keys = ["{hash_key(key)}"]')
    return 0


def _webhook_secret(_: argparse.Namespace) -> int:
    print("Webhook secret (give it to the tenant's receiver; the tenants file holds it too):")
    print("A Standard Webhooks secret: any Standard Webhooks verifier takes it as it is.")
    print(f'  webhook_secret = "{new_webhook_secret()}"')
    return 0


def _record_key(_: argparse.Namespace) -> int:
    print("Record key (give it to the tenant's Kafka producers; the tenants file holds it too):")
    print(f'  record_keys = ["{new_record_key()}"]')
    print("For ingest's own records, put it in the file's [service] table instead.")
    return 0


def _check(args: argparse.Namespace) -> int:
    path: Path = args.file
    prefix = args.topic_prefix
    if prefix is None:
        # Imported here: `inferq tenants key` needs no Kafka settings.
        from inferq.messaging.kafka_config import KafkaSettings

        prefix = KafkaSettings().topic_prefix
    try:
        directory = load_tenants(path, topics=TopicNames(prefix))
    except TenantsFileError as exc:
        count = len(exc.problems)
        print(f"{path}: {count} problem(s); a service refuses to start with this file:", file=sys.stderr)
        print(str(exc), file=sys.stderr)
        return 1
    if not directory.service_record_keys:
        print(
            f"{path}: ingest and the dispatcher refuse to start with this file: {NO_SERVICE_KEY}",
            file=sys.stderr,
        )
        return 1
    print(summary(directory, str(path)))
    return 0


def summary(directory: TenantDirectory, name: str) -> str:
    """What the file grants, one line per tenant (no key or hash)."""
    if len(directory) == 0:
        return f"{name}: valid, no tenants: every request would be refused (401)"
    lines = [f"{name}: valid, {len(directory)} tenant(s)"]
    total = sum(t.weight for t in directory)
    for tenant in sorted(directory, key=lambda t: t.name):
        lines.append("  " + _line(tenant, total))
    return "\n".join(lines)


def _line(tenant: Tenant, total_weight: float) -> str:
    e = tenant.entitlements
    rate = (
        "unlimited"
        if tenant.requests_per_minute is None
        else f"{tenant.requests_per_minute}/min burst {tenant.rate_burst}"
    )
    concurrency = "budget" if tenant.max_concurrency is None else str(tenant.max_concurrency)
    params = ", ".join(f"{p}" + ("" if cap is None else f"<={cap:g}") for p, cap in sorted(e.params.items()))
    return (
        f"{tenant.name}: {len(tenant.key_digests)} key(s), weight {tenant.weight:g} "
        f"({tenant.weight / total_weight:.0%}), max_concurrency {concurrency}, rate {rate}; "
        f"max tier {e.max_tier}, scenarios {e.scenarios.describe()}, models {e.models.describe()}, "
        f"roles {', '.join(sorted(e.roles))}, params {params or 'none'}, "
        f"estimated_tokens <= {e.max_estimated_tokens}, deadline <= {e.max_deadline_ms} ms, "
        f"reply topics {e.reply_topics.describe()}, callback hosts {e.callback_hosts.describe()}"
    )
