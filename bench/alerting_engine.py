"""The alerting service's CPU path without Kafka or HTTP: deciding verdicts (the engine,
its SQLite transaction per batch, no integrations but the drift events) and rendering Slack
messages. One JSON line per round; run it against two trees side by side with PYTHONPATH:

    .venv/bin/python bench/alerting_engine.py --types 300 --rounds 3
    (cd OLD && PYTHONPATH=$PWD /work/main/.venv/bin/python /work/main/bench/alerting_engine.py)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path.cwd()))

from anchorwatch.alerting.integrations.slack.render import (
    slack_parent,
    slack_resolved,
    slack_update,
)
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.render import IncidentView
from anchorwatch.contracts import Reason, WindowAggregate
from tests.support.alerting import T0, lifecycle
from tests.support.alerting_harness import Harness, settings_for


def decide(types: int) -> float:
    """Verdicts decided per second: every type's full incident lifecycle, batches of 500."""
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness(settings_for(Path(tmp), None, None), ManualClock(start=time.time()))
        for t in range(types):
            h.publish(lifecycle(f"type-{t}"))
        started = time.perf_counter()
        h.consume(batch_max=500)
        return types * 9 / (time.perf_counter() - started)


def render(messages: int) -> float:
    """Microseconds per Slack message (parent, update and resolution in turn)."""
    window = WindowAggregate(
        doc_type="invoice <!channel>",
        window_start_ms=T0,
        window_end_ms=T0 + 60_000,
        request_count=50,
        mean_drift=0.9,
    )
    view = IncidentView(
        incident_id="0123456789abcdef",
        doc_type="invoice <!channel>",
        severity="critical",
        state="open",
        opened_at_ms=T0,
        resolved_at_ms=None,
        window=window,
        threshold=0.85,
        baseline_version="b1",
        reasons=[Reason(code="above_threshold", message="mean drift above the threshold")] * 3,
        peak_mean_drift=0.95,
        dashboard_url="https://grafana.example/d/x",
    )
    started = time.perf_counter()
    for _ in range(messages // 3):
        slack_parent(view)
        slack_update(view)
        slack_resolved(view)
    return (time.perf_counter() - started) / (messages // 3 * 3) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", type=int, default=300, help="doc types, 9 verdicts each")
    parser.add_argument("--messages", type=int, default=9000, help="Slack messages rendered")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, one line each")
    args = parser.parse_args()
    for _ in range(args.rounds):
        figures = {
            "verdicts_per_s": round(decide(args.types)),
            "slack_render_us": round(render(args.messages), 1),
        }
        print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
