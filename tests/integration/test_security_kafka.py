"""Transport security on the real broker: SCRAM over TLS and mutual TLS, one principal per service,
ACLs that refuse what a service has no business doing, and refusals that say so at start-up."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import GroupAuthorizationFailedError
from pydantic import SecretStr

from inferq.cli import main
from inferq.ingest.backlog import KafkaBacklogReader
from inferq.messaging.acls import ServicePrincipals, service_grants
from inferq.messaging.admin import create_topics, existing_topics, require_topics
from inferq.messaging.errors import KafkaAuthenticationError, KafkaTlsError, MissingTopicsError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.producer import AsyncProducer, ProduceError
from inferq.messaging.security import SaslMechanism, SecurityProtocol
from inferq.messaging.tiers import Tier
from inferq.tools.broker.broker import LocalBroker
from inferq.tools.broker.security import ADMIN
from inferq.tools.certs import make_ca

pytestmark = pytest.mark.kafka

REFUSAL_BOUND_S = 10.0  # a refused login must end the start-up check well before its 15 s timeout


def settings(
    broker: LocalBroker,
    user: str,
    prefix: str,
    *,
    protocol: SecurityProtocol = SecurityProtocol.SASL_SSL,
    mechanism: SaslMechanism = SaslMechanism.SCRAM_SHA_512,
) -> KafkaSettings:
    return broker.client_settings(user, protocol=protocol, mechanism=mechanism, topic_prefix=prefix)


async def produce(kafka: KafkaSettings, writes: list[tuple[str, bytes]]) -> list[ProduceError | int]:
    """Produce each (topic, value) in turn with the service's own producer config; the offset or
    the error of each."""
    producer = AsyncProducer(kafka.producer_config(client_id=f"test-{uuid.uuid4().hex[:6]}"))
    await producer.start()
    outcomes: list[ProduceError | int] = []
    try:
        for topic, value in writes:
            try:
                message = await producer.produce(topic, value, timeout_s=20)
            except ProduceError as exc:
                outcomes.append(exc)
            else:
                outcomes.append(int(message.offset() or 0))
    finally:
        await producer.stop()
    return outcomes


async def consume(kafka: KafkaSettings, topics: list[str], group: str, expect: int) -> list[bytes]:
    """Read `expect` records of `topics` in `group` with aiokafka and commit them."""
    consumer = AIOKafkaConsumer(
        *topics,
        **kafka.aiokafka_config(),
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    values: list[bytes] = []
    try:
        await consumer.start()  # inside: a refused start must close its connections too
        async with asyncio.timeout(30):
            while len(values) < expect:
                batches = await consumer.getmany(timeout_ms=500)
                values += [record.value for records in batches.values() for record in records]
        await consumer.commit()
    finally:
        await consumer.stop()
    return values


def refused(outcome: ProduceError | int) -> bool:
    return isinstance(outcome, ProduceError) and "TOPIC_AUTHORIZATION_FAILED" in str(outcome)


def test_ingest_writes_requests_reads_the_backlog_and_cannot_forge_a_result(
    secured_broker: LocalBroker, secured_prefix: str
) -> None:
    ingest = settings(secured_broker, "ingest", secured_prefix)
    topics = ingest.topics
    # The forged write first: a refused record must not poison the producer for the ones after it.
    outcomes = asyncio.run(
        produce(
            ingest,
            [
                (topics.results, b"forged"),
                (topics.requests(Tier.HIGH), b"r1"),
                (topics.dlq, b"x"),
                (topics.chunks, b"forged chunk"),
            ],
        )
    )
    assert refused(outcomes[0]), outcomes
    assert outcomes[1] == 0
    assert refused(outcomes[2]), outcomes
    assert refused(outcomes[3]), outcomes
    reader = KafkaBacklogReader(ingest, f"{secured_prefix}-dispatcher", timeout_s=10.0)
    snapshot = reader.read_once()  # watermarks and the dispatcher group's commits, as ingest
    assert snapshot.backlogs[Tier.HIGH] == 1
    assert snapshot.backlogs[Tier.LOW] == 0


def test_a_dispatcher_reads_requests_in_its_group_and_writes_outcomes_only(
    secured_broker: LocalBroker, secured_prefix: str
) -> None:
    ingest = settings(secured_broker, "ingest", secured_prefix)
    dispatcher = settings(secured_broker, "dispatcher", secured_prefix)
    topics = dispatcher.topics
    asyncio.run(produce(ingest, [(topics.requests(Tier.MEDIUM), b"work")]))
    read = asyncio.run(
        consume(dispatcher, [*topics.all_requests, topics.retry], f"{secured_prefix}-dispatcher", expect=1)
    )
    assert read == [b"work"]
    outcomes = asyncio.run(
        produce(
            dispatcher,
            [
                (topics.results, b"ok"),
                (topics.retry, b"again"),
                (topics.dlq, b"poison"),
                (topics.chunks, b"a chunk"),
                (topics.requests(Tier.HIGH), b"forged"),
            ],
        )
    )
    assert all(isinstance(o, int) for o in outcomes[:4]), outcomes
    assert refused(outcomes[4]), outcomes
    with pytest.raises(GroupAuthorizationFailedError):
        asyncio.run(consume(dispatcher, [topics.retry], "someone-elses-group", expect=1))


def test_results_reads_results_in_its_group_and_writes_only_dead_letters(
    secured_broker: LocalBroker, secured_prefix: str
) -> None:
    dispatcher = settings(secured_broker, "dispatcher", secured_prefix)
    # SCRAM-SHA-256 for this one: the broker offers both mechanisms.
    results = settings(secured_broker, "results", secured_prefix, mechanism=SaslMechanism.SCRAM_SHA_256)
    topics = results.topics
    asyncio.run(produce(dispatcher, [(topics.results, b"answer")]))
    assert asyncio.run(consume(results, [topics.results], f"{secured_prefix}-results", expect=1)) == [
        b"answer"
    ]
    visible = {t for t in existing_topics(results) if t.startswith(f"{secured_prefix}.")}
    # Metadata shows only what a principal may describe (the chunk topics: read for /events streams).
    assert visible == {topics.results, topics.chunks, topics.dlq}
    # It writes dead letters (webhooks it could not deliver) and nothing else: no forged result.
    outcomes = asyncio.run(produce(results, [(topics.results, b"forged"), (topics.dlq, b"undelivered")]))
    assert refused(outcomes[0]), outcomes
    assert isinstance(outcomes[1], int), outcomes


def test_a_wrong_password_fails_the_start_up_check_at_once_and_clearly(
    secured_broker: LocalBroker, secured_prefix: str
) -> None:
    good = settings(secured_broker, "ingest", secured_prefix)
    wrong_password = "not-the-" + uuid.uuid4().hex
    bad = good.model_copy(
        update={"security": good.security.model_copy(update={"sasl_password": SecretStr(wrong_password)})}
    )
    started = time.monotonic()
    with pytest.raises(KafkaAuthenticationError) as caught:
        require_topics(bad, bad.topics.all_requests)
    took = time.monotonic() - started
    assert took < REFUSAL_BOUND_S, f"took {took:.1f} s"
    message = str(caught.value)
    assert (
        f"Kafka at {secured_broker.bootstrap} refused the credentials of ingest (SASL authentication failed)"
        in (message)
    )
    assert wrong_password not in message
    assert secured_broker.security_material is not None
    assert secured_broker.security_material.passwords["ingest"] not in message


def test_topics_a_principal_may_not_use_are_named_with_the_acl_hint(
    secured_broker: LocalBroker, secured_prefix: str
) -> None:
    results = settings(secured_broker, "results", secured_prefix)
    with pytest.raises(MissingTopicsError) as caught:
        require_topics(results, results.topics.all_requests)  # they exist; results may not see them
    assert caught.value.missing == sorted(results.topics.all_requests)
    assert "results may not use them (`inferq acls apply`)" in str(caught.value)


def test_an_untrusted_broker_certificate_fails_the_start_up_check_at_once(
    secured_broker: LocalBroker, secured_prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    good = settings(secured_broker, "results", secured_prefix)
    stranger = make_ca(tmp_path_factory.mktemp("stranger"), "a CA the broker never heard of")
    bad = good.model_copy(
        update={"security": good.security.model_copy(update={"ssl_ca_file": stranger.cert})}
    )
    started = time.monotonic()
    with pytest.raises(KafkaTlsError, match="certificate verify failed"):
        require_topics(bad, [bad.topics.results])
    assert time.monotonic() - started < REFUSAL_BOUND_S


def test_mutual_tls_the_certificate_is_the_principal(
    secured_broker: LocalBroker, secured_prefix: str
) -> None:
    ingest = settings(secured_broker, "ingest", secured_prefix, protocol=SecurityProtocol.SSL)
    results = settings(secured_broker, "results", secured_prefix, protocol=SecurityProtocol.SSL)
    topics = ingest.topics
    dispatcher = settings(secured_broker, "dispatcher", secured_prefix, protocol=SecurityProtocol.SSL)
    outcomes = asyncio.run(
        produce(ingest, [(topics.requests(Tier.LOW), b"brief"), (topics.results, b"forged")])
    )
    assert outcomes[0] == 0 and refused(outcomes[1]), outcomes
    assert asyncio.run(produce(dispatcher, [(topics.results, b"done")])) == [0]
    require_topics(results, [topics.results])
    read = asyncio.run(consume(results, [topics.results], f"{secured_prefix}-results", expect=1))
    assert read == [b"done"]  # aiokafka with the client certificate in its SSLContext
    anonymous = ingest.model_copy(
        update={
            "security": ingest.security.model_copy(
                update={"ssl_cert_file": None, "ssl_key_file": None, "ssl_key_password": None}
            )
        }
    )
    started = time.monotonic()
    with pytest.raises(KafkaTlsError, match="alert bad certificate"):
        require_topics(anonymous, topics.all_requests)  # no certificate: the broker's TLS alert
    assert time.monotonic() - started < REFUSAL_BOUND_S


def test_the_cli_prints_client_settings_and_applies_acls(
    secured_broker: LocalBroker,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = str(secured_broker.config.home)
    assert main(["broker", "status", "--home", home]) == 0
    assert "answering" in capsys.readouterr().out
    assert main(["broker", "start", "--home", home]) == 0  # idempotent: already running
    out = capsys.readouterr().out
    assert "already running" in out and "INFERQ_KAFKA_SECURITY_PROTOCOL=SASL_SSL" in out
    material = secured_broker.security_material
    assert material is not None and not any(p in out for p in material.passwords.values())

    assert main(["broker", "env", "--home", home, "--user", ADMIN]) == 0
    exports = dict(
        line.removeprefix("export ").split("=", 1) for line in capsys.readouterr().out.splitlines()
    )
    assert exports["INFERQ_KAFKA_SASL_USERNAME"] == ADMIN
    prefix = f"c{uuid.uuid4().hex[:10]}"
    for name, value in exports.items():
        monkeypatch.setenv(name, value.strip("'"))
    monkeypatch.setenv("INFERQ_TOPIC_PREFIX", prefix)
    create_topics(KafkaSettings())
    assert main(["acls", "apply", "--dispatcher-group", f"{prefix}-dispatcher"]) == 0
    out = capsys.readouterr().out
    count = len(service_grants(KafkaSettings().topics, ServicePrincipals()))
    assert f"{count} ACLs in place" in out
    ingest = settings(secured_broker, "ingest", prefix)
    assert asyncio.run(produce(ingest, [(ingest.topics.requests(Tier.HIGH), b"via the CLI's ACLs")])) == [0]
