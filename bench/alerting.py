"""Alerting service: notification latency (verdict produced, and consumed, -> local Slack
received) and verdict throughput, for each SQLite sync mode, alternating in one run.

Starts a private Kafka on free ports (or uses --bootstrap) and the local Slack and Jira in
this process, and runs `anchorwatch alerting serve` as its own process per configuration:

The state is SQLite files per --sync mode, and with --postgresql also a database of a
private PostgreSQL server (the state several instances share, alerting.state_url), a fresh
one per run, measured in the same rounds as the SQLite modes.

1. latency: --incidents doc types each open one incident (a critical window opens at
   once), one every --spacing seconds: above Slack's per-channel rate, so nothing waits
   behind the rate limit. For each, from producing the verdict (the clock starts before
   produce() and spans the broker's acknowledgement), and from the service consuming it
   (its outbox row), to the local Slack receiving the parent message (the server's clock;
   same machine). Jira and drift events are on too. An incident whose Slack parent has
   not arrived --timeout seconds after the last verdict was produced (or that never
   opened) is a miss: it counts in the quantiles as +infinity, and the misses are counted.
2. throughput: --types doc types x --windows windows produced beforehand (every
   --drifting-every-th type drifts: incidents, all open at once, and notifications), then
   verdicts/s from the service being ready to the last one decided and committed; then the
   wait for every incident's Slack parent (the queue drains at alerting.slack_rate_per_s per
   channel, --slack-rate, and slack_workspace_rate_per_s over all, --workspace-rate; the
   drifting types are routed round-robin to --channels channels, doc_type_channels); peak
   RSS of the service and the size of its state files. A drifting type whose Slack parent
   never arrived (within an hour) counts as a miss (+infinity) there too.
3. --week-types N: a simulated week of N types (one incident per type a day) through the
   engine in this process: the size of the state files after a week.

    .venv/bin/python -m bench.alerting --incidents 40 --types 1000 --windows 20
    .venv/bin/python -m bench.alerting --incidents 0 --types 10000 --windows 30 \
        --drifting-every 10 --slack-rate 50 --sync FULL      # 1,000 incidents at once
    .venv/bin/python -m bench.alerting --incidents 0 --types 10000 --windows 30 \
        --drifting-every 10 --channels 20 --sync FULL        # over 20 channels, default rates
    .venv/bin/python -m bench.alerting --types 10000 --windows 30 --incidents 0 \
        --sync FULL --postgresql          # SQLite against PostgreSQL, side by side
    .venv/bin/python -m bench.alerting --week-types 100

Rounds: first --warmup-rounds (default 1) runs of 1 and 2 for each sync mode, the same
runs as the measured ones, whose figures are printed marked "not counted" and left out of
every median (the broker's JVM, the page cache and the service's first start warm up
there); then --rounds (default 3) rounds, each running 1 and 2 once for every sync mode,
the order of the modes reversed every other round (FULL, NORMAL; NORMAL, FULL; ...) so that
neither always runs first. Each round's figures are printed as it ends, and at the end, per
mode, the medians over the rounds of each round's p50, p99 and verdicts/s, with the
per-round values and the misses of all rounds.

The verdicts, the settings as environment and the service process are the alerting
tests' own (tests/support/), so the bench measures what the tests check.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Final

import psutil
import requests
from confluent_kafka import Producer
from pydantic import SecretStr

from anchorwatch.alerting.database import Database, StateLocation
from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.store import Store
from anchorwatch.contracts import encode
from anchorwatch.demo.journey_processes import answers
from anchorwatch.demo.slice import private_topics
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config
from anchorwatch.stack.postgres import PostgresServer
from anchorwatch.stack.processes import free_port
from anchorwatch.stack.stack import private_kafka
from bench.quantiles import MISS, misses, ms, quantile, summary
from tests.support.alerting import POLICY, SLACK_TOKEN, verdict
from tests.support.alerting_kafka import ServiceProcess, service_env
from tests.support.waiting import wait_until


class TimedSlack(LocalSlack):
    """The local Slack, noting when each message arrived (by its ts)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.received: dict[str, float] = {}

    def _post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        result = super()._post_message(params)
        if result.get("ok"):
            self.received[str(result["ts"])] = time.time()
        return result


