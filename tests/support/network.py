"""The unit suite's network guard (used by tests/unit/conftest.py): socket connections to
another machine raise NetworkUsed, naming the address; loopback and Unix sockets stay open.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class NetworkUsed(AssertionError):
    """A unit test tried to reach another machine."""


def local(address: Any) -> bool:
    """Whether an AF_INET/AF_INET6 socket address points at this machine."""
    host = address[0] if isinstance(address, tuple) else address
    if not isinstance(host, str):
        return False
    if host.lower() in _LOCAL_NAMES:
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False  # a host name: resolving it would already use the network
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    # Connecting to the unspecified address reaches this machine.
    return ip.is_loopback or ip.is_unspecified


def guarded(connect: Any) -> Any:
    def guarded(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not local(address):
            raise NetworkUsed(
                f"a unit test connected to {address!r}: unit tests use no network "
                "(mark it integration, or serve it on 127.0.0.1)"
            )
        return connect(self, address)

    return guarded
