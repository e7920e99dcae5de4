"""The SSRF guard and the callback URL's form: no webhook to an address inside the network, whatever
spelling or DNS answer is used to get there."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence

import pytest

from inferq.webhooks.errors import CallbackRefusedError
from inferq.webhooks.guard import AddressGuard, address_problem
from inferq.webhooks.urls import IPAddress, parse_callback_url

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("10.0.0.1", "private"),
    ("10.255.255.255", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"),  # cloud metadata
    ("100.64.0.1", "not globally reachable"),
    ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("255.255.255.255", "private"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("fe80::1", "link-local"),
    ("ff02::1", "multicast"),
    ("::ffff:127.0.0.1", "loopback address (inside an IPv6 address)"),
    ("::ffff:10.1.2.3", "private address (inside an IPv6 address)"),
    ("::ffff:169.254.169.254", "link-local address (inside an IPv6 address)"),
    ("64:ff9b::7f00:1", "loopback address (inside an IPv6 address)"),
    ("2002:7f00:1::", "loopback address (inside an IPv6 address)"),
    # Ranges some Python versions' `ipaddress` calls global (3.11 does, for all of these).
    ("64:ff9b:1::a00:1", "local-use NAT64"),  # a private IPv4 address after the prefix
    ("64:ff9b:1::808:808", "local-use NAT64"),  # a public-looking one: the gateway is local
    ("64:ff9b:1:ffff::1", "local-use NAT64"),
    ("fec0::1", "site-local"),
    ("fec0::808:808", "site-local"),
    ("feff:ffff::1", "site-local"),
    ("::ffff:0:a00:1", "private address (inside an IPv6 address)"),  # SIIT, 10.0.0.1
    ("::ffff:0:7f00:1", "loopback address (inside an IPv6 address)"),  # SIIT, 127.0.0.1
    ("::ffff:0:a9fe:a9fe", "link-local address (inside an IPv6 address)"),  # SIIT, 169.254.169.254
    ("::a00:1", "private address (inside an IPv6 address)"),  # IPv4-compatible, 10.0.0.1
    ("::7f00:1", "loopback address (inside an IPv6 address)"),  # IPv4-compatible, 127.0.0.1
    ("::c0a8:101", "private address (inside an IPv6 address)"),  # IPv4-compatible, 192.168.1.1
    ("::2", "private address (inside an IPv6 address)"),  # 0.0.0.2
]
# SIIT and IPv4-compatible addresses are judged by the IPv4 address inside, as NAT64's 64:ff9b::/96.
PUBLIC = [
    "93.184.216.34",
    "8.8.8.8",
    "172.32.0.1",
    "172.15.255.255",
    "2606:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "::ffff:0:808:808",
    "::808:808",
]


@pytest.mark.parametrize(("address", "kind"), REFUSED)
def test_internal_addresses_are_refused(address, kind):
    problem = address_problem(ipaddress.ip_address(address))
    assert problem is not None and kind in problem


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address):
    assert address_problem(ipaddress.ip_address(address)) is None


def guard_with(answers: dict[str, Sequence[str]], **kwargs: object) -> AddressGuard:
    async def resolve(host: str, port: int) -> Sequence[IPAddress]:
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [ipaddress.ip_address(a) for a in answers[host]]

    return AddressGuard(resolve=resolve, **kwargs)  # type: ignore[arg-type]


def addresses(guard: AddressGuard, url: str) -> list[str]:
    target = parse_callback_url(url, allow_http=True)
    return [str(a) for a in asyncio.run(guard.addresses(target))]


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("https://127.0.0.1/hook", "loopback"),
        ("https://10.1.2.3/hook", "private"),
        ("https://[::1]/hook", "loopback"),
        ("https://[fc00::1]/hook", "private"),
        ("https://[fe80::1]/hook", "link-local"),
        ("https://[::ffff:127.0.0.1]/hook", "loopback"),
        ("https://169.254.169.254/latest/meta-data", "link-local"),
        ("https://internal.example/hook", "private"),
        ("https://metadata.example/hook", "link-local"),
        ("https://rebind.example/hook", "loopback"),  # one public answer and one loopback one
        ("https://v6.example/hook", "loopback"),
        ("https://[64:ff9b:1::808:808]/hook", "local-use NAT64"),
        ("https://[fec0::1]/hook", "site-local"),
        ("https://siit.example/hook", "private"),
        ("https://compat.example/hook", "loopback"),
    ],
)
def test_ip_literals_and_names_resolving_inside_are_refused(url, kind):
    guard = guard_with(
        {
            "internal.example": ["192.168.0.10"],
            "metadata.example": ["169.254.169.254"],
            "rebind.example": ["93.184.216.34", "127.0.0.1"],
            "v6.example": ["::ffff:127.0.0.1"],
            "siit.example": ["93.184.216.34", "::ffff:0:c0a8:1"],
            "compat.example": ["::7f00:1"],
        }
    )
    with pytest.raises(CallbackRefusedError, match=kind) as caught:
        addresses(guard, url)
    assert caught.value.permanent


def test_a_public_name_gives_the_addresses_to_connect_to():
    guard = guard_with({"hooks.example": ["93.184.216.34", "2606:4700::1111"]})
    assert addresses(guard, "https://hooks.example/x") == ["93.184.216.34", "2606:4700::1111"]


def test_a_name_that_does_not_resolve_is_refused_but_not_for_good():
    with pytest.raises(CallbackRefusedError, match="does not resolve") as caught:
        addresses(guard_with({}), "https://nowhere.example/x")
    assert not caught.value.permanent


def test_a_lookup_that_hangs_is_bounded():
    async def hang(host: str, port: int) -> Sequence[IPAddress]:
        await asyncio.sleep(3_600)
        return []

    guard = AddressGuard(resolve=hang, resolve_timeout_s=0.05)
    with pytest.raises(CallbackRefusedError, match="timed out"):
        addresses(guard, "https://slow.example/x")


def test_the_setting_for_tests_lets_loopback_through():
    guard = guard_with({"localhost": ["127.0.0.1"]}, allow_private=True)
    assert addresses(guard, "http://localhost:8080/x") == ["127.0.0.1"]
    assert addresses(guard, "http://127.0.0.1:8080/x") == ["127.0.0.1"]


def test_the_system_resolver_is_used_by_default_and_localhost_is_refused():
    with pytest.raises(CallbackRefusedError, match="loopback"):
        addresses(AddressGuard(), "https://localhost/x")


# --- the URL's form ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://hooks.example/x", "scheme must be https"),
        ("ftp://hooks.example/x", "scheme must be https"),
        ("file:///etc/passwd", "scheme must be https"),
        ("gopher://hooks.example/", "scheme must be https"),
        ("//hooks.example/x", "scheme must be https"),
        ("hooks.example/x", "scheme must be https"),
        ("https://user:pass@hooks.example/x", "credentials"),
        ("https://hooks.example@127.0.0.1/x", "credentials"),
        ("https://hooks.example/x#frag", "fragment"),
        ("https:///x", "must name a host"),
        ("https://hooks.example:0/x", "port"),
        ("https://hooks.example:70000/x", "not a valid URL"),
        ("https://hooks.example:abc/x", "not a valid URL"),
        ("https://hooks.example/" + "a" * 2100, "at most 2048"),
        ("https://hooks.example/a b", "printable ASCII"),
        ("https://hooks.example/\n", "printable ASCII"),
        ("https://hoöks.example/", "printable ASCII"),
        ("https://2130706433/x", "non-canonical"),  # 127.0.0.1 as one decimal number
        ("https://0x7f000001/x", "non-canonical"),  # as hex
        ("https://0x7f.0.0.1/x", "non-canonical"),
        ("https://0177.0.0.1/x", "non-canonical"),  # octal
        ("https://127.1/x", "non-canonical"),  # short form
        ("https://127.000.000.001/x", "non-canonical"),
        ("https://10.0.0.0x1/x", "non-canonical"),
        ("https://[::1/x", "not a valid URL"),
        ("https://[fe80::1%25eth0]/x", "IPv6"),
        ("https://hooks_example.com/x", "DNS name"),
        ("https://-hooks.example/x", "DNS name"),
        ("https://hooks..example/x", "DNS name"),
        ("https://hooks.example./x", "DNS name"),
    ],
)
def test_malformed_or_evasive_urls_are_refused_by_form(url, problem):
    with pytest.raises(CallbackRefusedError, match=problem):
        parse_callback_url(url)


def test_http_only_when_allowed_and_the_default_ports():
    assert parse_callback_url("https://Hooks.Example/x?y=1").port == 443
    assert parse_callback_url("https://Hooks.Example/x").host == "hooks.example"
    target = parse_callback_url("http://hooks.example:8080/x", allow_http=True)
    assert (target.scheme, target.port, target.origin) == ("http", 8080, "http://hooks.example:8080")
    assert parse_callback_url("https://[2606:4700::1111]:8443/").origin == "https://[2606:4700::1111]:8443"


def test_a_refusal_never_quotes_the_urls_query():
    with pytest.raises(CallbackRefusedError) as caught:
        parse_callback_url("https://hooks.example:99999/x?token=s3cr3t")
    assert "s3cr3t" not in str(caught.value)


def test_a_backslash_is_refused_so_no_parser_reads_another_host():
    with pytest.raises(CallbackRefusedError, match="backslash"):
        parse_callback_url("https://hooks.example\\@127.0.0.1/x")