broker = private_kafka

#: The mode that keeps the state in PostgreSQL instead of SQLite files.
POSTGRESQL: Final = "postgresql"
_databases = itertools.count()


def state_place(
    mode: str, directory: Path, server: PostgresServer | None
) -> tuple[StateLocation, dict[str, Any]]:
    """Where one run keeps its state, and the service's settings for it: SQLite files in
    ``directory``, or (``POSTGRESQL``) a fresh database of ``server``, its password in a
    file of the run's own."""
    if mode != POSTGRESQL:
        return StateLocation(directory), {"state_dir": directory}
    assert server is not None
    directory.mkdir(parents=True, exist_ok=True)
    url = server.new_database(f"bench_{next(_databases)}")
    secret = directory / "state-password"
    secret.write_text(server.password + "\n")
    secret.chmod(0o600)
    location = StateLocation(directory, url, SecretStr(server.password))
    return location, {"state_dir": directory, "state_url": url, "state_password_file": secret}


@contextmanager
def service(
    job: JobSettings,
    state: Path,
    slack: LocalSlack,
    jira: LocalJira,
    sync: str,
    slack_rate: float | None = None,
    workspace_rate: float | None = None,
    channels: dict[str, str] | None = None,
    alerting: dict[str, Any] | None = None,
) -> Iterator[tuple[psutil.Process, str]]:
    """The service as its own process (``alerting``: more of its settings)."""
    port = free_port()
    rates = {
        name: rate
        for name, rate in (("slack_rate_per_s", slack_rate),
                           ("slack_workspace_rate_per_s", workspace_rate))
        if rate is not None
    }  # fmt: skip
    env = service_env({
        "kafka": {"bootstrap_servers": job.kafka.bootstrap_servers},
        "topics": dict(job.topics),
        "alerting": {"state_dir": state, "start_offset": "earliest", "metrics_port": port,
                     **({} if sync == POSTGRESQL else {"sqlite_synchronous": sync}),
                     **rates, **(alerting or {})},
        "slack": {"mode": "bot", "api_url": slack.api_url, "bot_token": SLACK_TOKEN},
        "routing": {"doc_type_channels": channels or {}},
        "jira": {"enabled": True, "url": jira.url},
        # One critical window opens an incident (the default policy waits for two): the
        # latency timed is the service's, from the verdict that opens it.
        "policy": POLICY,
    })  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    log = state.parent / f"service-{state.name}.log"
    process = ServiceProcess(env, log)
    try:
        ready = f"{url}/readyz"
        wait_until(lambda: answers(ready) or process.process.poll() is not None, 60, ready)
        if process.process.poll() is not None:
            raise SystemExit(f"the service exited before it was ready; see {log}")
        yield psutil.Process(process.pid), url
    finally:
        process.stop()


def decided(url: str) -> float:
    total = 0.0
    # Generous: with thousands of types the page holds tens of thousands of series.
    for line in requests.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("anchorwatch_alerting_verdicts_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def opened(
    state: Path | StateLocation,
) -> tuple[dict[str, float], dict[str, tuple[str, str | None]]]:
    """From the service's state: when the verdict that opened each incident was consumed,
    and each incident's doc type and Slack parent (its ts)."""
    store = Store(state, create=False)
    try:
        consumed = {
            r["incident_id"]: r["consumed_ms"] / 1000
            for r in store.outbox_rows()
            if r["integration"] == "slack" and r["action"] == "open"
        }
        parents = {
            i.row.incident_id: (i.row.doc_type, i.refs.slack_ts)
            for i in store.list_incidents(open_only=False, limit=100_000)
        }
    finally:
        store.close()
    return consumed, parents


