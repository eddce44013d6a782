"""Unit tests use no network: a unit test that connects a socket to anything but this
machine fails, naming the address. Loopback (the local HTTP servers speaking Slack's and
Jira's wire protocols, a test's own listener) and Unix sockets stay open.

It guards connections made through Python's ``socket`` module (urllib, http.client,
asyncio, aiohttp, requests), not those of C libraries (librdkafka) or of child processes:
tests that need those, or any download, are integration tests (``-m integration``).
"""

from __future__ import annotations

import socket

import pytest

from tests.support.network import guarded


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", guarded(socket.socket.connect))
    monkeypatch.setattr(socket.socket, "connect_ex", guarded(socket.socket.connect_ex))
