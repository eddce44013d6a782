"""How far a verdict's window is in breach under each rule of the policy.

The drift job judges a window once, against the type's fitted baseline when it has one; a
rule with ``compare = "static"`` compares windows with its own figures whatever the type's
baseline says, so the verdict's level is not that rule's. This re-judges the window for
such rules (the same ``judge_window`` the job runs) and takes the verdict's level for the
others. Pure: no I/O, no clock.

It belongs with ``IncidentTracker`` (which already judges static rules this way when it
observes a window); it lives here so the alerting engine keeps no policy of its own.
"""

from __future__ import annotations

from anchorwatch.contracts import Verdict
from anchorwatch.contracts.models import BreachLevel
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.window import StaticRule, judge_window


class BreachLevels:
    """Each rule's breach level of a verdict's window."""

    def __init__(self, policy: PolicyConfig) -> None:
        self._static: dict[str, StaticRule] = {
            r.name: r.static.rule() for r in policy.rules if r.compare == "static"
        }

    def of(self, rule: str, verdict: Verdict) -> BreachLevel:
        """The breach level of ``verdict``'s window under the rule named ``rule``."""
        static = self._static.get(rule)
        if static is None:
            return verdict.breach_level
        return judge_window(verdict.window, None, static).breach_level
