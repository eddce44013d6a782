"""Port probe: the ingest and alerting services as the deployment runs them (`anchorwatch
ingest serve` with a gateway credentials file; `anchorwatch alerting serve` with
alerting.api_token, slack.signing_secret and a bot against the local Slack), probed as an
outsider would. Every TCP port each process listens on is read from the OS (psutil), and
every route each server has (read from its router, plus paths no service has) is sent every
method with a plausible body and no credentials, a wrong bearer token, the other service's
secret, or an unsigned, wrongly signed or stale Slack request.

Nothing may be writable: each state-changing request is refused, nothing reaches Kafka (the
snapshots and dead-letter topics are read), no silence is made, no Slack click is recorded.
What answers a stranger at all is an allow-list (``OPEN_BY_DESIGN``): a route added later
that answers without credentials fails this test until it is listed here with a reason.

Kafka and Flink are not probed: they are internals that the compose stack does not publish
(docs/deploy.md, "What is published"; `deploy/compose/publish-internals.yml` publishes them
on 127.0.0.1 only on request), and the Kafka client side is covered by test_kafka_sasl.py.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
import pytest
import requests
from click.testing import CliRunner

from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.fakes.slack_interactions import signed_headers
from anchorwatch.alerting.integrations.slack.render import ACK, SILENCE_1H, SILENCE_RESOLVED
from anchorwatch.alerting.service import list_incidents
from anchorwatch.alerting.store import FILENAME
from anchorwatch.cli.ingest import ingest
from anchorwatch.connectors.server import IngestService
from anchorwatch.contracts import SnapshotEvent, decode_snapshot, encode
from anchorwatch.demo.kong_entry import to_kong_entry
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.processes import free_port
from tests.support.alerting import POLICY, SLACK_TOKEN, lifecycle
from tests.support.alerting_kafka import produce, ready, service_config, service_env
from tests.support.ingest import GENERATED_AGE_S, ingest_settings, records
from tests.support.ingest import events as generated_events
from tests.support.port_probe import (
    READ_ONLY,
    UNKNOWN_PATHS,
    Answer,
    CliService,
    aiohttp_routes,
    alerting_paths,
    listening_ports,
    probe,
)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

API_TOKEN = "port-probe-api-token-0123456789"
SIGNING_SECRET = "port-probe-signing-secret-0123456789"
WRONG = "Bearer not-the-token-0123456789abcdef"

#: What answers a client without credentials, and why that is safe. Only these (with GET or
#: HEAD) may answer below 400; anything else that does fails the test.
OPEN_BY_DESIGN: dict[str, dict[str, str]] = {
    "ingest": {
        "/healthz": "liveness: a fixed body, no state, nothing written",
        "/readyz": "readiness: whether Kafka is reachable; reads nothing from the topics",
        "/metrics": "counts by format, reason, header and gateway name; no event content",
    },
    "alerting": {
        "/healthz": "liveness: whether the service's threads turn; nothing written",
        "/readyz": "readiness: state restored, partitions assigned; nothing written",
        "/metrics": "counters and gauges by doc type and integration; no incident content",
    },
}
#: A refusal: unauthenticated (401), forbidden (403), no such path (404), not a method of the
#: path (405), or a method the server does not implement at all (501, the stdlib server of
#: the alerting endpoint for PUT, PATCH, HEAD, OPTIONS).
REFUSED = frozenset({401, 403, 404, 405, 501})


@pytest.fixture
def slack() -> Iterator[LocalSlack]:
    with LocalSlack(token=SLACK_TOKEN) as server:
        yield server


def _gateway_token(path: Path) -> str:
    result = CliRunner().invoke(
        ingest,
        ["credentials", "add", "--gateway", "kong-a", "--doc-types", "*", "--file", str(path)],
    )
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def _ingest_env(job: JobSettings, port: int, credentials: Path) -> dict[str, str]:
    env = service_env({"kafka": {"bootstrap_servers": job.kafka.bootstrap_servers}})
    for name, topic in job.topics.model_dump().items():
        if topic:
            env[f"ANCHORWATCH_TOPICS__{name.upper()}"] = str(topic)
    env |= {
        "ANCHORWATCH_INGEST__PORT": str(port),
        "ANCHORWATCH_INGEST__CREDENTIALS_FILE": str(credentials),
        "ANCHORWATCH_INGEST__MAX_EVENT_AGE_S": str(GENERATED_AGE_S),
    }
    return env


def _ingest_paths(job: JobSettings, credentials: Path) -> set[str]:
    """The ingest service's routes, from its aiohttp router (GET, HEAD and POST ones)."""
    service = IngestService(
        ingest_settings(job, credentials_file=credentials, insecure_no_auth=False)
    )
    try:
        routes = aiohttp_routes(service.app())
    finally:
        service.producer.close(0)
    assert ("POST", "/v1/events") in routes, routes  # the router was read, not guessed
    return {path for _, path in routes}


