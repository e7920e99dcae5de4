"""Throwaway TLS certificates for the local servers (Kafka broker, redis-server) and their clients.

``openssl`` (Debian's, always installed) does the work through a subprocess; no Python crypto
library is needed. Keys are EC P-256 (fast to make, understood by Java, OpenSSL and Python's ssl),
valid for `VALID_DAYS`. Every key file is written with mode 0600; passwords go to openssl through
files, never on its command line.

A server certificate names ``IP:127.0.0.1`` and ``DNS:localhost``, so clients verify host names
as they would in production. A client certificate's subject is ``CN=<name>``: the local broker
maps it to the principal ``User:<name>``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

VALID_DAYS = 30
SERVER_SANS = ("IP:127.0.0.1", "DNS:localhost")
_OPENSSL_TIMEOUT_S = 30.0
_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]


class CertificateError(RuntimeError):
    """openssl is missing or refused to make a certificate; the message carries its output."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert: Path
    key: Path


def _openssl(*args: str) -> None:
    executable = shutil.which("openssl")
    if executable is None:
        raise CertificateError("openssl is not on PATH; install it with `apt-get install -y openssl`")
    try:
        proc = subprocess.run(  # noqa: S603 - fixed argv, resolved executable
            [executable, *args],
            capture_output=True,
            text=True,
            timeout=_OPENSSL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CertificateError(f"openssl {args[0]} timed out") from exc
    if proc.returncode != 0:
        raise CertificateError(f"openssl {args[0]} failed (exit {proc.returncode}): {proc.stderr.strip()}")


def _private(path: Path) -> Path:
    path.chmod(0o600)
    return path


def _secret_file(folder: Path, secret: str) -> Path:
    """A 0600 file holding `secret`, for openssl's ``file:`` password sources."""
    fd, name = tempfile.mkstemp(prefix=".pass-", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(secret + "\n")
    return Path(name)


def make_ca(folder: Path, name: str = "inferq local CA", *, days: int = VALID_DAYS) -> KeyPair:
    """A self-signed CA in ``folder/ca.pem`` and ``folder/ca.key``."""
    folder.mkdir(parents=True, exist_ok=True)
    pair = KeyPair(folder / "ca.pem", folder / "ca.key")
    _openssl(
        "req", "-x509", *_EC, "-nodes", "-keyout", str(pair.key), "-out", str(pair.cert),
        "-days", str(days), "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    _private(pair.key)
    return pair


def issue(
    ca: KeyPair,
    folder: Path,
    name: str,
    *,
    server: bool = False,
    key_password: str | None = None,
    days: int = VALID_DAYS,
) -> KeyPair:
    """A certificate for ``CN=<name>`` signed by `ca`, in ``folder/<name>.pem`` and ``.key``.

    ``server`` adds the loopback names (`SERVER_SANS`) and serverAuth; every certificate may also
    authenticate a client. With ``key_password`` the key is written encrypted (PKCS#8, AES-256).
    """
    folder.mkdir(parents=True, exist_ok=True)
    pair = KeyPair(folder / f"{name}.pem", folder / f"{name}.key")
    csr = folder / f"{name}.csr"
    extensions = folder / f"{name}.ext"
    lines = [
        "basicConstraints=CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={'serverAuth,clientAuth' if server else 'clientAuth'}",
    ]
    if server:
        lines.append(f"subjectAltName={','.join(SERVER_SANS)}")
    extensions.write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        _openssl(
            "req", "-new", *_EC, "-nodes", "-keyout", str(pair.key), "-out", str(csr), "-subj", f"/CN={name}"
        )
        _private(pair.key)
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
            "-set_serial", str(int.from_bytes(os.urandom(8), "big")), "-days", str(days),
            "-extfile", str(extensions), "-out", str(pair.cert),
        )  # fmt: skip
        if key_password is not None:
            _encrypt_key(pair.key, key_password)
    finally:
        csr.unlink(missing_ok=True)
        extensions.unlink(missing_ok=True)
    return pair


def _encrypt_key(key: Path, password: str) -> None:
    secret = _secret_file(key.parent, password)
    encrypted = key.with_suffix(".key.enc")
    try:
        _openssl(
            "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", str(key), "-out", str(encrypted),
            "-passout", f"file:{secret}",
        )  # fmt: skip
        _private(encrypted).replace(key)
    finally:
        secret.unlink(missing_ok=True)
        encrypted.unlink(missing_ok=True)


def pkcs12_keystore(pair: KeyPair, ca: KeyPair, out: Path, password: str, *, alias: str) -> Path:
    """`pair` and the CA chain as a PKCS#12 keystore (what a Java server loads), mode 0600."""
    secret = _secret_file(out.parent, password)
    try:
        _openssl(
            "pkcs12", "-export", "-in", str(pair.cert), "-inkey", str(pair.key), "-certfile", str(ca.cert),
            "-name", alias, "-out", str(out), "-passout", f"file:{secret}",
        )  # fmt: skip
    finally:
        secret.unlink(missing_ok=True)
    return _private(out)
