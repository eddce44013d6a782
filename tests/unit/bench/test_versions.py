"""bench/versions.py reads the headline figures out of the bench scripts' own lines."""

from __future__ import annotations

from bench.versions import figures

JOB = """\
round 1 drift job [summaries]          wall    9.4s fixed   3.0s    469,612 events/s
median over 2 rounds: read-parse-discard [summaries] 747,118 events/s = 56% of read-discard \
[summaries]'s 1,328,563/s; CPU per event 2.4 µs vs read-discard [summaries]'s 1.3 (+84%)
median over 2 rounds: drift job [summaries] 563,121 events/s = 75% of read-parse-discard \
[summaries]'s 747,118/s, 42% of read-discard [summaries]'s 1,328,563/s; CPU per event 3.3 µs \
vs read-parse-discard [summaries]'s 2.4 (+35%)
median over 2 rounds: drift job 141,020 events/s = 92% of read-parse-discard's 153,715/s; \
CPU per event 11.5 µs vs read-parse-discard's 9.1 (+26%)
"""

INGEST = """\
round 1:
  ingest over HTTP, 2 worker(s), 32 connections:   55,123 events/s (80% of plain), request \
p50 1.0 ms, p99 2.0 ms, peak RSS 100 MiB, 18.4 us CPU per event (3.0 in librdkafka's threads)
  ingest + summaries over HTTP, 2 worker(s), 32 connections:   41,002 events/s (60% of \
plain), request p50 1.0 ms, p99 2.0 ms, peak RSS 100 MiB, 21.0 us CPU per event (3.1 in \
librdkafka's threads)
medians over 1 round(s): plain producer 68,000 events/s
"""


def test_the_drift_jobs_medians_are_read_per_input_and_nothing_else() -> None:
    assert figures(JOB) == {
        "drift job [summaries]: events/s": 563_121,
        "drift job [summaries]: CPU-µs/event": 3.3,
        "drift job: events/s": 141_020,
        "drift job: CPU-µs/event": 11.5,
    }


def test_the_jit_share_of_a_job_line_gives_its_cpu_without_it() -> None:
    line = (
        "median over 1 rounds: drift job [summaries] 460,168 events/s = 60% of read-discard "
        "[summaries]'s 766,000/s; CPU per event 3.7 µs (JIT 0.9) vs read-discard [summaries]'s "
        "2.0 (JIT 0.3, +85%)"
    )
    found = figures(line)
    assert found["drift job [summaries]: CPU-µs/event"] == 3.7
    assert round(found["drift job [summaries]: CPU-µs/event without JIT"], 6) == 2.8
    assert found["drift job [summaries]: events/s"] == 460_168


def test_each_ingest_setup_is_read_with_and_without_summaries() -> None:
    found = figures(INGEST)
    assert found["ingest over HTTP, 2 worker(s), 32 connections: events/s"] == 55_123
    assert found["ingest + summaries over HTTP, 2 worker(s), 32 connections: CPU-µs/event"] == 21.0
    assert len(found) == 4


FLOORS = """\
round 1 read-discard [summaries]       wall    5.7s fixed   2.0s    799,317 events/s    \
2.0 CPU-µs/event (0.6 of it JIT)  logic/read+parse 0/129 samples = 0%
round 1 read-parse-discard [summaries] wall    6.8s fixed   2.1s    639,968 events/s    \
2.8 CPU-µs/event (0.5 of it JIT)  logic/read+parse 56/289 samples = 19%
round 1 drift job [summaries]          wall   10.0s fixed   3.8s    479,531 events/s    \
3.7 CPU-µs/event (1.0 of it JIT)  logic/read+parse 88/332 samples = 27%
round 2 read-discard [summaries]       wall    5.0s fixed   2.0s    900,000 events/s    \
1.6 CPU-µs/event (0.4 of it JIT)  logic/read+parse 0/120 samples = 0%
round 2 read-parse-discard [summaries] wall    6.0s fixed   2.1s    700,000 events/s    \
2.6 CPU-µs/event  logic/read+parse 50/280 samples = 18%
round 3 read-discard [summaries]       wall    6.0s fixed   2.0s    700,000 events/s    \
2.4 CPU-µs/event (0.8 of it JIT)  logic/read+parse 0/125 samples = 0%
"""


def test_the_floor_jobs_are_read_from_their_rounds_as_medians() -> None:
    found = figures(FLOORS)
    assert found["read-discard [summaries]: events/s"] == 799_317
    assert found["read-discard [summaries]: CPU-µs/event"] == 2.0
    assert round(found["read-discard [summaries]: CPU-µs/event without JIT"], 6) == 1.4
    assert found["read-parse-discard [summaries]: events/s"] == (639_968 + 700_000) / 2
    assert found["read-parse-discard [summaries]: CPU-µs/event"] == 2.7
    # Only one of its rounds gives the JIT's share: the median of that one.
    assert round(found["read-parse-discard [summaries]: CPU-µs/event without JIT"], 6) == 2.3
    # The drift job's figures come from its median line only (none here).
    assert not any(key.startswith("drift job") for key in found)
