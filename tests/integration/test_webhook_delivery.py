"""One delivery attempt against a real local HTTP server: the connection goes only to the address the
SSRF guard checked, with the URL's name in the Host header; a name resolving to loopback is refused
at connect time (DNS rebinding), redirects are not followed, and a slow receiver is cut off."""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Sequence

from pydantic import SecretStr
from standardwebhooks import Webhook

from inferq.tenancy.secret_forms import new_webhook_secret
from inferq.webhooks.delivery import AttemptOutcome, WebhookPoster
from inferq.webhooks.guard import AddressGuard
from inferq.webhooks.outbox import PendingDelivery
from inferq.webhooks.signing import WebhookSecrets
from inferq.webhooks.urls import IPAddress, parse_callback_url
from tests.support.webhook_receiver import Receiver, webhook_receiver

SECRET = new_webhook_secret()
DELIVERY = PendingDelivery("d-1", "acme", "r-1", "unused", b'{"request_id":"r-1"}', stored_at_ms=0)


class Dns:
    """A resolver whose answers the test sets; counts the lookups."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.lookups = 0

    async def __call__(self, host: str, port: int) -> Sequence[IPAddress]:
        self.lookups += 1
        return [ipaddress.ip_address(a) for a in self.answers.get(host, [])]


def attempt(url: str, dns: Dns, *, allow_private: bool, timeout_s: float = 5.0):
    async def go():
        poster = WebhookPoster(
            AddressGuard(allow_private=allow_private, resolve=dns),
            timeout_s=timeout_s,
            connect_timeout_s=timeout_s,
        )
        await poster.start()
        try:
            target = parse_callback_url(url, allow_http=True)
            keys = WebhookSecrets.of([SecretStr(SECRET)])
            return await poster.post(target, DELIVERY, secret=keys, attempt=1, now_s=int(time.time()))
        finally:
            await poster.stop()

    return asyncio.run(go())


def name_url(receiver: Receiver, path: str) -> str:
    return f"http://hooks.test:{receiver.port}{path}"


def test_the_connection_goes_to_the_checked_address_with_the_name_as_host():
    with webhook_receiver() as receiver:
        dns = Dns({"hooks.test": ["127.0.0.1"]})
        result = attempt(name_url(receiver, "/ok/a"), dns, allow_private=True)
        assert result.outcome is AttemptOutcome.DELIVERED
        [delivery] = receiver.to("/ok/a")
        assert delivery.headers["host"] == f"hooks.test:{receiver.port}"
        assert delivery.headers["webhook-id"] == "d-1"
        assert Webhook(SECRET).verify(delivery.body, delivery.headers) == {"request_id": "r-1"}
        assert dns.lookups == 1


def test_a_name_resolving_to_loopback_now_is_refused_at_connect_and_nothing_is_sent():
    # Whatever the name resolved to at submission, the lookup this connection uses is the one checked.
    with webhook_receiver() as receiver:
        for answers in (["127.0.0.1"], ["::1"], ["::ffff:127.0.0.1"]):
            result = attempt(name_url(receiver, "/ok/b"), Dns({"hooks.test": answers}), allow_private=False)
            assert result.outcome is AttemptOutcome.REFUSED and "loopback" in result.detail
        assert receiver.deliveries == []


def test_an_ip_literal_is_checked_before_the_call():
    with webhook_receiver() as receiver:
        result = attempt(receiver.url("/ok/c"), Dns({}), allow_private=False)
        assert result.outcome is AttemptOutcome.REFUSED
        assert receiver.deliveries == []


def test_a_name_that_stops_resolving_is_retried_not_refused():
    with webhook_receiver() as receiver:
        result = attempt(name_url(receiver, "/ok/d"), Dns({}), allow_private=True)
        assert result.outcome is AttemptOutcome.RETRY and "does not resolve" in result.detail


def test_redirects_are_not_followed():
    with webhook_receiver() as receiver:
        result = attempt(receiver.url("/redirect/e"), Dns({}), allow_private=True)
        assert result.outcome is AttemptOutcome.RETRY and "redirects are not followed" in result.detail
        assert receiver.to("/ok/redirected") == []


def test_a_slow_receiver_is_cut_off_and_retried():
    with webhook_receiver() as receiver:
        result = attempt(receiver.url("/slow/f"), Dns({}), allow_private=True, timeout_s=0.3)
        assert (result.outcome, result.detail) == (AttemptOutcome.RETRY, "timeout")


def test_a_closed_port_is_retried():
    with webhook_receiver() as receiver:
        port = receiver.port
    result = attempt(f"http://127.0.0.1:{port}/ok/g", Dns({}), allow_private=True)
    assert result.outcome is AttemptOutcome.RETRY and result.kind == "connection"
