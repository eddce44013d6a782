"""The unit suite's network guard (tests/unit/conftest.py, tests/support/network.py):
another machine is refused before any packet leaves, this machine is reachable."""

from __future__ import annotations

import asyncio
import socket
import urllib.request

import pytest

from tests.support.network import NetworkUsed, local

# TEST-NET-1 and -3 (RFC 5737) and a documentation IPv6 address: never a real host.
ELSEWHERE = [("192.0.2.1", 9), ("203.0.113.7", 443), ("2001:db8::1", 80, 0, 0)]


@pytest.mark.parametrize("address", ELSEWHERE, ids=str)
def test_a_socket_to_another_machine_is_refused(address: tuple[object, ...]) -> None:
    family = socket.AF_INET6 if ":" in str(address[0]) else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        with pytest.raises(NetworkUsed, match="unit tests use no network"):
            sock.connect(address)
        with pytest.raises(NetworkUsed):
            sock.connect_ex(address)


def test_http_and_asyncio_clients_are_refused_too() -> None:
    with pytest.raises(NetworkUsed):
        urllib.request.urlopen("http://192.0.2.1:9/", timeout=1)

    async def connect() -> None:
        await asyncio.open_connection("192.0.2.1", 9)

    with pytest.raises(NetworkUsed):
        asyncio.run(connect())


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_this_machine_is_reachable(host: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection((host, port), timeout=5) as client:
            peer, _ = server.accept()
            with peer:
                client.sendall(b"ping")
                assert peer.recv(4) == b"ping"


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        (("127.0.0.1", 1), True),
        (("127.8.9.10", 1), True),
        (("::1", 1, 0, 0), True),
        (("::ffff:127.0.0.1", 1, 0, 0), True),
        (("0.0.0.0", 1), True),
        (("LOCALHOST", 1), True),
        (("10.0.0.1", 1), False),
        (("::ffff:192.0.2.1", 1, 0, 0), False),
        (("example.com", 80), False),
        ((None, 80), False),
    ],
)
def test_what_counts_as_this_machine(address: tuple[object, ...], expected: bool) -> None:
    assert local(address) is expected
