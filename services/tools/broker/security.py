"""A secured local broker: its TLS material, its SCRAM users, and the server properties using them.

A broker started with ``security=sasl_ssl`` keeps, beside its data, the folder ``<home>/security``::

    ca.pem, ca.key          the CA that signed everything below (clients trust ca.pem)
    broker.p12              the broker's key and certificate (IP:127.0.0.1, DNS:localhost), PKCS#12
    clients/<user>.pem|key  a client certificate per user (CN=<user>, key encrypted) for the SSL listener
    credentials.json        mode 0600: the users' passwords, the client key and keystore passwords

Everything is made once, on the first secured start, and reused by later starts (the SCRAM users
are written into the metadata log when storage is formatted, so they cannot change afterwards).

The broker then listens on three ports: SASL_SSL (SCRAM-SHA-512 and SCRAM-SHA-256; also the
inter-broker listener, as ``admin``), SSL with required client certificates (the certificate's CN
is the principal, so ``CN=ingest`` is ``User:ingest`` on both listeners), and the KRaft CONTROLLER
listener, left PLAINTEXT on 127.0.0.1. An authorizer refuses whatever no ACL allows; ``admin`` is a
super user, and so is ``ANONYMOUS`` because that is who the broker itself is on the PLAINTEXT
controller listener (anyone able to connect to that loopback port is too: fine for a local broker,
not for a shared host, where the controller listener needs TLS as well).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType

from pydantic import SecretStr

from inferq.messaging.security import KafkaSecurity, SaslMechanism, SecurityProtocol
from inferq.tools.certs import KeyPair, issue, make_ca, pkcs12_keystore

ADMIN = "admin"
USERS = (ADMIN, "ingest", "dispatcher", "results")
MECHANISMS = (SaslMechanism.SCRAM_SHA_512, SaslMechanism.SCRAM_SHA_256)
SASL_LISTENER = "SASL_SSL"
SSL_LISTENER = "SSL"
_CREDENTIALS = "credentials.json"


class BrokerSecurity(StrEnum):
    """How a local broker's clients connect: in the clear, or over SASL_SSL and mutual-TLS listeners."""

    PLAINTEXT = "plaintext"
    SASL_SSL = "sasl_ssl"


