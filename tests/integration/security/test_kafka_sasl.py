"""Kafka with SASL/SCRAM-SHA-512 over TLS, for real: a broker that only lets clients in on a
SASL_SSL listener (certificates made now, SCRAM users made by Kafka's own tools), and the
three deployables configured with nothing but the settings docs/deploy.md documents, as
environment variables. Snapshots go in through the ingest service, the drift job (PyFlink
on the embedded mini-cluster) judges them, and the alerting service consumes the verdicts
and writes its drift event. A wrong password and a CA the client does not trust stop the
Python services at start, naming the setting."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.service import AlertingService
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.contracts import decode_snapshot, encode
from anchorwatch.demo import slice as flow
from anchorwatch.jobs import drift_job
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import KafkaAccessError, read_topic
from anchorwatch.stack.jvm import fetch
from anchorwatch.stack.processes import free_port
from tests.support.alerting import POLICY
from tests.support.alerting_kafka import delivered_everything, drift_events, service_config
from tests.support.drift_job import event
from tests.support.ingest import GENERATED_AGE_S, serving
from tests.support.kafka_sasl import USER, Certificates, SaslBroker, make_certificates
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
#: The documented placeholders the test fills in: the password and the CA file.
PASSWORD_PLACEHOLDER, CA_PLACEHOLDER = "...", "/etc/anchorwatch/ca.pem"
#: The bounded drift job takes about a minute here; Flink restarts a failing source forever.
JOB_TIMEOUT_MS = 240_000
SECURITY_VARIABLES = ("ANCHORWATCH_KAFKA__CLIENT_PROPERTIES", "ANCHORWATCH_KAFKA__JAVA_PROPERTIES")


def documented(path: Path) -> dict[str, str]:
    """The Kafka security variables as ``path`` shows them (commented out or not)."""
    found = {}
    for line in path.read_text().splitlines():
        name, _, value = line.lstrip("# ").partition("=")
        if name in SECURITY_VARIABLES:
            found[name] = value
    return found


def documented_env(bootstrap: str, password: str, ca: Path) -> dict[str, str]:
    """docs/deploy.md's SASL_SSL settings, with only its placeholders filled in."""
    env = {"ANCHORWATCH_KAFKA__BOOTSTRAP_SERVERS": bootstrap}
    for name, value in documented(ROOT / "docs" / "deploy.md").items():
        properties = json.loads(value)
        env[name] = json.dumps(
            {
                k: v.replace(PASSWORD_PLACEHOLDER, password).replace(CA_PLACEHOLDER, str(ca))
                for k, v in properties.items()
            }
        )
    return env


class SaslKafka:
    def __init__(self, broker: SaslBroker, certificates: Certificates, password: str) -> None:
        self.broker, self.certificates, self.password = broker, certificates, password

    def env(self, *, password: str | None = None, ca: Path | None = None) -> dict[str, str]:
        return documented_env(
            self.broker.sasl_bootstrap, password or self.password, ca or self.certificates.ca_pem
        )


@pytest.fixture(scope="module")
def sasl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslKafka]:
    """One broker for the module: plaintext for the stack's readiness check, SASL_SSL with
    SCRAM-SHA-512 for everything the test runs."""
    state = tmp_path_factory.mktemp("sasl-kafka")
    certificates = make_certificates(state / "tls")
    password = secrets.token_hex(16)
    broker = SaslBroker(state / "kafka", "127.0.0.1", free_port(), free_port(), "512m", 4,
                        sasl_port=free_port(), certificates=certificates,
                        scram_password=password)  # fmt: skip
    artifacts, _ = fetch(JobSettings.load().jvm.cache_dir)
    broker.start(artifacts, timeout_s=120)
    try:
        yield SaslKafka(broker, certificates, password)
    finally:
        broker.stop()


@pytest.fixture
def secured(sasl_kafka: SaslKafka, monkeypatch: pytest.MonkeyPatch) -> Iterator[JobSettings]:
    """The documented variables in this process's environment, and job settings read from
    it, on topics of this test's own (created and deleted through SASL_SSL too)."""
    for name, value in sasl_kafka.env().items():
        monkeypatch.setenv(name, value)
    base = JobSettings.load()
    assert base.kafka.client_properties["security.protocol"] == "SASL_SSL"
    settings = base.model_copy(
        update={"topics": flow.run_scoped_topics(base.topics, flow.new_run_id())}
    )
    flow.create_topics(settings)
    yield settings
    flow.delete_topics(settings)


def test_env_example_shows_the_settings_the_docs_document() -> None:
    documented_in_deploy = documented(ROOT / "docs" / "deploy.md")
    assert set(documented_in_deploy) == set(SECURITY_VARIABLES)
    assert documented(ROOT / ".env.example") == documented_in_deploy
    client = json.loads(documented_in_deploy["ANCHORWATCH_KAFKA__CLIENT_PROPERTIES"])
    assert client["sasl.username"] == USER  # the user the broker's storage is formatted with


