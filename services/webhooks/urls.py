"""What a callback URL may look like. Pure: no DNS here (that is `guard`), no tenant (`hosts`).

A callback URL is absolute ``https://host[:port]/path[?query]`` (``http://`` only when allowed),
printable ASCII (a non-ASCII host is written in its IDNA ``xn--`` form), at most `MAX_URL_CHARS`.
Refused: userinfo (``user:pass@``: credentials in a URL end up in logs, and ``a@b`` misleads
readers about the host), a fragment, an empty host, a port outside 1-65535, a host that is not a
plain DNS name or a canonical IP literal. IPv4 written as one decimal or hex number, in octal, or
with fewer than four parts (``2130706433``, ``0x7f000001``, ``0177.0.0.1``, ``127.1``) means an IP
address to many resolvers; such a host is refused outright rather than guessed at.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from inferq.messaging import limits
from inferq.webhooks.errors import CallbackRefusedError

MAX_URL_CHARS = limits.MAX_CALLBACK_URL_CHARS
DEFAULT_PORTS = {"https": 443, "http": 80}
_PRINTABLE_ASCII = re.compile(r"[\x21-\x7e]+")
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# A label a resolver may read as a number: decimal, octal (leading 0) or hex (0x...).
_NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)")
MAX_HOST_CHARS = 253

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class CallbackTarget:
    """A callback URL that passed `parse_callback_url`: its scheme, host (lowercase; an IPv6
    literal without brackets), port (the scheme's default when the URL gives none) and, for an
    IP literal, the address."""

    url: str
    scheme: str
    host: str
    port: int
    ip: IPAddress | None = None

    @property
    def origin(self) -> str:
        """scheme://host:port: what logs and dead letters name (a path or query may hold a token)."""
        host = f"[{self.host}]" if isinstance(self.ip, ipaddress.IPv6Address) else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_callback_url(
    url: str, *, allow_http: bool = False, max_chars: int = MAX_URL_CHARS
) -> CallbackTarget:
    """The target of `url`, or `CallbackRefusedError` saying which rule it breaks (module doc)."""
    if len(url) > max_chars:
        raise CallbackRefusedError(f"must be at most {max_chars} characters")
    if not _PRINTABLE_ASCII.fullmatch(url):
        raise CallbackRefusedError("must be printable ASCII without spaces (percent-encode the rest)")
    if "\\" in url:
        # Parsers disagree on a backslash (some read it as '/'): the host checked must be the host called.
        raise CallbackRefusedError("must not contain a backslash")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise CallbackRefusedError(f"is not a valid URL ({_short(exc)})") from None
    schemes = ("https", "http") if allow_http else ("https",)
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        raise CallbackRefusedError(f"scheme must be {' or '.join(schemes)}")
    if "@" in parts.netloc:
        raise CallbackRefusedError("must not carry credentials (user:password@)")
    if parts.fragment or url.endswith("#"):
        raise CallbackRefusedError("must not have a fragment (#...)")
    if port == 0:
        raise CallbackRefusedError("port must be within 1..65535")
    raw_host = parts.netloc.rsplit(":", 1)[0] if parts.port is not None else parts.netloc
    host, ip = _host(raw_host)
    return CallbackTarget(url=url, scheme=scheme, host=host, port=port or DEFAULT_PORTS[scheme], ip=ip)


def _host(raw: str) -> tuple[str, IPAddress | None]:
    if not raw:
        raise CallbackRefusedError("must name a host")
    if raw.startswith("["):
        if not raw.endswith("]") or "%" in raw:
            raise CallbackRefusedError("host is not a valid IPv6 literal")
        try:
            ip6 = ipaddress.IPv6Address(raw[1:-1])
        except ValueError:
            raise CallbackRefusedError("host is not a valid IPv6 literal") from None
        return str(ip6), ip6
    host = raw.lower()
    try:
        ip4 = ipaddress.IPv4Address(host)
    except ValueError:
        pass
    else:
        return str(ip4), ip4
    labels = host.split(".")
    if all(_NUMERIC_LABEL.fullmatch(label) for label in labels if label) or _NUMERIC_LABEL.fullmatch(
        labels[-1]
    ):
        raise CallbackRefusedError(
            "host looks like an IP address in a non-canonical form (decimal, hex, octal or short); "
            "write a dotted IPv4 address or a host name"
        )
    if len(host) > MAX_HOST_CHARS or not all(_LABEL.fullmatch(label) for label in labels):
        raise CallbackRefusedError("host must be a DNS name (letters, digits, '-' and '.') or an IP address")
    return host, None


def _short(exc: ValueError) -> str:
    # urllib's messages may quote the URL: keep only the kind of problem.
    text = str(exc)
    return "bad port" if "port" in text.lower() else "cannot be parsed"
