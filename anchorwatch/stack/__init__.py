"""The local stack: pinned JVM artifacts, a KRaft Kafka broker, a Flink session cluster."""
