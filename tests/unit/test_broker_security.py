"""The secured local broker's material and properties, checked without starting a broker."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.security import SaslMechanism, SecurityProtocol
from inferq.tools.broker.broker import (
    BrokerConfig,
    LocalBroker,
    _with_overrides,
    recorded_ports,
    recorded_security,
    server_properties,
)
from inferq.tools.broker.security import USERS, BrokerSecurity, SecurityMaterial, client_env


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> SecurityMaterial:
    return SecurityMaterial.ensure(tmp_path_factory.mktemp("home") / "security")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_material_is_made_once_and_its_secrets_are_private(material: SecurityMaterial) -> None:
    assert mode(material.folder) == 0o700
    assert mode(material.folder / "credentials.json") == 0o600
    assert mode(material.folder / "ca.key") == 0o600 and mode(material.keystore) == 0o600
    for user in USERS:
        assert mode(material.client_pair(user).key) == 0o600
        assert material.client_pair(user).cert.is_file()
    again = SecurityMaterial.ensure(material.folder)
    assert again.passwords == material.passwords  # reused: SCRAM users are fixed at format time
    assert len(set(material.passwords.values())) == len(USERS)
    assert not any(p in repr(material) for p in material.passwords.values())


def test_scram_users_are_added_for_both_mechanisms(material: SecurityMaterial) -> None:
    arguments = material.scram_arguments()
    assert arguments[::2] == ["--add-scram"] * (2 * len(USERS))
    assert f"SCRAM-SHA-256=[name=ingest,password={material.passwords['ingest']}]" in arguments


def test_the_secured_properties_replace_the_listeners_and_lock_everything_down(
    material: SecurityMaterial,
) -> None:
    base = server_properties(BrokerConfig(home=Path("/h"), port=1, controller_port=2, project_root=Path("/")))
    text = _with_overrides(
        base, material.server_properties(host="127.0.0.1", port=1, ssl_port=3, controller_port=2)
    )
    keys = [line.partition("=")[0] for line in text.splitlines() if line and not line.startswith("#")]
    assert len(keys) == len(set(keys)), "a key written twice"
    values = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert values["listeners"] == "SASL_SSL://127.0.0.1:1,SSL://127.0.0.1:3,CONTROLLER://127.0.0.1:2"
    assert values["inter.broker.listener.name"] == "SASL_SSL"
    assert values["allow.everyone.if.no.acl.found"] == "false"
    assert values["super.users"] == "User:admin;User:ANONYMOUS"
    assert values["listener.name.ssl.ssl.client.auth"] == "required"
    assert material.passwords["admin"] in values["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert values["log.dirs"] == "/h/data"  # the rest of the template is untouched


def test_recorded_ports_and_security_read_a_secured_home(tmp_path: Path, material: SecurityMaterial) -> None:
    base = server_properties(
        BrokerConfig(home=Path("/h"), port=7001, controller_port=7002, project_root=Path("/"))
    )
    (tmp_path / "server.properties").write_text(base)
    assert recorded_ports(tmp_path) == (7001, 7002)
    assert recorded_security(tmp_path) == (BrokerSecurity.PLAINTEXT, None)
    props = material.server_properties(host="127.0.0.1", port=7001, ssl_port=7003, controller_port=7002)
    (tmp_path / "server.properties").write_text(_with_overrides(base, props))
    assert recorded_ports(tmp_path) == (7001, 7002)
    assert recorded_security(tmp_path) == (BrokerSecurity.SASL_SSL, 7003)


def test_client_env_round_trips_through_the_services_settings(
    material: SecurityMaterial, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = LocalBroker(
        BrokerConfig(home=material.folder.parent, port=7001, ssl_port=7003, security=BrokerSecurity.SASL_SSL)
    )
    for protocol, mechanism in [
        (SecurityProtocol.SASL_SSL, SaslMechanism.SCRAM_SHA_256),
        (SecurityProtocol.SSL, SaslMechanism.SCRAM_SHA_512),
    ]:
        expected = broker.client_settings("results", protocol=protocol, mechanism=mechanism)
        with monkeypatch.context() as env:
            for name, value in client_env(expected.security).items():
                env.setenv(name, value)
            assert KafkaSettings().security == expected.security
    assert broker.client_settings("results", protocol=SecurityProtocol.SSL).bootstrap_servers.endswith(
        ":7003"
    )


def test_credentials_file_holds_what_load_returns(material: SecurityMaterial) -> None:
    stored = json.loads((material.folder / "credentials.json").read_text())
    loaded = SecurityMaterial.load(material.folder)
    assert loaded is not None and dict(loaded.passwords) == stored["passwords"]
    assert SecurityMaterial.load(material.folder / "nowhere") is None
