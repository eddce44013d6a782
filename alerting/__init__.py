"""The alerting service: verdicts to incidents, Slack threads, Jira tickets and drift events.

Not built yet: this package holds only the shared name so far.
"""
