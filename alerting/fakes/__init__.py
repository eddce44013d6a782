"""Local stand-ins for Slack and Jira that speak their wire protocols, record what they
receive, inject failures and show people what arrived (``anchorwatch alerting local-slack``
and ``local-jira``; the tests and the demo run them in-process). Shipped with the package so
the service can be tried without a Slack workspace or a Jira site.

``server.py`` the HTTP server and fault injection they share; ``slack.py`` the Web API and
incoming webhooks; ``jira.py`` the REST API, ``jira_issues.py`` its issues and workflow,
``jql.py`` its query language; ``pages.py`` the HTML pages; ``pagerduty.py`` the Events API
v2 (``anchorwatch alerting local-pagerduty``); ``webhook.py`` a webhook receiver.
"""