def _ingest_settings(job: JobSettings) -> IngestSettings:
    # Kafka comes from the environment alone; the test's topics and port are explicit.
    return IngestSettings.load(
        topics=job.topics.model_dump(),
        ingest={"port": 0, "max_event_age_s": GENERATED_AGE_S, "insecure_no_auth": True},
    )


def _alerting_settings(job: JobSettings, state: Path, slack: LocalSlack | None) -> AlertingSettings:
    config = service_config(job, state, slack, None)
    del config["kafka"]  # from the environment alone
    config["policy"] = POLICY
    return AlertingSettings.load(None, **config)


def test_snapshots_flow_to_verdicts_and_drift_events_over_sasl_ssl(
    secured: JobSettings, tmp_path: Path, slack: LocalSlack
) -> None:
    # Two minutes, each window critical under the static rule (no baseline): mean 0.95 over
    # 8 requests, above 0.9 and 6.
    start = (int(time.time() * 1000) // 60_000 - 10) * 60_000
    events = [event("sasl_doc", start + m * 60_000 + i * 5_000, 0.95, i)
              for m in range(2) for i in range(8)]  # fmt: skip
    body = b"".join(encode(e) + b"\n" for e in events)

    async def ingest() -> dict[str, object]:
        async with (
            serving(_ingest_settings(secured)) as (_, url),
            aiohttp.ClientSession() as http,
            http.post(f"{url}/v1/events", data=body) as r,
        ):
            assert r.status == 200, await r.text()
            answer: dict[str, object] = await r.json()
            return answer

    assert asyncio.run(ingest())["accepted"] == len(events)
    written = list(read_topic(secured.kafka, secured.topics.snapshots, timeout_s=30))
    assert sorted(decode_snapshot(m.value).event_id for m in written if m.value) == sorted(
        e.event_id for e in events
    )

    # One doc type, so one partition read in order: the job's own watermark delay holds.
    result = drift_job.run(secured, flow.fetch_artifacts(secured).flink_jobs_jar(), bounded=True)
    try:
        result.wait(JOB_TIMEOUT_MS)
    except Exception:  # Py4J's TimeoutException: a JVM client that cannot log in retries forever
        result.get_job_client().cancel().result()
        raise AssertionError(
            f"the drift job did not finish within {JOB_TIMEOUT_MS} ms: can its Kafka clients "
            "log in with kafka.java_properties? (Flink's log says)"
        ) from None
    verdicts = flow.read_verdicts(secured)
    windows = sorted(
        (v.window.window_start_ms, v.window.request_count)
        for v in verdicts
        if v.window.doc_type == "sasl_doc"
    )
    assert windows == [(start, 8), (start + 60_000, 8)]

    service = AlertingService(_alerting_settings(secured, tmp_path / "state", slack)).start()
    try:
        state = service.settings.alerting.state_dir
        wait_until(lambda: delivered_everything(state, len(verdicts)), 60, "the verdicts")
    finally:
        service.stop()
    alerts = [e for e in drift_events(secured) if e.event_type == "ANCHOR_DRIFT_ALERT"]
    assert [e.doc_type for e in alerts] == ["sasl_doc"]


def _refused_at_start(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, state: Path
) -> list[str]:
    """The start errors of both Python services with ``env`` as their environment."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    job = JobSettings.load()
    started = time.monotonic()

    async def ingest() -> None:
        async with serving(_ingest_settings(job)):
            raise AssertionError("the ingest service started")

    with pytest.raises(KafkaAccessError) as ingest_error:
        asyncio.run(ingest())
    alerting = AlertingService(_alerting_settings(job, state, None))
    with pytest.raises(KafkaAccessError) as alerting_error:
        alerting.start()
    # Refused as soon as the broker answered, not after librdkafka's endless retries.
    assert time.monotonic() - started < 10
    return [str(ingest_error.value), str(alerting_error.value)]


def test_a_wrong_password_stops_ingest_and_alerting_at_start_naming_it(
    sasl_kafka: SaslKafka, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    wrong = "not-" + secrets.token_hex(8)
    for error in _refused_at_start(sasl_kafka.env(password=wrong), monkeypatch, tmp_path):
        assert "kafka.client_properties.sasl.password" in error
        assert "ANCHORWATCH_KAFKA__CLIENT_PROPERTIES" in error
        assert "Authentication failed" in error  # librdkafka's reason, kept
        assert wrong not in error
        assert sasl_kafka.password not in error


def test_an_untrusted_certificate_stops_ingest_and_alerting_at_start_naming_the_ca(
    sasl_kafka: SaslKafka, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    other_ca = sasl_kafka.certificates.other_ca_pem
    for error in _refused_at_start(sasl_kafka.env(ca=other_ca), monkeypatch, tmp_path):
        assert "kafka.client_properties.ssl.ca.location" in error
        assert re.search(r"certificate verify failed", error)
        assert sasl_kafka.password not in error
