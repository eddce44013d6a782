"""The integrations: where the service's notifications go. One package or module each:

- ``slack/``: ``render.py`` builds the messages, ``notifier.py`` talks to the Web API (bot
  token) or an incoming webhook, ``sender.py`` sends outbox entries and reconciles them;
- ``jira/``: ``render.py`` builds the ticket texts and labels, ``notifier.py`` talks to the
  REST API, ``sender.py`` sends outbox entries and reconciles them;
- ``pagerduty.py``: PagerDuty Events API v2; ``webhook.py``: a webhook with Alertmanager's
  body; ``paging_settings.py`` their settings and routing by severity, ``paging.py`` their
  HTTP call;
- ``events.py``: drift events produced to Kafka;
- ``dry_run.py``: what any of them would send, logged instead.

``base.py`` says what an integration is; ``registry.py`` lists them. A new integration is a
new module declaring an ``Integration``, listed in the registry, plus its settings section.
This package's ``__init__`` imports nothing, so the settings can import a renderer without
pulling in every client library.
"""