def latency(
    job: JobSettings,
    root: Path,
    sync: str,
    incidents: int,
    spacing: float,
    timeout: float,
    label: str,
    server: PostgresServer | None = None,
) -> dict[str, list[float]]:
    """One latency run; returns the samples in seconds (misses as +inf) by what they span."""
    with TimedSlack(token=SLACK_TOKEN) as slack, LocalJira() as jira:
        state = root / f"latency-{sync}-{label.replace(' ', '')}"
        location, place = state_place(sync, state, server)
        producer = Producer(client_config(job.kafka, **{"enable.idempotence": True, "acks": "all"}))
        with service(job, state, slack, jira, sync, alerting=place):
            produced: dict[str, float] = {}
            for i in range(incidents):
                doc = f"{sync.lower()}-latency-{i:03d}"
                # The clock starts before produce(): it spans the broker's acknowledgement.
                produced[doc] = time.time()
                producer.produce(
                    job.topics.verdicts,
                    encode(verdict(doc, 0, 0.95, job_version="bench")),
                    doc.encode(),
                )
                producer.flush(10)
                time.sleep(spacing)
            deadline = time.monotonic() + timeout
            while len(slack.received) < incidents and time.monotonic() < deadline:
                time.sleep(0.05)
            cutoff = time.time()  # a parent arriving later (while stopping) is a miss
        consumed, parents = opened(location)
    # Per verdict produced, not per incident found: one that never opened an incident, or
    # whose Slack parent never arrived, is a miss (+inf), not left out.
    by_doc = {doc: (incident_id, ts) for incident_id, (doc, ts) in parents.items()}
    from_produced, from_consumed = [], []
    for doc, sent in produced.items():
        incident_id, ts = by_doc.get(doc, ("", None))
        arrived = slack.received.get(ts) if ts is not None else None
        if arrived is None or arrived > cutoff:
            from_produced.append(MISS)
            from_consumed.append(MISS)
            continue
        from_produced.append(arrived - sent)
        at = consumed.get(incident_id)
        from_consumed.append(arrived - at if at is not None else MISS)
    print(
        f"{label} latency, {sync:6} {len(produced)} incidents (a Slack parent not received "
        f"{timeout:g} s after the last verdict was produced is a miss):",
        flush=True,
    )
    print(f"    verdict produced -> Slack received   {summary(from_produced)}")
    print(f"    verdict consumed -> Slack received   {summary(from_consumed)}", flush=True)
    return {"produced": from_produced, "consumed": from_consumed}


def state_bytes(state: Path | StateLocation) -> int:
    """The service's SQLite files (state, refit history) with their write-ahead logs, or
    its PostgreSQL database's size."""
    if isinstance(state, StateLocation) and state.shared:
        db = Database(state, filename="", schema="public", create=False)
        try:
            return int(db.execute("SELECT pg_database_size(current_database())").fetchone()[0])
        finally:
            db.close()
    directory = state.directory if isinstance(state, StateLocation) else state
    return sum(p.stat().st_size for p in directory.glob("*.sqlite3*"))


