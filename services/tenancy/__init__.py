"""Tenants: API keys, entitlements and quotas, shared by ingest, results and the dispatcher.

- `keys`: new keys, their ``sha256:<hex>`` hashes, the ``Authorization: Bearer`` parse
- `model`: `Tenant`, `Entitlements`, `TenantDirectory` (frozen values), `OPEN_TENANT`
- `held`: `HeldLimits`, what one tenant may hold at once (streams, long polls, webhooks...)
- `holds`: `HeldResources`, what each tenant holds now within its `HeldLimits` (a `Lease` per held
  resource, a `HoldRefusal` past a limit: the services answer 429 with Retry-After)
- `held_connections`: `HeldConnections`, the ASGI wrapper that bounds each tenant's requests in
  progress (``limits.connections``) on ingest and results
- `secret_forms`: the webhook secrets' and record keys' forms, made and checked
- `loading`: the tenants file (TOML, ``infra/tenants.example.toml``) → a directory, or errors
  naming their lines
- `entitlements`: `apply_entitlements`, the one pure check of a request against a tenant's
  entitlements (ingest, and the dispatcher for records written straight to Kafka)
- `auth`: `Principal` and `authenticate` (401 reasons)
- `rate`: requests per minute, a token bucket per tenant on an injected clock (ingest's
  `requests_per_minute`, the results service's `limits.reads_per_minute`)
- `registry`: `TenantRegistry`, the tenants in force, reloaded on file change and SIGHUP; a reload
  removing every tenant or too many of them is refused (`removal_refusal`)
- `metrics`: ``inferq_tenants_reloads_total{outcome}``, ``inferq_held{tenant, kind}``,
  ``inferq_held_refused_total{tenant, kind}``
- `bind`: open mode (no file) only on loopback addresses
- `settings`: `TenancySettings` (``INFERQ_TENANTS_FILE``, ``INFERQ_TENANTS_RELOAD_INTERVAL_S``,
  ``INFERQ_TENANTS_MAX_REMOVED_SHARE``)
- `cli`: ``inferq tenants key``, ``webhook-secret``, ``record-key`` and ``check FILE``
- `errors`: the exception tree
"""
