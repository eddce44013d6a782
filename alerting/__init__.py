"""The alerting service: verdicts to incidents, Slack threads, Jira tickets and drift events."""