@dataclass(frozen=True, slots=True)
class SecurityMaterial:
    """The files and passwords of one secured broker home (module docstring). Reprs hold no secret."""

    folder: Path
    passwords: Mapping[str, str] = field(repr=False)
    key_passwords: Mapping[str, str] = field(repr=False)
    keystore_password: str = field(repr=False)

    @property
    def ca_file(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def keystore(self) -> Path:
        return self.folder / "broker.p12"

    def client_pair(self, user: str) -> KeyPair:
        return KeyPair(self.folder / "clients" / f"{user}.pem", self.folder / "clients" / f"{user}.key")

    @classmethod
    def load(cls, folder: Path) -> SecurityMaterial | None:
        """The material in `folder`, or None when none was made there yet."""
        try:
            stored = json.loads((folder / _CREDENTIALS).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return cls(
            folder=folder,
            passwords=MappingProxyType(dict(stored["passwords"])),
            key_passwords=MappingProxyType(dict(stored["key_passwords"])),
            keystore_password=str(stored["keystore_password"]),
        )

    @classmethod
    def ensure(cls, folder: Path) -> SecurityMaterial:
        """The material in `folder`, made there first if missing (CA, certificates, passwords)."""
        existing = cls.load(folder)
        if existing is not None:
            return existing
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
        material = cls(
            folder=folder,
            passwords=MappingProxyType({user: secrets.token_urlsafe(18) for user in USERS}),
            key_passwords=MappingProxyType({user: secrets.token_urlsafe(18) for user in USERS}),
            keystore_password=secrets.token_urlsafe(18),
        )
        ca = make_ca(folder)
        broker = issue(ca, folder, "broker", server=True)
        pkcs12_keystore(broker, ca, material.keystore, material.keystore_password, alias="broker")
        for user in USERS:
            issue(ca, folder / "clients", user, key_password=material.key_passwords[user])
        # Written last: its presence means every file above is complete.
        stored = {
            "passwords": dict(material.passwords),
            "key_passwords": dict(material.key_passwords),
            "keystore_password": material.keystore_password,
        }
        fd = os.open(folder / _CREDENTIALS, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(stored, handle, indent=2)
        return material

    def scram_arguments(self) -> list[str]:
        """``--add-scram`` arguments of ``kafka.tools.StorageTool format``: every user, both mechanisms.

        They are on the format command's argv for the few seconds it runs (the broker's own tool
        takes them no other way at format time); the home is the developer's own.
        """
        arguments: list[str] = []
        for user in USERS:
            for mechanism in MECHANISMS:
                arguments += [
                    "--add-scram",
                    f"{mechanism.value}=[name={user},password={self.passwords[user]}]",
                ]
        return arguments

    def server_properties(
        self, *, host: str, port: int, ssl_port: int, controller_port: int
    ) -> dict[str, str]:
        """The broker properties of a secured listener set, replacing the plaintext ones."""
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{ADMIN}" password="{self.passwords[ADMIN]}";'
        )
        return {
            "listeners": (
                f"{SASL_LISTENER}://{host}:{port},{SSL_LISTENER}://{host}:{ssl_port},"
                f"CONTROLLER://{host}:{controller_port}"
            ),
            "advertised.listeners": f"{SASL_LISTENER}://{host}:{port},{SSL_LISTENER}://{host}:{ssl_port}",
            # The broker talks to itself as admin over SCRAM, like any other client.
            "inter.broker.listener.name": SASL_LISTENER,
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL",
            "sasl.enabled.mechanisms": ",".join(m.value for m in MECHANISMS),
            "sasl.mechanism.inter.broker.protocol": SaslMechanism.SCRAM_SHA_512.value,
            # Each enabled mechanism needs a login module on the listener; admin's is used inter-broker.
            **{f"listener.name.sasl_ssl.{m.value.lower()}.sasl.jaas.config": jaas for m in MECHANISMS},
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.keystore),
            "ssl.keystore.password": self.keystore_password,
            "ssl.key.password": self.keystore_password,  # openssl's PKCS#12 uses the store password
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            # The SSL listener is mutual TLS: no certificate, no connection.
            "listener.name.ssl.ssl.client.auth": "required",
            # CN=ingest -> User:ingest, the same principal as the SCRAM user, so one ACL set covers both.
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            # ANONYMOUS: the broker's own principal on the PLAINTEXT CONTROLLER listener (loopback only);
            # without it the broker could not register with its own controller.
            "super.users": f"User:{ADMIN};User:ANONYMOUS",
        }

    def client_security(
        self,
        user: str,
        *,
        protocol: SecurityProtocol = SecurityProtocol.SASL_SSL,
        mechanism: SaslMechanism = SaslMechanism.SCRAM_SHA_512,
    ) -> KafkaSecurity:
        """The client settings of `user`: SCRAM over TLS, or (``SSL``) its client certificate."""
        if user not in self.passwords:
            raise ValueError(f"no user {user!r} on this broker; there are {', '.join(USERS)}")
        if protocol is SecurityProtocol.SASL_SSL:
            return KafkaSecurity(
                security_protocol=protocol,
                sasl_mechanism=mechanism,
                sasl_username=user,
                sasl_password=SecretStr(self.passwords[user]),
                ssl_ca_file=self.ca_file,
            )
        if protocol is SecurityProtocol.SSL:
            pair = self.client_pair(user)
            return KafkaSecurity(
                security_protocol=protocol,
                ssl_ca_file=self.ca_file,
                ssl_cert_file=pair.cert,
                ssl_key_file=pair.key,
                ssl_key_password=SecretStr(self.key_passwords[user]),
            )
        raise ValueError(f"a secured broker has no {protocol.value} listener")


def client_env(security: KafkaSecurity) -> dict[str, str]:
    """`security` as the ``INFERQ_KAFKA_*`` variables a service process reads (secrets included:
    for a child's environment, never for a log)."""
    values: dict[str, str | Path | SecretStr | None] = {
        "SECURITY_PROTOCOL": security.security_protocol.value,
        "SSL_CA_FILE": security.ssl_ca_file,
        "SSL_CERT_FILE": security.ssl_cert_file,
        "SSL_KEY_FILE": security.ssl_key_file,
        "SSL_KEY_PASSWORD": security.ssl_key_password,
    }
    if security.security_protocol is SecurityProtocol.SASL_SSL:
        values |= {
            "SASL_MECHANISM": security.sasl_mechanism.value,
            "SASL_USERNAME": security.sasl_username,
            "SASL_PASSWORD": security.sasl_password,
        }
    return {
        f"INFERQ_KAFKA_{name}": value.get_secret_value() if isinstance(value, SecretStr) else str(value)
        for name, value in values.items()
        if value is not None
    }
