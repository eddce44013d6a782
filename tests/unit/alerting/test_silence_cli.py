"""`anchorwatch alerting silence ...` and the silences API: what each makes, lists and
expires in the state file, and what each refuses (nothing changes then)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from anchorwatch.alerting.silence_api import SilenceApi
from anchorwatch.alerting.silence_book import SilenceBook
from anchorwatch.alerting.store import Store
from anchorwatch.cli.silence import silence

TOKEN = "s3cret-token-of-the-api"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    Store(tmp_path).close()
    return tmp_path


def _run(state: Path, *args: str) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(silence, [*args, "--state-dir", str(state)])
    return result.exit_code, result.output, result.exception


def test_a_silence_is_added_listed_and_expired(state: Path) -> None:
    code, out, _ = _run(
        state, "add", "--doc-type", "invoice", "--for", "2h", "--reason", "OCR outage",
        "--author", "ana",
    )  # fmt: skip
    assert code == 0, out
    silence_id = out.strip()
    code, out, _ = _run(state, "list")
    assert silence_id in out
    assert "invoice: OCR outage" in out
    code, out, _ = _run(state, "list", "--json")
    (listed,) = [orjson.loads(line) for line in out.splitlines()]
    assert (listed["author"], listed["active"], listed["severity"]) == ("ana", True, None)
    code, out, _ = _run(state, "expire", silence_id, "--author", "bo")
    assert (code, out.strip()) == (0, f"expired {silence_id}")
    assert _run(state, "list")[1].strip() == "no silences in force"
    assert "[ended]" in _run(state, "list", "--all")[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--for", "2h", "--reason", "x"], "needs --all"),
        (["--doc-type", "a", "--for", "forever", "--reason", "x"], "is not a duration"),
        (["--doc-type", "a", "--for", "0s", "--reason", "x"], "needs an end"),
        (["--doc-type", "a", "--for", "1h", "--reason", " "], "reason: say why"),
    ],
)
def test_a_wrong_silence_is_refused_and_nothing_is_kept(
    state: Path, args: list[str], message: str
) -> None:
    code, _, error = _run(state, "add", *args)
    assert code != 0
    assert message in str(error)
    book = SilenceBook(state)
    assert book.all() == []
    book.close()


def test_a_state_dir_where_the_service_never_ran_is_named(tmp_path: Path) -> None:
    _, _, error = _run(tmp_path / "nowhere", "list")
    assert "no alerting state at" in str(error)


# --------------------------------------------------------------------------- the API


def _call(
    api: SilenceApi, method: str, target: str, body: object = None, token: str | None = TOKEN
) -> tuple[int, Any]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    raw = orjson.dumps(body) if body is not None else b""
    status, content_type, payload = api.handle(method, target, headers, raw)
    assert content_type == "application/json"
    return status, orjson.loads(payload)


def test_the_api_adds_lists_and_expires_silences(state: Path) -> None:
    api = SilenceApi(state, TOKEN)
    status, made = _call(
        api,
        "POST",
        "/api/v1/silences",
        {"all_types": True, "severity": "warning", "duration": "30m", "reason": "rollout",
         "author": "ci"},
    )  # fmt: skip
    assert status == 201
    assert (made["doc_type"], made["severity"], made["author"]) == (None, "warning", "ci")
    status, listed = _call(api, "GET", "/api/v1/silences")
    assert [s["silence_id"] for s in listed["silences"]] == [made["silence_id"]]
    status, ended = _call(api, "DELETE", f"/api/v1/silences/{made['silence_id']}?author=ana")
    assert (status, ended["expired_by"]) == (200, "ana")
    assert _call(api, "GET", "/api/v1/silences")[1] == {"silences": []}
    assert len(_call(api, "GET", "/api/v1/silences?all=1")[1]["silences"]) == 1


@pytest.mark.parametrize(
    ("method", "target", "body", "token", "status", "message"),
    [
        ("GET", "/api/v1/silences", None, None, 401, "bearer token"),
        ("GET", "/api/v1/silences", None, "wrong-token-wrong-token", 401, "bearer token"),
        ("POST", "/api/v1/silences", {"duration": "1h", "reason": "x"}, TOKEN, 400, "--all"),
        ("POST", "/api/v1/silences", {"doc_type": "a", "reason": "x"}, TOKEN, 400, "an end"),
        ("POST", "/api/v1/silences", {"doc_type": 3}, TOKEN, 400, "a string"),
        ("POST", "/api/v1/silences", {"doc_type": "a", "when": 1}, TOKEN, 400, "when: not a"),
        ("POST", "/api/v1/silences", [1], TOKEN, 400, "a JSON object"),
        ("DELETE", "/api/v1/silences/abc?author=x", None, TOKEN, 404, "no silence 'abc'"),
        ("DELETE", "/api/v1/silences/abc", None, TOKEN, 400, "author"),
        ("PUT", "/api/v1/silences", None, TOKEN, 405, "not a silences call"),
    ],
)
def test_the_api_refuses_what_is_wrong_and_changes_nothing(
    state: Path,
    method: str,
    target: str,
    body: object,
    token: str | None,
    status: int,
    message: str,
) -> None:
    api = SilenceApi(state, TOKEN)
    got, answer = _call(api, method, target, body, token)
    assert got == status
    assert message in str(answer["error"])
    book = SilenceBook(state)
    assert book.all() == []
    book.close()


def test_without_a_token_the_api_is_off(state: Path) -> None:
    status, answer = _call(SilenceApi(state, None), "GET", "/api/v1/silences")
    assert status == 404
    assert "api_token" in str(answer["error"])
    status, answer = _call(SilenceApi(state, TOKEN), "POST", "/api/v1/silences", token=None)
    assert status == 401
    assert SilenceApi(state, TOKEN).handle("POST", "/api/v1/silences", {}, b"{")[0] == 401
