"""What a ``/v2`` lookup by a digest that names nothing costs against a hit, with many released versions.

Usage (from the repository root)::

    .venv/bin/python bench/oci_referrers.py [--versions 30] [--requests 200] [--rounds 3]

It creates a fresh, migrated PostgreSQL database beside ``MODELREG_TEST_PG_URL`` (as ``bench/manifest.py``
does), seeds it in-process through the services (``--versions`` five-file versions of ``acme/llm``, each
with its own README, through the real pipeline, approved, the ``build_oci_artifacts`` job run for each, so
their referrers' digests are recorded) and a node's token, and starts ``modelreg serve`` on it (no worker
threads) as its own process.

Each round, one client asks ``--requests`` times, one after the other, alternately:
``GET /v2/acme/llm/manifests/<random sha256>`` (a miss: 404 ``MANIFEST_UNKNOWN``) and
``GET /v2/acme/llm/manifests/1`` (a hit). It prints the median of each and their ratio, miss / hit: a miss
that searched every version's referrers would grow with ``--versions`` (issue 30 measured 0.58 s against
0.007 s at 30 versions); a miss that is one indexed lookup stays near a hit.

The database is dropped at the end, whatever happened.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[0] = str(REPO)

import argparse  # noqa: E402 (after sys.path[0] is set)
import hashlib  # noqa: E402 (after sys.path[0] is set)
import io  # noqa: E402 (after sys.path[0] is set)
import json  # noqa: E402 (after sys.path[0] is set)
import os  # noqa: E402 (after sys.path[0] is set)
import platform  # noqa: E402 (after sys.path[0] is set)
import secrets  # noqa: E402 (after sys.path[0] is set)
import statistics  # noqa: E402 (after sys.path[0] is set)
import tempfile  # noqa: E402 (after sys.path[0] is set)
import time  # noqa: E402 (after sys.path[0] is set)

import httpx  # noqa: E402 (after sys.path[0] is set)

from bench.manifest import start_server  # noqa: E402 (after sys.path[0] is set)
from tests.support import db as dbsupport  # noqa: E402 (after sys.path[0] is set)

TENANT, MODEL = "acme", "llm"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def seed(database_url: str, data_dir: Path, versions_count: int) -> str:
    """``versions_count`` approved versions of acme/llm, their artifacts built; a node's token."""
    from registry.auth import issue_token
    from registry.bootstrap import bootstrap, load_settings, prepare_embedded
    from registry.db.models import Principal, RoleBinding, Tenant
    from registry.domain.files import FileEntry
    from registry.services import versions
    from tests.support.registry import drain, make_admin
    from tests.support.releases import approve_standin

    settings = load_settings(database_url=database_url, data_dir=data_dir)
    prepare_embedded(settings)
    container = bootstrap(settings)
    try:
        admin = make_admin(container, TENANT)
        for number in range(1, versions_count + 1):
            files = {"config.json": json.dumps({"model_type": "llama", "hidden_size": 8}).encode(),
                     "tokenizer.json": b'{"version": "1.0"}', "generation_config.json": b"{}",
                     "README.md": b"# llm, version %d\n" % number,
                     "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "}
            entries = []
            with container.session_factory() as session:
                for path, data in files.items():
                    digest = hashlib.sha256(data).hexdigest()
                    versions.upload_blob(session, admin, TENANT, digest, io.BytesIO(data), len(data),
                                         blob_store=container.blob_store)
                    entries.append(FileEntry(path, len(data), digest))
                versions.submit_uploaded(session, admin, TENANT, MODEL, entries, label=f"bench {number}",
                                         limits=container.limits(), ports=container.ports)
            drain(container)
            approve_standin(container, TENANT, MODEL, number)
        drain(container)
        with container.session_factory() as session:
            tenant = session.query(Tenant).filter_by(name=TENANT).one()
            node = Principal(name="node-bench")
            session.add(node)
            session.flush()
            session.add(RoleBinding(principal_id=node.id, tenant_id=tenant.id, role="node", capacity=""))
            token = issue_token(session, node).token
            session.commit()
        return token
    finally:
        container.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--versions", type=int, default=30)
    parser.add_argument("--requests", type=int, default=200, help="requests per round (half misses, half hits)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    database_url = dbsupport.create_pg_database()
    workdir = Path(tempfile.mkdtemp(prefix="bench-oci-referrers-"))
    process = None
    try:
        token = seed(database_url, workdir / "data", args.versions)
        process, url = start_server(database_url, workdir / "data", workdir / "serve.log")
        base = f"{url}/v2/{TENANT}/{MODEL}/manifests"
        with httpx.Client(headers={"Authorization": f"Bearer {token}", "Accept": OCI_MANIFEST}, timeout=60) as http:
            # Warm up (imports, the connection pool), outside the figures; versions approved before the
            # digests were recorded would be recorded by these first misses.
            for _ in range(3):
                http.get(f"{base}/1")
                http.get(f"{base}/sha256:{secrets.token_hex(32)}")
            print(f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, load "
                  f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; {args.versions} released versions")
            for number in range(1, args.rounds + 1):
                misses, hits = [], []
                for index in range(args.requests):
                    miss = index % 2 == 0
                    path = f"{base}/sha256:{secrets.token_hex(32)}" if miss else f"{base}/1"
                    started = time.perf_counter()
                    r = http.get(path)
                    (misses if miss else hits).append(time.perf_counter() - started)
                    if r.status_code != (404 if miss else 200):
                        raise SystemExit(f"{path}: {r.status_code} {r.text[:300]}")
                miss_ms, hit_ms = statistics.median(misses) * 1000, statistics.median(hits) * 1000
                print(f"round {number}: miss p50 {miss_ms:.1f} ms, hit p50 {hit_ms:.1f} ms, "
                      f"miss/hit {miss_ms / hit_ms:.2f}x ({len(misses)} misses, {len(hits)} hits)")
        return 0
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
        dbsupport.drop_pg_database(database_url)


if __name__ == "__main__":
    sys.exit(main())
