"""Secrets out of anything printed: a URL's password, a secret-named key's value.

`redacted_url` is the one home of URL redaction: every log line, repr, ``inferq config show`` row
and error message that may show a URL (Redis, Kafka, a backend, a webhook callback, an OTLP
endpoint) passes it through here first. It redacts each secret-bearing form:

- the password of ``user:password@host`` and ``:password@host`` (``redis://``, ``rediss://``...);
- the value of a secret-named query or fragment parameter: one whose name holds a word such as
  ``password``, ``pass``, ``pwd``, ``token``, ``secret``, ``key``, ``apikey``, ``auth``, ``sig``
  (any case: ``?password=``, ``api_key``, ``X-Api-Key``, ``accessToken``, ``client_secret``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

MASK = "**********"
# What a redacted part of a URL reads as (short: URLs are read in log lines).
URL_MASK = "***"
# Keys of a free-form mapping (INFERQ_KAFKA_EXTRA's librdkafka options) whose value is a secret.
_SECRET_KEY = re.compile(r"password|secret|token|credential|api[._-]?key", re.IGNORECASE)
# Words that make a URL parameter's value a secret, wherever they stand in its name (``api_key``,
# ``X-Api-Key``, ``apiKey``, ``access_token``, ``client_secret``...).
_SECRET_WORDS = frozenset(
    {"password", "passwd", "pass", "pwd", "token", "secret", "key", "apikey", "credential",
     "credentials", "auth", "authorization", "sig", "signature"}
)  # fmt: skip
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD_SEPARATOR = re.compile(r"[^a-z0-9]+")
# A URL inside any text: a scheme (librdkafka's ``SASL_SSL://`` too), then up to a space, a quote,
# a comma (a bootstrap list), a parenthesis or a brace (IPv6 hosts keep their brackets).
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-_]*://[^\s'\"<>,(){}]*")


def redacted_url(text: str) -> str:
    """`text` (one URL, a comma-separated list of them, or a message quoting some) with every URL's
    password and secret-named parameter values replaced by ``***``; for logs, reprs and errors."""
    if "://" not in text:
        return text
    return _URL.sub(lambda found: _redacted_one(found.group(0)), text)


def carries_secret(url: str) -> bool:
    """Whether `url` holds a password or a secret-named parameter (what `redacted_url` would hide)."""
    return redacted_url(url) != url


def masked(value: Any) -> Any:
    """`value` (JSON-like: as `model_dump(mode="json")` gives it) with URL passwords and the values
    of secret-named keys replaced. `SecretStr` is already masked by pydantic's dump."""
    if isinstance(value, str):
        return redacted_url(value)
    if isinstance(value, dict):
        return {
            key: MASK if isinstance(key, str) and _SECRET_KEY.search(key) else masked(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [masked(item) for item in value]
    return value


def _redacted_one(url: str) -> str:
    scheme, _, rest = url.partition("://")
    # Parsed by hand, not with urlsplit: it refuses some schemes (``SASL_SSL``) and some hosts (an
    # unbalanced bracket) that a log line may still show.
    authority_end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:authority_end], rest[authority_end:]
    userinfo, at, host = authority.rpartition("@")
    if at and ":" in userinfo:
        authority = f"{userinfo.partition(':')[0]}:{URL_MASK}@{host}"
    before_fragment, hash_sign, fragment = tail.partition("#")
    path, question, query = before_fragment.partition("?")
    return (
        f"{scheme}://{authority}{path}{question}{_redacted_params(query)}"
        f"{hash_sign}{_redacted_params(fragment)}"
    )


def _redacted_params(params: str) -> str:
    """``a=1&password=x`` → ``a=1&password=***``; the rest kept as written (no re-encoding)."""
    if "=" not in params:
        return params
    pairs = []
    for pair in params.split("&"):
        name, equals, value = pair.partition("=")
        secret = equals and value and _secret_param(unquote(name))
        pairs.append(f"{name}={URL_MASK}" if secret else pair)
    return "&".join(pairs)


def _secret_param(name: str) -> bool:
    words = _WORD_SEPARATOR.split(_CAMEL.sub("_", name).lower())
    return any(word in _SECRET_WORDS for word in words)
