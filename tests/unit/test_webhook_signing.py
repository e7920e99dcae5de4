"""Webhook signatures in the Standard Webhooks form: what inferq signs, the maintained
`standardwebhooks` package verifies, and it refuses anything changed on the way."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from standardwebhooks import Webhook, WebhookVerificationError

from inferq.tenancy.secret_forms import new_webhook_secret
from inferq.webhooks.signing import WebhookSecrets

# The package's own test vector (standardwebhooks tests/test_webhooks.py, test_sign_function).
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # noqa: S105 - a published test vector
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TIMESTAMP = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

CURRENT = new_webhook_secret()
PREVIOUS = new_webhook_secret()
BODY = b'{"request_id":"r1","status":"OK","output":"h\xc3\xa9llo"}'
DELIVERY_ID = "5f0c2a1e-8f4d-4c1e-9a57-0d7c1c3b9e42"


def signed(*secrets: str, message_id: str = DELIVERY_ID, timestamp: int | None = None) -> dict[str, str]:
    keys = WebhookSecrets.of(SecretStr(s) for s in secrets)
    return keys.headers(message_id, int(time.time()) if timestamp is None else timestamp, BODY)


def test_the_spec_vector_signs_the_same_as_the_package():
    keys = WebhookSecrets.of([SecretStr(VECTOR_SECRET)])
    headers = keys.headers(VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY)
    assert headers == {
        "webhook-id": VECTOR_ID,
        "webhook-timestamp": str(VECTOR_TIMESTAMP),
        "webhook-signature": VECTOR_SIGNATURE,
    }


def test_the_package_verifies_what_inferq_signs():
    assert Webhook(CURRENT).verify(BODY, signed(CURRENT))["status"] == "OK"


def test_two_secrets_sign_twice_and_a_receiver_holding_either_accepts():
    headers = signed(CURRENT, PREVIOUS)
    entries = headers["webhook-signature"].split(" ")
    assert len(entries) == 2 and all(e.startswith("v1,") for e in entries)
    assert Webhook(CURRENT).verify(BODY, headers)["request_id"] == "r1"
    assert Webhook(PREVIOUS).verify(BODY, headers)["request_id"] == "r1"
    with pytest.raises(WebhookVerificationError):
        Webhook(new_webhook_secret()).verify(BODY, headers)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("body", "No matching signature"),
        ("id", "No matching signature"),
        ("timestamp moved", "No matching signature"),
        ("old timestamp", "too old"),
        ("future timestamp", "too new"),
        ("no signature", "Missing required headers"),
    ],
)
def test_a_changed_body_id_or_timestamp_is_refused_by_the_package(change, why):
    now = int(time.time())
    headers, body = signed(CURRENT, timestamp=now), BODY
    if change == "body":
        body = BODY.replace(b"OK", b"KO")
    elif change == "id":
        headers["webhook-id"] = "another-delivery"
    elif change == "timestamp moved":
        headers["webhook-timestamp"] = str(now - 60)
    elif change == "old timestamp":
        headers = signed(CURRENT, timestamp=now - 600)
    elif change == "future timestamp":
        headers = signed(CURRENT, timestamp=now + 600)
    else:
        del headers["webhook-signature"]
    with pytest.raises(WebhookVerificationError, match=why):
        Webhook(CURRENT).verify(body, headers)


def test_the_keys_are_the_decoded_secret_not_its_text():
    # A receiver using the secret's text as the key (the old private format) does not verify.
    raw = Webhook(CURRENT.encode())
    with pytest.raises(WebhookVerificationError):
        raw.verify(BODY, signed(CURRENT))


@pytest.mark.parametrize("count", [0, 3])
def test_one_or_two_secrets_only(count):
    with pytest.raises(ValueError, match="1 to 2"):
        WebhookSecrets.of(SecretStr(new_webhook_secret()) for _ in range(count))


def test_the_keys_never_show_in_a_repr():
    keys = WebhookSecrets.of([SecretStr(CURRENT)])
    assert repr(keys) == "WebhookSecrets(1 keys)"
    assert CURRENT.removeprefix("whsec_") not in f"{keys!r} {keys}"


def documented_receiver():
    """The receiver's snippet in docs/api.md ("Webhooks"), run as a user would paste it."""
    page = (Path(__file__).parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    block = page.split("<!-- webhook-verify -->", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/api.md", "exec"), namespace)  # noqa: S102 - our own documentation
    return namespace["verified_outcome"]


def test_the_documented_receiver_accepts_what_inferq_signs_and_refuses_the_rest():
    verified_outcome = documented_receiver()
    headers = signed(CURRENT, PREVIOUS)
    assert verified_outcome(CURRENT, BODY, headers)["status"] == "OK"
    assert verified_outcome(PREVIOUS, BODY, headers)["status"] == "OK"
    assert verified_outcome(CURRENT, BODY + b" ", headers) is None
    assert verified_outcome(new_webhook_secret(), BODY, headers) is None
    assert verified_outcome(CURRENT, BODY, signed(CURRENT, timestamp=int(time.time()) - 600)) is None
    assert verified_outcome(CURRENT, BODY, {"webhook-id": DELIVERY_ID}) is None
    for garbage in ("garbage", "v1,not-base64!", "v1,a,b"):  # a forger's header is refused, not a crash
        assert verified_outcome(CURRENT, BODY, headers | {"webhook-signature": garbage}) is None
