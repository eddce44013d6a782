"""Slack: an incident as a thread (bot token) or as plain messages (incoming webhook)."""