def throughput(
    job: JobSettings,
    root: Path,
    sync: str,
    types: int,
    windows: int,
    drifting_every: int,
    slack_rate: float | None,
    workspace_rate: float | None,
    channels: int,
    label: str,
    server: PostgresServer | None = None,
) -> dict[str, Any]:
    """One throughput run; returns its figures (the Slack waits in seconds, misses +inf)."""
    drifting = {f"t{i:05d}" for i in range(0, types, drifting_every)}
    routes = {doc: f"#drift-{n % channels:03d}" for n, doc in enumerate(sorted(drifting))}
    names = [f"t{i:05d}" for i in range(types)]
    records = [
        (
            doc.encode(),
            encode(
                verdict(
                    doc, m, 0.95 if doc in drifting and 3 <= m < 8 else 0.4, job_version="bench"
                )
            ),
        )
        for m in range(windows)
        for doc in names
    ]
    producer = Producer(
        client_config(job.kafka, **{"enable.idempotence": True, "acks": "all", "linger.ms": 20})
    )
    state = root / f"throughput-{sync}-{label.replace(' ', '')}"
    location, place = state_place(sync, state, server)
    with (
        TimedSlack(token=SLACK_TOKEN) as slack,
        LocalJira() as jira,
        service(
            job,
            state,
            slack,
            jira,
            sync,
            slack_rate,
            workspace_rate,
            routes if channels > 1 else None,
            alerting=place,
        ) as (proc, url),
    ):
        # From the first verdict produced to the last one decided and committed.
        started = time.monotonic()
        for key, value in records:
            while True:
                try:
                    producer.produce(job.topics.verdicts, value, key)
                    break
                except BufferError:
                    producer.poll(0.1)
        assert producer.flush(60) == 0
        peak = proc.memory_info().rss
        while decided(url) < len(records):
            peak = max(peak, proc.memory_info().rss)
            time.sleep(0.5)
        took = time.monotonic() - started
        peak = max(peak, proc.memory_info().rss)
        # Every incident's Slack parent: the queue drains at the Slack rate.
        queue_started = time.monotonic()
        while len(slack.received) < len(drifting) and time.monotonic() - queue_started < 3600:
            peak = max(peak, proc.memory_info().rss)
            time.sleep(0.5)
    n = len(records)
    size = state_bytes(location)
    print(
        f"{label} throughput, {sync:6} {n:,} verdicts of {types:,} types in {took:5.2f} s: "
        f"{n / took:8,.0f} verdicts/s, peak RSS {peak / 2**20:.0f} MiB, "
        f"state {size / 2**20:.1f} MiB",
        flush=True,
    )
    consumed, parents = opened(location)
    # Per incident opened, and a miss (+inf) for each drifting type that opened none: a
    # Slack parent that never arrived counts, it is not left out.
    waits = []
    for incident_id, (_, ts) in parents.items():
        arrived = slack.received.get(ts) if ts is not None else None
        at = consumed.get(incident_id)
        waits.append(arrived - at if arrived is not None and at is not None else MISS)
    waits += [MISS] * len(drifting - {doc for doc, _ in parents.values()})
    if waits:
        print(
            f"    {len(parents):,} incidents open at once ({len(drifting):,} drifting types), "
            f"Slack parents in {channels} channel(s): "
            f"verdict consumed -> Slack received {summary(waits)}",
            flush=True,
        )
    return {"verdicts_per_s": n / took, "peak_rss": peak, "state": size, "waits": waits}


def week(types: int, days: float) -> None:
    """A simulated week (``days``) of ``types`` doc types, one window a minute each and one
    10-minute incident per type a day, through the service's engine in this process (no
    Kafka, no senders: the state is what matters): the size of the state files after it."""
    from prometheus_client import CollectorRegistry

    from anchorwatch.alerting.engine import Engine, RawMessage
    from anchorwatch.alerting.notify import ManualClock
    from anchorwatch.alerting.refit_rows import StoredRows
    from anchorwatch.alerting.service_metrics import ServiceMetrics
    from anchorwatch.alerting.settings import AlertingSettings
    from anchorwatch.policy.refit import RefitHistory, RefitSchedule
    from tests.support.alerting import T0

    minutes = int(days * 1440)
    names = [f"w{i:05d}" for i in range(types)]
    # Each type drifts for 10 minutes once a day, at a minute of its own.
    burst_at = {d: (i * 137) % 1430 for i, d in enumerate(names)}
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        settings = AlertingSettings.load(alerting={"state_dir": state}, policy=POLICY)
        a = settings.alerting
        clock = ManualClock(T0 / 1000)
        engine = Engine(
            settings, Store(state), ServiceMetrics(CollectorRegistry()),
            ["slack", "jira", "events"], clock=clock,
            refit=RefitHistory(
                RefitSchedule(a.refit_interval_s * 1000, a.refit_history_s * 1000,
                              a.refit_min_windows),
                StoredRows(state),
            ),
        )  # fmt: skip
        process = psutil.Process()
        peak = offset = 0
        started = time.monotonic()
        for m in range(minutes):
            clock.now = T0 / 1000 + (m + 1) * 60 + 5
            messages = []
            for d in names:
                burst = 0 <= m % 1440 - burst_at[d] < 10
                mean = 0.95 if burst else 0.35 + ((burst_at[d] + 37 * m) % 100) / 1000
                messages.append(
                    RawMessage("verdicts", 0, offset, encode(verdict(d, m, mean, job_version="w")))
                )
                offset += 1
            for i in range(0, len(messages), a.batch_max):
                engine.process(messages[i : i + a.batch_max], int(clock() * 1000))
            if m % 1440 == 1439:
                engine.prune(int((clock() - a.retention_days * 86_400) * 1000))
                peak = max(peak, process.memory_info().rss)
                print(
                    f"  day {(m + 1) // 1440}: state {state_bytes(state) / 2**20:,.1f} MiB "
                    f"({time.monotonic() - started:,.0f} s)",
                    flush=True,
                )
        peak = max(peak, process.memory_info().rss)
        incidents = len(engine.store.list_incidents(open_only=False, limit=10**8))
        engine.close()
        files = {p.name: p.stat().st_size for p in sorted(state.glob("*.sqlite3*"))}
        unpacked = _refit_as_rows(state, names, Path(tmp) / "rows")
    total = sum(files.values())
    print(
        f"  {days:g} days of {types:,} types ({offset:,} verdicts, {incidents:,} incidents): "
        f"state {total / 2**20:,.1f} MiB, {total / types / 2**20:.2f} MiB per type "
        f"({', '.join(f'{n} {b / 2**20:,.1f}' for n, b in files.items())}); "
        f"peak RSS {peak / 2**20:.0f} MiB; the same refit windows a row each (as before "
        f"hours were packed): {unpacked / 2**20:,.1f} MiB"
    )


