#!/opt/anchorwatch/bin/python
"""One-shot topic initialiser of the compose stack: create the project's topics with the
settings `anchorwatch stack up` gives them (anchorwatch.stack.topics, the one definition),
waiting for the broker first. Idempotent: existing topics are left as they are.

Reads the shared settings (ANCHORWATCH_KAFKA__*, ANCHORWATCH_TOPICS__*); prints one JSON
object with what it did; exit status 1 when the broker never answered.
"""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from anchorwatch.kafkaio import client_config
from anchorwatch.logs import configure
from anchorwatch.settings import ServiceSettings
from anchorwatch.stack.processes import StackError
from anchorwatch.stack.topics import ensure_topics

DEADLINE_S = 120


def main() -> int:
    configure("INFO")
    settings = ServiceSettings.load()
    admin = AdminClient(client_config(settings.kafka))
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            outcome = ensure_topics(admin, settings.topics)
            break
        except (KafkaException, StackError) as exc:
            # The broker's health check can pass a moment before its controller accepts
            # topic creation; retry until the deadline.
            if time.monotonic() > deadline:
                print(f"Kafka at {settings.kafka.bootstrap_servers}: {exc}", file=sys.stderr)
                return 1
            time.sleep(2)
    print(json.dumps({"bootstrap_servers": settings.kafka.bootstrap_servers, "topics": outcome}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
