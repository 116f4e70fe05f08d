"""A real SeaweedFS S3 server for the test suite, on free loopback ports, in its own temp dir."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import boto3
from botocore.config import Config

from tests.support.server import PortTaken, start_again_when_port_taken, stop_process


def _port_pair_free(port: int) -> bool:
    # weed also binds port+10000 for gRPC on every service.
    for p in (port, port + 10000):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


# Both ports of every pair stay below Linux's ephemeral range (32768-60999 by default), from which the kernel
# takes the local port of every outgoing connection: with ports in it, a client socket of some other test could
# take a port between the check here and weed's bind, and weed exited with 255 (CI of stop 45).
PORT_RANGE = (12000, 22000)


def free_ports(count: int, start: int = PORT_RANGE[0], stop: int = PORT_RANGE[1]) -> list[int]:
    """``count`` ports whose +10000 sibling is free too, below the ephemeral range, chosen from the pid for spread."""
    ports: list[int] = []
    candidate = start + (os.getpid() * 7919) % (stop - start)
    for _ in range(stop - start):
        candidate = start + (candidate - start + 1) % (stop - start)
        if candidate in ports or any(abs(candidate - p) < 2 for p in ports):
            continue
        if _port_pair_free(candidate):
            ports.append(candidate)
            if len(ports) == count:
                return ports
    raise RuntimeError("no free ports for SeaweedFS")


@dataclass
class SeaweedS3:
    endpoint_url: str
    process: subprocess.Popen
    directory: Path
    access_key: str = "modelreg-test"
    secret_key: str = "modelreg-test-secret"
    region: str = "us-east-1"

    def client(self):
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}),
        )

    @contextmanager
    def bucket(self) -> Iterator[str]:
        """A new bucket, deleted on leaving, even when not empty.

        Every bucket is a SeaweedFS collection holding a volume of its own, and a server has room for only so
        many volumes (free disk / volume size): a worker that kept every test's bucket ran out after about 250
        ("No writable volumes and no free volumes left"). Deleting the bucket (SeaweedFS deletes one that is not
        empty) deletes its collection and frees the volume."""
        name = f"t-{uuid.uuid4().hex[:20]}"
        client = self.client()
        client.create_bucket(Bucket=name)
        try:
            yield name
        finally:
            client.delete_bucket(Bucket=name)

    def blob_store(self, bucket: str):
        """The registry's blob store in ``bucket`` (under the prefix ``registry``), as the tests configure it."""
        from registry.storage import S3BlobStore

        return S3BlobStore(self.client(), bucket, "registry", 5 * 1024 * 1024)

    def copy_bucket(self, source: str, target: str) -> None:
        """Copy every object of ``source`` into ``target`` (server-side copies)."""
        client = self.client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=source):
            for item in page.get("Contents", []):
                client.copy_object(Bucket=target, Key=item["Key"], CopySource={"Bucket": source, "Key": item["Key"]})

    def stop(self) -> None:
        # SIGKILL at once: weed takes about 25 s to leave on SIGTERM, so the 3 s grace only ever ran out
        # before the kill, and its data is the test session's temporary directory.
        stop_process(self.process, signal.SIGKILL)


def start_seaweed(directory: Path, timeout: float = 60.0, attempts: int = 3) -> SeaweedS3:
    """Start weed on free ports; when another process took one of them before weed bound it, start on others."""
    def start(attempt: int) -> SeaweedS3:
        # A fresh directory for each try: the master keeps the addresses of its first start in its state.
        return _start_seaweed(directory if attempt == 0 else directory.with_name(f"{directory.name}-{attempt}"),
                              timeout)

    return start_again_when_port_taken(start, attempts)


def _start_seaweed(directory: Path, timeout: float) -> SeaweedS3:
    weed = shutil.which("weed") or str(Path(os.__file__).parents[3] / "bin" / "weed")
    venv_weed = Path(__import__("sys").executable).parent / "weed"
    if venv_weed.exists():
        weed = str(venv_weed)
    directory.mkdir(parents=True, exist_ok=True)
    master, volume, filer, s3 = free_ports(4)
    config = directory / "s3.json"
    config.write_text(
        '{"identities": [{"name": "test", "credentials": [{"accessKey": "modelreg-test", '
        '"secretKey": "modelreg-test-secret"}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}'
    )
    log = open(directory / "weed.log", "wb")
    process = subprocess.Popen(
        [
            weed, "server", f"-dir={directory}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={master}", f"-volume.port={volume}", "-filer", f"-filer.port={filer}",
            "-s3", f"-s3.port={s3}", "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={config}",
            "-master.telemetry=false",
            "-volume.max=0", "-master.volumeSizeLimitMB=256",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # Every bucket is a collection that by default grows 7 volumes at once; with one volume per
        # collection (and smaller volumes, the count is free disk / size) a session can create hundreds
        # of test buckets instead of running out ("No writable volumes") after about ten.
        env={**os.environ, "WEED_MASTER_VOLUME_GROWTH_COPY_1": "1"},
    )
    server = SeaweedS3(endpoint_url=f"http://127.0.0.1:{s3}", process=process, directory=directory)
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.close()
            message = f"weed exited with {process.returncode}; see {directory / 'weed.log'}"
            taken = [line for line in (directory / "weed.log").read_text(errors="replace").splitlines()
                     if "address already in use" in line]
            if taken:
                raise PortTaken(f"{message}: {taken[0].strip()}")
            raise RuntimeError(message)
        try:
            client = server.client()
            client.create_bucket(Bucket="ready-probe")
            client.put_object(Bucket="ready-probe", Key="probe", Body=b"ok")
            assert client.get_object(Bucket="ready-probe", Key="probe")["Body"].read() == b"ok"
            return server
        except Exception as exc:  # not up yet
            last_error = exc
            time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"SeaweedFS did not become ready: {last_error}")