def _click(action_id: str, incident_id: str) -> str:
    payload = {
        "type": "block_actions",
        "user": {"id": "U0PROBE", "username": "probe", "team_id": "T0LOCAL"},
        "actions": [{"type": "button", "action_id": action_id, "value": incident_id}],
    }
    return urlencode({"payload": json.dumps(payload)})


def _button(action_id: str, incident_id: str, _path: str) -> bytes:
    return _click(action_id, incident_id).encode()


def _ingest_credentials(
    method: str, path: str, body: bytes
) -> Iterable[tuple[str, Mapping[str, str]]]:
    yield "none", {}
    yield "wrong bearer", {"Authorization": WRONG}
    yield "the alerting API token", {"Authorization": f"Bearer {API_TOKEN}"}
    yield "basic auth", {"Authorization": "Basic a29uZy1hOmtvbmctYQ=="}


def _alerting_credentials(
    method: str, path: str, body: bytes
) -> Iterable[tuple[str, Mapping[str, str]]]:
    yield "none", {}
    yield "wrong bearer", {"Authorization": WRONG}
    text = body.decode()
    if path.startswith("/slack"):
        yield "unsigned", {"Content-Type": "application/x-www-form-urlencoded"}
        yield "signed with another secret", signed_headers("another-secret-0123456789", text)
        yield "signed, stale", signed_headers(SIGNING_SECRET, text, int(time.time()) - 600)
        yield "signature of another body", signed_headers(SIGNING_SECRET, text + "&x=1")


def _bodies(event: SnapshotEvent, incident_id: str) -> Callable[[str], bytes]:
    ndjson = encode(event.model_copy(update={"source": None}))
    kong = orjson.dumps(to_kong_entry(event))
    silence = orjson.dumps(
        {"doc_type": event.doc_type, "duration": "2h", "reason": "probe", "author": "probe"}
    )

    def body_for(path: str) -> bytes:
        if path.startswith("/v1/kong"):
            return kong
        if path.startswith("/v1/events"):
            return ndjson
        if path.startswith("/slack"):
            return _click(ACK, incident_id).encode()
        return silence if path.startswith("/api") else ndjson

    return body_for


def _check(service: str, answers: list[Answer], writes: set[str]) -> None:
    """Open only what is listed; every state-changing request refused; each write route
    refused for want of credentials (401/403), not for another reason."""
    open_paths = OPEN_BY_DESIGN[service]
    opened = [
        a
        for a in answers
        if a.status < 400 and not (a.method in ("GET", "HEAD") and a.path in open_paths)
    ]
    assert not opened, f"{service} answers a stranger:\n" + "\n".join(map(str, opened))
    writable = [a for a in answers if a.method not in READ_ONLY and a.status not in REFUSED]
    assert not writable, f"{service}: not refused:\n" + "\n".join(map(str, writable))
    for path in writes:
        posts = [a for a in answers if a.method == "POST" and a.path == path]
        assert posts, (service, path)
        assert all(a.status in (401, 403) for a in posts), "\n".join(map(str, posts))
    for path in open_paths:  # the allow-list is not stale: each entry answers
        assert any(a.path == path and a.status == 200 for a in answers), (service, path)


def test_the_check_fails_on_a_route_a_stranger_can_use() -> None:
    """A route added later that answers without credentials, or a write that is not
    refused, fails the probe: the open routes are an allow-list."""
    new_route = Answer(1, "GET", "/v1/debug", "none", 200, "")
    with pytest.raises(AssertionError, match="answers a stranger"):
        _check("ingest", [new_route], set())
    write = Answer(1, "PUT", "/healthz", "none", 400, "")
    with pytest.raises(AssertionError, match="not refused"):
        _check("ingest", [write], set())
    unauthenticated_failure = Answer(1, "POST", "/v1/events", "none", 400, "bad body")
    with pytest.raises(AssertionError):
        _check("ingest", [unauthenticated_failure], {"/v1/events"})


