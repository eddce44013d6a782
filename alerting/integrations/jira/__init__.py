"""Jira: one ticket per incident, found again by its hash label, never duplicated."""
