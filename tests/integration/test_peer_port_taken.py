"""A real SeaweedFS whose chosen port another process bound first exits, and is started again on other ports."""

from __future__ import annotations

import socket

from tests.support import seaweed


def test_weed_that_lost_its_s3_port_is_started_again_on_others(tmp_path, monkeypatch):
    taker = socket.socket()
    taker.bind(("127.0.0.1", 0))  # bound, not listening: as a client socket holds its local port
    chosen: list[list[int]] = []
    free_ports = seaweed.free_ports

    def first_s3_port_taken(count: int) -> list[int]:
        ports = free_ports(count)
        if not chosen:
            ports[3] = taker.getsockname()[1]  # master, volume, filer, s3
        chosen.append(ports)
        return ports

    monkeypatch.setattr(seaweed, "free_ports", first_s3_port_taken)
    try:
        server = seaweed.start_seaweed(tmp_path / "weed")
    finally:
        taker.close()
    try:
        assert len(chosen) == 2
        assert "address already in use" in (tmp_path / "weed" / "weed.log").read_text()
        assert server.endpoint_url.endswith(f":{chosen[1][3]}")
        client = server.client()
        client.create_bucket(Bucket="after-restart")
        client.put_object(Bucket="after-restart", Key="k", Body=b"v")
        assert client.get_object(Bucket="after-restart", Key="k")["Body"].read() == b"v"
    finally:
        server.stop()
