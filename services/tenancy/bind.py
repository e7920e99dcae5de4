"""Open mode binds only to loopback: without a tenants file nobody is asked for a key, so only this
machine may reach the service.

`require_tenants_or_loopback(host, tenants_file)` is called by each service's command before
anything starts; a hostname counts as loopback only when every address it resolves to is one.
"""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

from inferq.tenancy.errors import OpenModeRefusedError


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback address (``0.0.0.0`` and ``::`` are not)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    if not host:
        return False
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses)


def require_tenants_or_loopback(host: str, tenants_file: Path | None) -> None:
    """`OpenModeRefusedError` when there is no tenants file and `host` is not loopback."""
    if tenants_file is None and not is_loopback(host):
        raise OpenModeRefusedError(host)