def _refit_as_rows(state: Path, doc_types: list[str], into: Path) -> int:
    """The size of the refit history's windows written a row each, none packed."""
    from anchorwatch.alerting.refit_rows import FILENAME, StoredRows

    packed, rows = StoredRows(state), StoredRows(into, pack_hours=False)
    for doc_type in doc_types:
        for row in packed.rows(doc_type, 0):
            rows.put(doc_type, row)
        rows.flush()
    packed.close()
    rows.close()
    return sum(p.stat().st_size for p in into.glob(FILENAME + "*"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Alerting service, per SQLite sync mode: notification latency (verdict "
        "produced, and consumed, -> local Slack received; incidents never received count as "
        "+inf misses) and verdict throughput (verdicts/s, peak RSS, state size), after "
        "--warmup-rounds untimed runs of each mode, over --rounds rounds alternating the "
        "modes; per-round figures and medians over the rounds. Or --week-types: the state "
        "size after a simulated week.",
    )
    parser.add_argument("--incidents", type=int, default=40, help="incidents timed (latency)")
    parser.add_argument("--spacing", type=float, default=1.2, help="seconds between incidents")
    parser.add_argument(
        "--timeout", type=float, default=60.0,
        help="latency: seconds after the last verdict is produced to wait for the rest; an "
        "incident whose Slack parent has not arrived by then is a miss, counted as +inf",
    )  # fmt: skip
    parser.add_argument(
        "--rounds", type=int, default=3,
        help="measured rounds, each running every sync mode once, the order reversed every "
        "other round",
    )  # fmt: skip
    parser.add_argument(
        "--warmup-rounds", type=int, default=1,
        help="untimed runs of each sync mode (the same runs) before the measured rounds",
    )  # fmt: skip
    parser.add_argument("--types", type=int, default=1000, help="doc types (throughput)")
    parser.add_argument("--windows", type=int, default=20, help="windows per type (throughput)")
    parser.add_argument(
        "--drifting-every", type=int, default=50,
        help="every n-th type drifts and opens an incident (throughput; 50: 2%%)",
    )  # fmt: skip
    parser.add_argument(
        "--slack-rate", type=float,
        help="alerting.slack_rate_per_s, per channel, for the throughput run (default: the "
        "service's, 1/s); also the workspace rate unless --workspace-rate is given",
    )  # fmt: skip
    parser.add_argument(
        "--workspace-rate", type=float,
        help="alerting.slack_workspace_rate_per_s (default: --slack-rate if given, else the "
        "service's, 20/s)",
    )  # fmt: skip
    parser.add_argument(
        "--channels", type=int, default=1,
        help="Slack channels the drifting types are routed to, round-robin (throughput)",
    )  # fmt: skip
    parser.add_argument(
        "--sync", choices=("FULL", "NORMAL", "both"), default="both", help="SQLite sync modes"
    )
    parser.add_argument(
        "--week-types", type=int, default=0,
        help="instead: a simulated week of this many types through the engine (state size)",
    )  # fmt: skip
    parser.add_argument("--week-days", type=float, default=7.0, help=argparse.SUPPRESS)
    parser.add_argument(
        "--postgresql", action="store_true",
        help="also keep the state in PostgreSQL (a private server, a fresh database per run), "
        "as a mode of its own in the same rounds",
    )  # fmt: skip
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    args = parser.parse_args()
    if args.week_types:
        week(args.week_types, args.week_days)
        return
    print("load average (1, 5, 15 min) at the start: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    modes: tuple[str, ...] = ("FULL", "NORMAL") if args.sync == "both" else (args.sync,)
    modes += (POSTGRESQL,) if args.postgresql else ()
    rounds: dict[str, list[dict[str, Any]]] = {sync: [] for sync in modes}
    with (
        broker(args.bootstrap) as bootstrap,
        tempfile.TemporaryDirectory() as tmp,
        PostgresServer(Path(tmp) / "postgres") if args.postgresql else nullcontext() as server,
    ):
        root = Path(tmp)
        base = JobSettings.load(kafka={"bootstrap_servers": bootstrap})

        def run(sync: str, label: str) -> dict[str, Any]:
            figures: dict[str, Any] = {}
            # Each measurement on topics of its own: nothing earlier to skip.
            if args.incidents > 0:
                with private_topics(base) as job:
                    figures |= latency(
                        job, root, sync, args.incidents, args.spacing, args.timeout, label, server
                    )
            with private_topics(base) as job:
                figures |= throughput(
                    job, root, sync, args.types, args.windows, args.drifting_every,
                    args.slack_rate,
                    args.workspace_rate if args.workspace_rate is not None else args.slack_rate,
                    args.channels, label, server,
                )  # fmt: skip
            return figures

        for w in range(1, args.warmup_rounds + 1):
            for sync in modes:
                run(sync, f"warm-up {w} (not counted)")
        for r in range(1, args.rounds + 1):
            for sync in modes if r % 2 else modes[::-1]:
                rounds[sync].append(run(sync, f"round {r}"))
    for sync in modes:
        report(sync, rounds[sync])


def report(sync: str, rounds: list[dict[str, Any]]) -> None:
    """Per sync mode: the medians over the rounds of each round's figures."""
    if not rounds:
        return

    def median_of(key: str, p: float) -> str:
        per_round = [quantile(r[key], p) for r in rounds]
        each = ", ".join(ms(v).strip() for v in per_round)
        return f"{ms(statistics.median(per_round)).strip()} ({each})"

    print(f"median over {len(rounds)} rounds, {sync} (each figure's per-round values in brackets):")
    if "produced" in rounds[0]:
        for key in ("produced", "consumed"):
            lost = [misses(r[key]) for r in rounds]
            print(
                f"  latency, verdict {key} -> Slack received: p50 {median_of(key, 0.5)}, "
                f"p99 {median_of(key, 0.99)}; missed {sum(lost)} of "
                f"{sum(len(r[key]) for r in rounds)} (counted as +inf)"
            )
    rates = [r["verdicts_per_s"] for r in rounds]
    print(
        f"  throughput: {statistics.median(rates):,.0f} verdicts/s "
        f"({', '.join(f'{v:,.0f}' for v in rates)}), peak RSS max "
        f"{max(r['peak_rss'] for r in rounds) / 2**20:.0f} MiB, state median "
        f"{statistics.median(r['state'] for r in rounds) / 2**20:.1f} MiB"
    )
    if any(r["waits"] for r in rounds):
        missed = sum(misses(r["waits"]) for r in rounds)
        print(
            f"  throughput's Slack parents, verdict consumed -> Slack received: "
            f"p50 {median_of('waits', 0.5)}, p99 {median_of('waits', 0.99)}; missed {missed} "
            f"of {sum(len(r['waits']) for r in rounds)} (counted as +inf)",
            flush=True,
        )


if __name__ == "__main__":
    main()
