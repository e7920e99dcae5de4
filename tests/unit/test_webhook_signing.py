"""Webhook signatures: what a receiver verifies, and what it must refuse."""

from __future__ import annotations

import hashlib
import hmac
import time
from pathlib import Path
from typing import Any

import pytest

from inferq.webhooks.signing import SignatureError, signature_header, verify

SECRET = b"whsec_0123456789abcdef0123456789abcdef"
BODY = b'{"request_id":"r1","status":"OK"}'
NOW = 1_764_600_000


def test_the_signature_is_hmac_sha256_of_timestamp_dot_body():
    header = signature_header(SECRET, NOW, BODY)
    expected = hmac.new(SECRET, f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert header == f"t={NOW},v1={expected}"
    assert verify(SECRET, header, BODY, now_s=NOW + 10) == NOW


@pytest.mark.parametrize(
    ("secret", "body", "now_s", "why"),
    [
        (b"another secret, same length as it....", BODY, NOW, "no signature matches"),
        (SECRET, BODY + b" ", NOW, "no signature matches"),
        (SECRET, BODY.replace(b"OK", b"KO"), NOW, "no signature matches"),
        (SECRET, BODY, NOW + 301, "tolerance"),
        (SECRET, BODY, NOW - 301, "tolerance"),
    ],
)
def test_a_changed_body_another_secret_or_a_replayed_old_delivery_is_refused(secret, body, now_s, why):
    header = signature_header(SECRET, NOW, BODY)
    with pytest.raises(SignatureError, match=why):
        verify(secret, header, body, now_s=now_s)


def test_the_timestamp_is_signed_too():
    header = signature_header(SECRET, NOW, BODY)
    moved = header.replace(f"t={NOW}", f"t={NOW + 60}")
    with pytest.raises(SignatureError, match="no signature matches"):
        verify(SECRET, moved, BODY, now_s=NOW + 60)


@pytest.mark.parametrize(
    "header", ["", "v1=abc", f"t={NOW}", "t=abc,v1=00", "garbage", f"t={'9' * 40},v1=00"]
)
def test_a_malformed_header_is_refused(header):
    with pytest.raises(SignatureError, match="malformed"):
        verify(SECRET, header, BODY, now_s=NOW)


def test_any_matching_v1_is_enough_for_a_secret_being_rotated():
    old = signature_header(b"the previous secret, long enough....", NOW, BODY).split(",")[1]
    header = f"{signature_header(SECRET, NOW, BODY)},{old}"
    assert verify(SECRET, header, BODY, now_s=NOW) == NOW


def test_errors_never_carry_the_secret():
    header = signature_header(SECRET, NOW, BODY)
    with pytest.raises(SignatureError) as caught:
        verify(SECRET, header, b"tampered", now_s=NOW)
    assert SECRET.decode() not in str(caught.value)


def documented_verifier():
    """The receiver's snippet in docs/api.md ("Webhooks"), run as a user would paste it."""
    page = (Path(__file__).parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    block = page.split("<!-- webhook-verify -->", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/api.md", "exec"), namespace)  # noqa: S102 - our own documentation
    return namespace["verify_inferq_webhook"]


def test_the_documented_snippet_verifies_what_inferq_signs_and_refuses_the_rest():
    verify_snippet = documented_verifier()
    now = int(time.time())
    header = signature_header(SECRET, now, BODY)
    assert verify_snippet(SECRET, header, BODY) is True
    assert verify_snippet(SECRET, header, BODY + b"x") is False
    assert verify_snippet(b"another secret", header, BODY) is False
    assert verify_snippet(SECRET, signature_header(SECRET, now - 600, BODY), BODY) is False
    assert verify_snippet(SECRET, "garbage", BODY) is False
    assert verify_snippet(SECRET, f"t={now}", BODY) is False
