"""Loopback ports for the processes of one distributed test or bench (no TensorFlow import)."""
from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports that were free a moment ago (for tests that start
    TensorFlow's gRPC servers; each test its own processes). All are held open together while
    they are chosen, so no two are the same."""
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports
