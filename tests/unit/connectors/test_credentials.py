"""Gateway credentials without a broker: the file's checks, the CLI's round trip, the
watcher's reloads, scopes and the source check (the service with Kafka:
tests/integration/connectors/test_gateways.py)."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import pytest
from aiohttp.test_utils import make_mocked_request
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from anchorwatch.cli.ingest import ingest
from anchorwatch.connectors import credentials as creds
from anchorwatch.connectors.gate import Gate, client_cert_cn, other_source
from anchorwatch.connectors.http_limits import TokenBucket
from anchorwatch.connectors.metrics import IngestMetrics
from anchorwatch.connectors.server import IngestService, tls_context
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.contracts import encode
from anchorwatch.settings import SettingsError
from anchorwatch.stack.processes import free_port
from tests.support.ingest import events


def run(*args: str) -> Any:
    return CliRunner().invoke(ingest, ["credentials", *args])


def test_add_list_revoke_round_trip_stores_digests_only_in_a_0600_file(tmp_path: Path) -> None:
    path = tmp_path / "gw" / "credentials.json"
    first = run("add", "--gateway", "kong-a", "--doc-types", "invoice, med_*", "--rate", "5",
                "--file", str(path))  # fmt: skip
    second = run("add", "--gateway", "kong-a", "--secret-expires", "30d", "--file", str(path))
    assert first.exit_code == second.exit_code == 0, first.output + second.output
    tokens = [first.stdout.strip(), second.stdout.strip()]
    assert all(t.startswith("awg_") and len(t) > 40 for t in tokens)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = path.read_text()
    assert not any(t in text for t in tokens)
    file = creds.read(path)
    entry = file.gateways["kong-a"]
    assert entry.doc_types == ["invoice", "med_*"]
    assert entry.rate == creds.RateLimit(per_s=5, burst=10, unit="requests")
    assert [s.sha256 for s in entry.secrets] == [creds.digest_hex(t) for t in tokens]
    assert entry.secrets[0].expires is None
    assert entry.secrets[1].expires is not None

    listed = run("list", "--file", str(path))
    assert listed.exit_code == 0
    assert "kong-a: doc types invoice,med_*; rate 5 requests/s, burst 10" in listed.output
    assert all(f"secret {s.id}" in listed.output for s in entry.secrets)
    assert not any(s.sha256 in listed.output for s in entry.secrets)

    gone = run("revoke", "--gateway", "kong-a", "--secret-id", entry.secrets[0].id,
               "--file", str(path))  # fmt: skip
    assert gone.exit_code == 0, gone.output
    assert [s.id for s in creds.read(path).gateways["kong-a"].secrets] == [entry.secrets[1].id]
    assert run("revoke", "--gateway", "kong-a", "--file", str(path)).exit_code == 0
    assert creds.read(path).gateways == {}


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--gateway", "Bad Name", "--doc-types", "x"], "--gateway"),
        (["--gateway", "a", "--doc-types", "x,,y"], "--doc-types"),
        (["--gateway", "a"], "--doc-types"),
        (["--gateway", "a", "--doc-types", "x", "--rate", "0"], "--rate"),
        (["--gateway", "a", "--doc-types", "x", "--expires", "soon"], "--expires"),
        (["--gateway", "a", "--doc-types", "x", "--expires", "2001-01-01"], "--expires"),
        (["--gateway", "default", "--doc-types", "x"], "gateways.default"),
    ],
)
def test_add_refuses_bad_input_naming_the_option(
    tmp_path: Path, args: list[str], named: str
) -> None:
    path = tmp_path / "credentials.json"
    result = run("add", *args, "--file", str(path))
    assert result.exit_code != 0
    assert named in result.output
    assert not path.exists()


def test_revoke_of_an_unknown_secret_names_the_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    assert run("add", "--gateway", "a", "--doc-types", "x", "--file", str(path)).exit_code == 0
    (secret,) = creds.read(path).gateways["a"].secrets
    result = run("revoke", "--gateway", "a", "--secret-id", "nope", "--file", str(path))
    assert result.exit_code != 0
    assert f"no secret 'nope' (its secrets: {secret.id})" in result.output


def _settings(path: Path) -> IngestSettings:
    return IngestSettings.load(
        kafka={"bootstrap_servers": f"127.0.0.1:{free_port()}"},
        ingest={"port": 0, "credentials_file": path},
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"{not json", "(the file): Invalid JSON"),
        (b'{"version": 1, "gateways": {"a": {"doc_types": []}}}', "gateways.a.doc_types"),
        (
            b'{"version": 1, "gateways": {"a": {"doc_types": ["x"], "rate": {"per_s": -1, '
            b'"burst": 1}}}}',
            "gateways.a.rate.per_s",
        ),
        (
            b'{"version": 1, "gateways": {"a": {"doc_types": ["x"], "secrets": [{"id": "s1s1", '
            b'"sha256": "plain-text-secret", "created": "2026-01-01T00:00:00Z"}]}}}',
            "gateways.a.secrets.0.sha256",
        ),
        (b'{"version": 2}', "version"),
    ],
)
def test_a_malformed_file_is_refused_at_start_naming_the_problem(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "credentials.json"
    path.write_bytes(content)
    with pytest.raises(creds.CredentialsError) as refused:
        IngestService(_settings(path))
    message = str(refused.value)
    assert message.startswith(f"ingest.credentials_file: {path}: ")
    assert problem in message


def test_a_reload_that_does_not_parse_keeps_the_last_good_credentials(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    assert run("add", "--gateway", "a", "--doc-types", "x", "--file", str(path)).exit_code == 0
    before = creds.read(path)
    token = run("add", "--gateway", "b", "--doc-types", "y", "--file", str(path)).stdout.strip()
    outcomes: list[bool] = []
    watcher = creds.Watcher(path, outcomes.append)
    assert watcher.check() is False  # unchanged: nothing reread
    good = watcher.current
    path.write_bytes(b'{"version": 1, "gateways": {"b": ')
    assert watcher.check() is False
    assert watcher.check() is False  # the same broken file: reported once
    assert outcomes == [False]
    assert watcher.current is good
    found = watcher.current.identify(token.encode(), 0)
    assert isinstance(found, creds.Gateway)
    assert found.name == "b"
    # The CLI refuses to edit a broken file; an operator fixes it: gateway b gone.
    assert run("revoke", "--gateway", "b", "--file", str(path)).exit_code != 0
    creds.write(path, before)
    assert watcher.check() is True
    assert outcomes == [False, True]
    assert watcher.current.identify(token.encode(), 0) == "unknown"


def test_the_service_counts_a_failed_reload(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    assert run("add", "--gateway", "a", "--doc-types", "x", "--file", str(path)).exit_code == 0
    service = IngestService(_settings(path))

    async def main() -> float | None:
        await service.listen()
        try:
            path.write_bytes(b"[]")
            await asyncio.sleep(0.8)
            return service.registry.get_sample_value(
                "anchorwatch_ingest_credentials_reloads_total", {"outcome": "error"}
            )
        finally:
            await service.stop()

    assert asyncio.run(main()) == 1.0


def test_a_scope_matches_names_and_patterns_case_sensitively() -> None:
    scope = creds.Scope(["invoice", "med_*", "lab-[0-9]"])
    asked = ("invoice", "med_x", "lab-7", "Invoice", "MED_x", "lab-x")
    assert [scope.allows(d) for d in asked] == [True, True, True, False, False, False]
    assert creds.Scope(None).allows("anything")


def test_an_ndjson_event_naming_another_source_is_caught() -> None:
    gateway = creds.Gateway("kong-a", "kong-a", creds.Scope(None))
    event = events()[0]
    own = encode(event.model_copy(update={"source": "kong-a"}))
    other = encode(event.model_copy(update={"source": "kong-b"}))
    assert other_source(gateway, own) is None
    error = other_source(gateway, other)
    assert error is not None
    assert error.problems[0].field == "source"
    # A doc type or an anchor text holding the words cannot pass for the field.
    spoof = orjson.loads(other)
    spoof["doc_type"] = ',"source":"kong-a"'
    assert other_source(gateway, orjson.dumps(spoof)) is not None


def test_a_token_bucket_lets_the_burst_in_then_says_how_long_to_wait() -> None:
    bucket = TokenBucket(per_s=2, burst=3)
    for _ in range(3):
        assert bucket.wait_s() == 0
        bucket.take(1)
    assert 0.4 < bucket.wait_s() <= 0.5
    bucket.take(10)  # an events limit may go into debt
    assert bucket.wait_s() > 5


def test_insecure_no_auth_with_a_credentials_file_is_refused_naming_both(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as refused:
        IngestSettings.load(
            ingest={"credentials_file": tmp_path / "c.json", "insecure_no_auth": True}
        )
    assert "insecure_no_auth: credentials_file is set too" in str(refused.value)


def test_a_gateway_is_found_by_its_client_certificate_cn_and_a_cn_is_one_gateways(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.json"
    past = datetime.now(UTC) - timedelta(days=1)
    entry = creds.GatewayEntry(doc_types=["invoice"], client_cert_cn="gw-a.example")
    old = creds.GatewayEntry(doc_types=["*"], client_cert_cn="gw-old.example", expires=past)
    file = creds.CredentialsFile(gateways={"gw-a": entry, "gw-old": old})
    creds.write(path, file)
    found = creds.load(path)
    gateway = found.identify_cn("gw-a.example", time.time())
    assert isinstance(gateway, creds.Gateway)
    assert (gateway.name, gateway.scope.allows("invoice"), gateway.scope.allows("x")) == (
        "gw-a", True, False,
    )  # fmt: skip
    assert found.identify_cn("GW-A.example", time.time()) == "unknown"
    assert found.identify_cn("gw-old.example", time.time()) == "expired"
    twice = file.model_copy(update={"gateways": {"gw-a": entry, "gw-b": entry}})
    with pytest.raises(creds.CredentialsError, match=r"gateways.gw-b.client_cert_cn: the same"):
        creds.build(twice, path)


def test_the_gate_takes_the_certificates_cn_only_without_a_bearer_token(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    entry = creds.GatewayEntry(doc_types=["*"], client_cert_cn="gw-a.example")
    creds.write(path, creds.CredentialsFile(gateways={"gw-a": entry}))
    gate = Gate(_settings(path).ingest, IngestMetrics(CollectorRegistry()))
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        {"subject": ((("organizationName", "x"),), (("commonName", "gw-a.example"),))}
        if name == "peercert"
        else default
    )
    by_cert = make_mocked_request("POST", "/v1/events", transport=transport)
    assert client_cert_cn(by_cert) == "gw-a.example"
    assert getattr(gate.identify(by_cert), "name", None) == "gw-a"
    wrong_token = make_mocked_request(
        "POST", "/v1/events", headers={"Authorization": "Bearer nope"}, transport=transport
    )
    assert gate.identify(wrong_token) is None  # a token, when sent, is what counts
    assert gate.identify(make_mocked_request("POST", "/v1/events")) is None


def test_tls_settings_go_together_and_files_that_do_not_load_are_named(tmp_path: Path) -> None:
    pem = tmp_path / "x.pem"
    pem.write_text("not a certificate\n")
    for given, named in (
        ({"tls_key_file": pem}, "tls_key_file: set tls_cert_file and tls_key_file together"),
        ({"tls_cert_file": pem}, "tls_key_file: set tls_cert_file and tls_key_file together"),
        ({"tls_client_ca_file": pem}, "tls_client_ca_file: client certificates need TLS"),
    ):
        with pytest.raises(SettingsError, match=named):
            IngestSettings.load(ingest={"insecure_no_auth": True, **given})
    options = IngestSettings.load(
        ingest={"insecure_no_auth": True, "tls_cert_file": pem, "tls_key_file": pem}
    ).ingest
    with pytest.raises(SettingsError, match=r"ingest\.tls_cert_file / tls_key_file: cannot load"):
        tls_context(options)
    assert tls_context(IngestSettings.load(ingest={"insecure_no_auth": True}).ingest) is None
