"""Whether a record read from Kafka was written by its tenant (or by inferq), by its signature.

A record names its tenant in its value; the signature (``inferq-signature``,
`inferq.messaging.record_signing`) says who wrote it. With a tenants file in force, a record on a
request topic is believed when its signature verifies with one of the file's ``[service]
record_keys`` (ingest wrote it, for whichever tenant) or with one of the named tenant's
`record_keys` (that tenant's own producer). A record on the retry topic is the dispatcher's own:
only a service key verifies it. Anything else is refused with a reason (`origin_refusal`); intake
sends it to the dead-letter topic and answers nothing, since a FAILED result under the named tenant
would be a result the forger planted (``intake.py``).

Open mode (no tenants file) checks nothing: there is one tenant, and whoever may write the topics
is it (docs/tenants.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import SecretStr

from inferq.dispatcher.record_rules import shown
from inferq.messaging.record_signing import SIGNATURE_HEADER, hmac_key, verify

MISSING = "record signature missing"


def origin_refusal(
    *,
    tenant_name: str,
    tenant_keys: Iterable[SecretStr],
    service_keys: Iterable[SecretStr],
    signature: bytes | None,
    record_key: bytes | None,
    value: bytes,
    retry_topic: bool,
) -> str | None:
    """Why the record's tenant is not believed, or None when its signature verifies (docstring
    above). `tenant_keys` are the named tenant's record keys (none when the file does not list it)."""
    if signature is None:
        return f"{MISSING} (no {SIGNATURE_HEADER} header)"
    service = [hmac_key(k.get_secret_value()) for k in service_keys]
    if retry_topic:
        if verify(signature, service, record_key, value):
            return None
        return "record signature does not verify with a service record key (the retry topic is inferq's own)"
    own = [hmac_key(k.get_secret_value()) for k in tenant_keys]
    if verify(signature, [*service, *own], record_key, value):
        return None
    return f"record signature does not verify for tenant {shown(tenant_name)}"
