"""Inputs and checks for what the alerting renderers produce, shared by the tests of
rendering, the Slack and Jira integrations, the metrics and the service: doc types chosen to
break messages and queries (HOSTILE) or to show as their literal text (LITERAL), an incident
view to render (view), and a check that a Slack payload carries no control sequence
(assert_slack_safe).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from anchorwatch.alerting.render import IncidentView
from anchorwatch.contracts import Reason, WindowAggregate

HOSTILE = [
    "<!channel>",
    "<!here> please",
    "@here look",
    "@channel",
    "<@U024BE7LH>",
    "<https://evil.example|click me>",
    'quote " inside',
    "back\\slash",
    "*bold* _it_ ~strike~ `code`",
    "AND",
    "order",
    "x OR labels = y",
    "c" * 300,
    "répertoire médical",
    "日本語の契約書",
    "emoji 🚨🔥",
    "rtl \u202etxet\u202c hidden\u200bzero",
    "{code}[~admin]|table|!image.png!",
]


def view(doc_type: str = "purchase_contract", **changes: Any) -> IncidentView:
    # Not validated: the renderers must hold up even for text the contract would refuse.
    window = WindowAggregate.model_construct(
        doc_type=doc_type,
        window_start_ms=1_767_621_600_000,
        window_end_ms=1_767_621_660_000,
        request_count=120,
        mean_drift=0.912,
        p95_drift=0.97,
    )
    base = IncidentView(
        incident_id="inc-1",
        doc_type=doc_type,
        severity="critical",
        state="open",
        opened_at_ms=1_767_621_660_000,
        resolved_at_ms=None,
        window=window,
        threshold=0.85,
        baseline_version="b-1",
        reasons=[Reason(code="above_critical", message="mean drift 0.912 above 0.900")],
        peak_mean_drift=0.93,
        dashboard_url="https://grafana.example.com/d/aw?var-doc_type=x",
    )
    return replace(base, **changes)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


# Our own links are the only Slack control sequences we emit: <http(s)://...|label>.
_OUR_LINK = re.compile(r"<https?://[^<>|\s]+\|[^<>]*>")


def assert_slack_safe(payload: Any) -> None:
    for text in _strings(payload):
        rest = _OUR_LINK.sub("", text)
        assert "<" not in rest, text
        assert ">" not in rest, text
        assert not re.search(r"@(here|channel|everyone)\b", rest, re.IGNORECASE), text
        assert "\u202e" not in text
        assert "\u200b" not in text


#: Doc types that must show as their literal text in Jira wiki markup and Slack mrkdwn.
LITERAL = [
    '<!channel> "DO" \\\\ report*',
    "victim two!",
    "http://evil.example/x",
    "(!) :) (y)",
    "(/) (x) :P :D ;) (on) (*r) (flag)",
    "{noformat}x{noformat}",
    "{{mono}} a|b[c]",
    "a|b[c]",
    "[~admin] [Dashboard|https://evil.example] !x.png!",
    "back\\*slash\\ and \\\\\\ runs\\",
    "-- --- ---- +ins+ ^sup^ ~sub~ ??cite?? _em_ -del- #1 %x",
    "mailto:x@evil.example file:/etc/passwd",
    "key: value :: x:",
    "&#92; &amp; &lt;b&gt; a & b",
    "h1. heading bq. quote",
]
