"""Connectors: gateway logs into the snapshots topic, validated, rejects dead-lettered."""
