"""The local stack: pinned JVM artifacts, a KRaft Kafka of one or more nodes, a Flink session
cluster of one or more TaskManagers; and the handles a fault trial needs (a node's
``send_signal``, ``KafkaCluster.leader_of`` / ``wait_in_sync``, ``FlinkCluster.kill_taskmanager``,
``Stack.up`` to bring back what died)."""
