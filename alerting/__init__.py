"""The alerting service: verdicts to incidents, Slack threads, Jira tickets and drift events.

- ``service.py`` wires and runs it: ``consumers.py`` (Kafka in), ``engine.py`` (the
  decisions, one SQLite transaction per batch in ``store.py``), ``outbox.py`` (the drainer
  that delivers and retries), ``refit.py`` (baselines refitted), ``http.py`` (/metrics and
  probes), ``crash.py`` (the named crash points of the exactly-once trials),
  ``log_limit.py`` (a repeated warning written once a minute, with its count);
- ``integrations/``: where notifications go, one package or module each (Slack, Jira,
  drift events, dry run), listed in ``integrations/registry.py``;
- ``render.py`` and ``payload.py``: what every integration's messages share and what an
  outbox entry carries; ``notify.py``: call outcomes and the retry policy;
- ``fakes/``: the local Slack and Jira (``anchorwatch alerting local-slack|local-jira``).
"""
