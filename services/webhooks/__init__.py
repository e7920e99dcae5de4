"""Signed webhooks: a request's outcome POSTed to its `callback_url`.

Submission (ingest, `inferq.ingest.callbacks`) and delivery (the results service) apply the same
rules, so a record written straight to Kafka gets no more than an HTTP caller:

- `urls`: what a callback URL may look like (https, or http when allowed; no userinfo, no
  fragment, a plain host name or a canonical IP literal, bounded length);
- `hosts`: whose hosts it may name (the tenant's `callback_hosts`, or in open mode
  ``INFERQ_CALLBACK_HOSTS``);
- `guard`: the SSRF guard, which resolves the host and refuses loopback, private, link-local,
  multicast, unspecified and reserved addresses (and their IPv4-mapped forms) unless
  ``INFERQ_WEBHOOK_ALLOW_PRIVATE_ADDRESSES`` is set; delivery connects only to the addresses it
  checked (`delivery.CheckedResolver`), so a DNS answer that changes in between (rebinding) is
  never connected to;
- `signing`: Standard Webhooks signatures (``webhook-id``, ``webhook-timestamp``,
  ``webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">``, one entry per secret);
- `resolver`: the callbacks' own resolver (threads of its own, never the loop's default pool; at
  most the tenant's `dns_lookups` in flight), used by `guard` at submission and at delivery;
- `backoff`, `outbox`, `delivery`, `sender`: the durable delivery in the results service (an outbox
  row written in the same SQLite transaction as the result, drained with retries; a dead letter
  when the retry period is over, or when the tenant's `webhooks_queued` was reached);
- `fair_share`: which due deliveries start next (each tenant at most its `webhooks_in_flight`, free
  slots round-robin across tenants), so one tenant's slow receiver delays only its own.
"""