def test_no_port_of_either_service_takes_a_write_without_credentials(
    job_settings: JobSettings, slack: LocalSlack, tmp_path: Path
) -> None:
    job = job_settings
    credentials = tmp_path / "ingest-credentials.json"
    gateway_token = _gateway_token(credentials)
    ingest_port = free_port()
    state = tmp_path / "alerting-state"
    config = service_config(job, state, slack, None, api_token=API_TOKEN)
    config["slack"]["signing_secret"] = SIGNING_SECRET
    config["policy"] = POLICY
    event = generated_events()[0].model_copy(update={"event_id": "port-probe-event-1"})
    # An open incident, so that a click or a silence of it would have something to change.
    produce(job, lifecycle(event.doc_type)[:5])

    services = {
        "ingest": CliService(
            ["ingest", "serve"], _ingest_env(job, ingest_port, credentials), tmp_path / "i.log"
        ),
        "alerting": CliService(["alerting", "serve"], service_env(config), tmp_path / "a.log"),
    }
    try:
        ingest_url = f"http://127.0.0.1:{ingest_port}"
        try:
            wait_until(
                lambda: _status(f"{ingest_url}/readyz") == 200 and ready(config),
                60,
                "both services ready",
            )
            wait_until(lambda: bool(_open_incidents(state)), 60, "an open incident")
        except AssertionError as exc:
            logs = "\n".join(s.log.read_text()[-3000:] for s in services.values())
            raise AssertionError(f"{exc}\n{logs}") from None
        incident_id = _open_incidents(state)[0].row.incident_id

        # Every port, from the OS: exactly the configured ones, else a listener is unprobed.
        ports = {name: listening_ports(s.pid) for name, s in services.items()}
        assert ports == {
            "ingest": {ingest_port},
            "alerting": {config["alerting"]["metrics_port"]},
        }, "a listener the probe does not know: add its routes here"

        body_for = _bodies(event, incident_id)
        ingest_paths = _ingest_paths(job, credentials)
        alerting_paths_ = alerting_paths()
        answers = {
            "ingest": [
                a
                for port in ports["ingest"]
                for a in probe(
                    port, ingest_paths | set(UNKNOWN_PATHS), body_for, _ingest_credentials
                )
            ],
            "alerting": [
                a
                for port in ports["alerting"]
                for a in probe(
                    port,
                    alerting_paths_ | set(UNKNOWN_PATHS),
                    body_for,
                    _alerting_credentials,
                )
            ],
        }
        # The other buttons too, badly signed.
        for action in (SILENCE_1H, SILENCE_RESOLVED):
            answers["alerting"] += probe(
                config["alerting"]["metrics_port"],
                ["/slack/interactions"],
                functools.partial(_button, action, incident_id),
                _alerting_credentials,
                methods=("POST",),
            )
        _check("ingest", answers["ingest"], {"/v1/events", "/v1/kong"})
        _check("alerting", answers["alerting"], {"/api/v1/silences", "/slack/interactions"})

        # Nothing reached Kafka, nothing was silenced or acknowledged.
        assert records(job, job.topics.snapshots) == []
        assert records(job, job.topics.dead_letter) == []
        assert _silences(config) == []
        assert _slack_actions(state) == 0
        assert _open_incidents(state)[0].row.acked_by is None

        # The same requests with the right credentials do write: the refusals above were
        # for want of them, and the reads above would have seen what got through.
        written = requests.post(
            f"{ingest_url}/v1/events",
            data=body_for("/v1/events"),
            headers={"Authorization": f"Bearer {gateway_token}"},
            timeout=30,
        )
        assert written.status_code == 200, written.text
        assert written.json()["accepted"] == 1, written.text
        got = [decode_snapshot(m.value) for m in records(job, job.topics.snapshots) if m.value]
        assert [e.event_id for e in got] == [event.event_id]
        click = _click(ACK, incident_id)
        acked = requests.post(
            f"{_alerting_url(config)}/slack/interactions",
            data=click,
            headers=signed_headers(SIGNING_SECRET, click),
            timeout=10,
        )
        assert acked.status_code == 200, acked.text
        assert _slack_actions(state) == 1
        added = requests.post(
            f"{_alerting_url(config)}/api/v1/silences",
            data=body_for("/api/v1/silences"),
            headers={"Authorization": f"Bearer {API_TOKEN}"},
            timeout=10,
        )
        assert added.status_code == 201, added.text
        assert len(_silences(config)) == 1
    finally:
        for s in services.values():
            s.stop()


def _open_incidents(state: Path) -> list[Any]:
    try:
        return list_incidents(state, open_only=True, limit=5)
    except Exception:  # the state file is not made yet
        return []


def _status(url: str) -> int:
    try:
        return requests.get(url, timeout=2).status_code
    except requests.RequestException:
        return 0


def _alerting_url(config: dict[str, Any]) -> str:
    return f"http://127.0.0.1:{config['alerting']['metrics_port']}"


def _silences(config: dict[str, Any]) -> list[dict[str, Any]]:
    r = requests.get(
        f"{_alerting_url(config)}/api/v1/silences?all=1",
        headers={"Authorization": f"Bearer {API_TOKEN}"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    silences: list[dict[str, Any]] = r.json()["silences"]
    return silences


def _slack_actions(state: Path) -> int:
    db = sqlite3.connect(f"file:{state / FILENAME}?mode=ro", uri=True)
    try:
        (count,) = db.execute("SELECT count(*) FROM slack_actions").fetchone()
    finally:
        db.close()
    return int(count)
