"""The local cluster as a user runs it: every node answers, topics are replicated three times with
min.insync.replicas=2, and an acks=all write goes on with one node down."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from inferq.messaging.admin import create_topics
from inferq.messaging.kafka_config import KafkaSettings
from inferq.tools.broker.cluster import LocalCluster

pytestmark = [pytest.mark.cluster, pytest.mark.kafka, pytest.mark.slow]


def test_every_node_is_a_live_broker_and_the_quorum_has_a_leader(kafka_cluster: LocalCluster) -> None:
    assert kafka_cluster.status().running
    assert kafka_cluster.brokers_seen() == {1, 2, 3}
    assert kafka_cluster.active_controller() in {1, 2, 3}


def test_topics_on_the_cluster_keep_three_copies_and_need_two(kafka_cluster: LocalCluster) -> None:
    settings = KafkaSettings(
        bootstrap_servers=kafka_cluster.bootstrap, topic_prefix=f"r{uuid.uuid4().hex[:8]}"
    )
    create_topics(settings)
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    metadata = admin.list_topics(timeout=10)
    for name in [*settings.topics.all_requests, settings.topics.results]:
        partitions = metadata.topics[name].partitions.values()
        assert {len(p.replicas) for p in partitions} == {3}, name
        resource = ConfigResource(ConfigResource.Type.TOPIC, name)
        configs = admin.describe_configs([resource])[resource].result(timeout=10)
        assert configs["min.insync.replicas"].value == "2", name


def test_an_acks_all_write_is_acknowledged_with_one_node_down(kafka_cluster: LocalCluster) -> None:
    """Two replicas in sync of three are enough for min.insync.replicas=2: a broker may die."""
    settings = KafkaSettings(
        bootstrap_servers=kafka_cluster.bootstrap, topic_prefix=f"w{uuid.uuid4().hex[:8]}"
    )
    create_topics(settings)
    topic = settings.topics.results
    follower = next(n for n in (1, 2, 3) if n != kafka_cluster.leader_of(topic, 0))
    outcomes: list[KafkaError | None] = []
    producer = Producer(settings.producer_config(client_id="cluster-test"))
    kafka_cluster.stop_node(follower)
    try:
        producer.produce(topic, b"v", partition=0, on_delivery=lambda err, _m: outcomes.append(err))
        assert producer.flush(30) == 0, "the write was neither acknowledged nor failed within 30 s"
    finally:
        kafka_cluster.start_node(follower)
    assert outcomes == [None], f"an acks=all write failed with one node of three down: {outcomes}"
