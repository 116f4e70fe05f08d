"""The ports the suite gives peers that must be told theirs before they bind (SeaweedFS, docker-registry).

They lie below the kernel's ephemeral range, from which every outgoing connection takes its local port, and a
peer that lost its port all the same (another test process chose it at once) is started again on another.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import distribution_registry, seaweed
from tests.support.server import PortTaken, start_again_when_port_taken


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_every_port_a_peer_is_told_lies_below_the_ephemeral_range():
    low = _ephemeral_low()
    ports = seaweed.free_ports(4)
    assert all(seaweed.PORT_RANGE[0] <= p < seaweed.PORT_RANGE[1] for p in ports)
    assert max(ports) + 10000 < low  # weed binds port + 10000 for gRPC too
    assert seaweed.PORT_RANGE[1] - 1 + 10000 < low
    assert distribution_registry.free_loopback_port() < seaweed.PORT_RANGE[0] < low


def test_a_peer_that_lost_its_port_is_started_again_and_any_other_failure_is_raised_at_once():
    tries: list[int] = []

    def loses_twice(attempt: int) -> str:
        tries.append(attempt)
        if attempt < 2:
            raise PortTaken("bind: address already in use")
        return "up"

    assert start_again_when_port_taken(loses_twice) == "up" and tries == [0, 1, 2]

    tries.clear()

    def always_loses(attempt: int) -> str:
        tries.append(attempt)
        raise PortTaken("bind: address already in use")

    with pytest.raises(PortTaken):
        start_again_when_port_taken(always_loses)
    assert tries == [0, 1, 2]

    tries.clear()

    def fails(attempt: int) -> str:
        tries.append(attempt)
        raise RuntimeError("weed exited with 1")

    with pytest.raises(RuntimeError, match="exited with 1"):
        start_again_when_port_taken(fails)
    assert tries == [0]
