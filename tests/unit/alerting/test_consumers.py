"""The verdict consumer's librdkafka settings: a bounded prefetch unless the user sets one."""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError

from anchorwatch.alerting.consumers import PREFETCH_KIB, verdict_consumer_config
from anchorwatch.alerting.settings import AlertingSettings


def _ignore(_error: KafkaError) -> None:
    pass


def test_the_prefetch_is_bounded_and_the_user_may_set_it() -> None:
    ours = verdict_consumer_config(AlertingSettings.load(), _ignore)
    assert ours["queued.max.messages.kbytes"] == PREFETCH_KIB < 65536  # librdkafka's default
    assert ours["enable.auto.commit"] is False
    theirs = verdict_consumer_config(
        AlertingSettings.load(
            kafka={"client_properties": {"queued.max.messages.kbytes": "1024", "client.id": "x"}}
        ),
        _ignore,
    )
    assert theirs["queued.max.messages.kbytes"] == "1024"
    assert theirs["client.id"] == "x"
    Consumer(theirs).close()  # librdkafka takes the configuration as it is
