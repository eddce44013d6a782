"""What the tests of alerting instances sharing the work (``alerting.work_split``) share:
verdicts produced on the partitions given, and who holds which partition's lease."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.leadership import read_leases
from anchorwatch.contracts import Verdict, encode
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config


def verdict_partitions(job: JobSettings) -> list[int]:
    admin = AdminClient(client_config(job.kafka))
    topic = admin.list_topics(job.topics.verdicts, timeout=10).topics[job.topics.verdicts]
    return sorted(topic.partitions)


def produce_on(job: JobSettings, placed: Iterable[tuple[int, Verdict]]) -> int:
    """Each verdict on the partition given (a doc type always on the same one, as the drift
    job's keying has it), keyed by its doc type. Returns how many."""
    producer = Producer(client_config(job.kafka, **{"enable.idempotence": True, "acks": "all"}))
    n = 0
    for partition, v in placed:
        key = v.window.doc_type.encode()
        producer.produce(job.topics.verdicts, encode(v), key, partition=partition)
        n += 1
    assert producer.flush(30) == 0
    return n


def holders(location: StateLocation) -> dict[str, str]:
    """Partition lease -> holder, for the leases held now."""
    return {
        lease.name: lease.holder
        for lease in read_leases(location)
        if lease.name.startswith("verdicts-") and lease.expires_in_ms > 0
    }


def held_by(location: StateLocation, partitions: list[int], instances: int) -> bool:
    """Every partition held, by ``instances`` distinct holders."""
    held = holders(location)
    return len(held) == len(partitions) and len(set(held.values())) == instances
