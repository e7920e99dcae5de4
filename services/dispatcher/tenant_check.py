"""The dispatcher's side of tenancy: whose a record read from Kafka is, and what it may ask for.

A producer that writes to a request topic directly names its tenant in the record and proves it
with a signature (`origin`); who may write there at all is the broker's business (a principal per
producer, ACLs on the topics: see ``services/messaging/acls.py``). A record whose origin holds and
that passed the record rules (``record_rules.py``) passes this check too, after them:

- **open mode** (no tenants file): every tenant is accepted with the global rules, as before.
- **origin** (`origin`, before the record rules): the record's signature must verify for the tenant
  it names, or with a service key (``record_origin.py``); else intake dead-letters it and answers
  nothing. A removed tenant's keys still verify the records it made before the reload.
- **unknown tenant**: a tenant the file does not list is refused: dead-letter topic with the
  reason, FAILED result (``Intake``'s refusal path).
- **removed tenant**: a tenant a reload took out of the file keeps the requests it had already
  made: a record whose `created_at_ms` (as the record rules clamped it) is before the moment the
  dispatcher applied that reload still runs (or expires) with the tenant's last entitlements;
  later ones are refused as unknown. The memory of a removal is kept for `limits.MAX_DEADLINE_MS`
  (nothing older can still be owed), and forgotten at once if the tenant comes back.
- **entitlements**: the one check ingest runs over HTTP,
  `inferq.tenancy.entitlements.apply_entitlements`. A refused record goes to the dead-letter
  topic with every problem named (ingest's 403); a tier above the tenant's `max_tier` is lowered
  to it and a missing `max_tokens` gets the tenant's cap, as ingest narrows them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from inferq.dispatcher.errors import RefusedRequestError
from inferq.dispatcher.record_origin import origin_refusal
from inferq.dispatcher.record_rules import Checked, shown
from inferq.messaging import limits
from inferq.messaging.errors import DecodeError
from inferq.messaging.records import InferenceRequest
from inferq.tenancy.entitlements import apply_entitlements
from inferq.tenancy.model import Tenant, TenantDirectory
from inferq.tenancy.registry import OTHER_LABEL, TenantRegistry

log = logging.getLogger("inferq.dispatcher")

# A refusal's reason is a Kafka header and a log line.
MAX_REASON_CHARS = 200
UNKNOWN_TENANT = "not in the tenants file"


@dataclass(frozen=True)
class _Removed:
    tenant: Tenant
    at_ms: int


class TenantCheck:
    def __init__(
        self, registry: TenantRegistry, *, default_reply_topic: str, clock_ms: Callable[[], int]
    ) -> None:
        self._registry = registry
        self._default_reply_topic = default_reply_topic
        self._clock_ms = clock_ms
        self._removed: dict[str, _Removed] = {}
        self._known: TenantDirectory | None = registry.directory
        registry.on_change(self._changed)

    @property
    def open_mode(self) -> bool:
        return self._registry.open_mode

    def label(self, tenant: str) -> str:
        """The metrics label of `tenant`: its name if the file lists it (or lists it no more while
        its requests finish), ``default`` in open mode, else ``other``."""
        label = self._registry.label(tenant)
        return tenant if label == OTHER_LABEL and tenant in self._removed else label

    def origin(
        self,
        request: InferenceRequest,
        *,
        record_key: bytes | None,
        value: bytes,
        signature: bytes | None,
        retry_topic: bool,
    ) -> str | None:
        """Why `request` (decoded from `value`) is not believed to be its tenant's, or None: its
        `signature` must verify (``record_origin.py``). None in open mode."""
        directory = self._registry.directory
        if directory is None:
            return None
        tenant = self._tenant(request.tenant, request.created_at_ms)
        return origin_refusal(
            tenant_name=request.tenant,
            tenant_keys=tenant.record_keys if tenant is not None else (),
            service_keys=directory.service_record_keys,
            signature=signature,
            record_key=record_key,
            value=value,
            retry_topic=retry_topic,
        )

    def check(self, checked: Checked) -> Checked:
        """`checked` as its tenant may run it; `RefusedRequestError` when it may not run at all."""
        if self._registry.open_mode:
            return checked
        request = checked.request
        tenant = self._tenant(request.tenant, request.created_at_ms)

        def refused(reason: str, cause: str = "not_entitled") -> RefusedRequestError:
            return RefusedRequestError(
                reason[:MAX_REASON_CHARS],
                request=request,
                tier=checked.tier,
                reply_topic=checked.reply_topic,
                cause=cause,
            )

        if tenant is None:
            raise refused(f"tenant {shown(request.tenant)} is {UNKNOWN_TENANT}", "unknown_tenant")
        verdict = apply_entitlements(
            replace(request, tier=checked.tier),
            tenant.entitlements,
            default_reply_topic=self._default_reply_topic,
        )
        if not verdict.allowed:
            problems = "; ".join(f"{p.field}: {p.problem}" for p in verdict.problems)
            raise refused(f"tenant {tenant.name!r} is not entitled: {problems}")
        if not verdict.narrowed:
            return checked
        narrowed = verdict.request
        try:
            params = narrowed.decoded_params()
        except DecodeError as exc:  # the record rules decoded them already: cannot happen
            raise refused("params is not a map of JSON values") from exc
        return replace(checked, request=narrowed, tier=narrowed.tier, params=params)

    def _tenant(self, name: str, created_at_ms: int) -> Tenant | None:
        found = self._registry.tenant(name)
        if found is not None:
            return found
        removed = self._removed.get(name)
        if removed is not None and created_at_ms < removed.at_ms:
            return removed.tenant
        return None

    def _changed(self, directory: TenantDirectory) -> None:
        now_ms = self._clock_ms()
        previous, self._known = self._known, directory
        if previous is not None:
            for tenant in previous:
                if directory.get(tenant.name) is None:
                    self._removed[tenant.name] = _Removed(tenant, now_ms)
                    log.warning(
                        "tenant %r removed from the tenants file: its requests made before now still run, "
                        "later ones go to the dead-letter topic",
                        tenant.name,
                    )
        horizon = now_ms - limits.MAX_DEADLINE_MS
        self._removed = {
            name: r for name, r in self._removed.items() if directory.get(name) is None and r.at_ms > horizon
        }
