"""Every producer of the services writes with acks=all and idempotence, on one broker or a cluster:
a 202 or an outcome means the write is on every in-sync replica (at least min.insync.replicas)."""

from __future__ import annotations

import pytest

from inferq.messaging.kafka_config import KafkaSettings


def test_producers_wait_for_every_in_sync_replica() -> None:
    conf = KafkaSettings(bootstrap_servers="a:1,b:2,c:3").producer_config(client_id="x")
    assert conf["acks"] == "all"
    assert conf["enable.idempotence"] is True
    assert conf["bootstrap.servers"] == "a:1,b:2,c:3"


@pytest.mark.parametrize(
    "extra", [{"acks": "1"}, {"enable.idempotence": "false"}, {"acks": "0", "enable.idempotence": "false"}]
)
def test_the_pass_through_cannot_weaken_durability(extra: dict[str, str]) -> None:
    conf = KafkaSettings(extra=extra).producer_config(client_id="x")
    assert (conf["acks"], conf["enable.idempotence"]) == ("all", True)
