"""Secrets out of anything printed: a URL's password, a secret-named key's value."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MASK = "**********"
# Keys of a free-form mapping (INFERQ_KAFKA_EXTRA's librdkafka options) whose value is a secret.
_SECRET_KEY = re.compile(r"password|secret|token|credential|api[._-]?key", re.IGNORECASE)


def redacted_url(url: str) -> str:
    """``url`` without its password, for logs and reprs."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL after all (an unbalanced bracket in a host): nothing to find
        return url
    if password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def masked(value: Any) -> Any:
    """`value` (JSON-like: as `model_dump(mode="json")` gives it) with URL passwords and the values
    of secret-named keys replaced. `SecretStr` is already masked by pydantic's dump."""
    if isinstance(value, str):
        return redacted_url(value) if "://" in value else value
    if isinstance(value, dict):
        return {
            key: MASK if isinstance(key, str) and _SECRET_KEY.search(key) else masked(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [masked(item) for item in value]
    return value
