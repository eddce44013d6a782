"""Flink jobs: the per-doc-type drift windows and the baseline fitting."""
