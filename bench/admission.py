"""Admission latency: ``modelreg admission`` answering AdmissionReviews open-loop at 200 reviews/s, against the
live registry and from its verified cache with the registry stopped, beside the floor of TLS + HTTP + JSON.

Usage (from the repository root)::

    .venv/bin/python bench/admission.py [--rate 200] [--seconds 10] [--connections 8] [--rounds 3]

It creates a fresh, migrated PostgreSQL database beside ``MODELREG_TEST_PG_URL`` (as ``bench/queue.py``
does), seeds it in-process through the services (a five-file version of ``acme/llm`` through the real
pipeline, approved, ``prod`` pointing at it, its OCI manifests built, a principal holding the ``admission``
role), gives the registry a policy directory mapping namespace ``bench`` to tenant acme in ``enforce`` mode,
and starts ``modelreg serve`` on it (no worker threads) and ``modelreg admission`` over TLS in front of it,
each as its own process, as a cluster would run them.

Two AdmissionReview documents, shaped as the API server sends them (``tests/support/admission_webhook.py``),
are sent in turn to ``POST /validate``: a Pod with an OCI image volume by digest on the registry's ``/v2`` host
and an init container running ``modelreg fetch acme/llm@prod``, and an InferenceService whose ``storageUri`` is
``modelreg://acme/llm@prod``. Every answer must be ``allowed`` with the request's uid (from the cache, with its
warnings); anything else (another status, a denial, an exception) counts as an error.

The load is open-loop: review ``i`` is due at ``start + i / rate``, whatever became of the ones before; each of
``--connections`` sender threads takes the next due review, waits for its time, sends it over its own keep-alive
TLS connection (the API server keeps its connections to a webhook open and reuses them; it would open more when
they are all busy, so at most ``--connections`` reviews are in flight here), and records the latency
from the review's *scheduled* time to the end of its answer, so a stall delays every review behind it in the
figures instead of quietly lowering the rate (coordinated omission). Each round measures, in this order:

- ``floor``: the same load against a bare TLS server on this machine, the webhook's own server class
  (:class:`registry.node.admission.AdmissionServer`) answering every review ``allowed`` without deciding
  anything: what TLS, HTTP and JSON cost on their own;
- ``live``: the webhook in front of the running registry, as shipped (``--refresh-seconds`` 30): the warm-up's
  reviews are decided by the registry, the load's answered from the webhook's proof and reported in batches
  (ADR 0019); ``--refresh-seconds 0`` on the command line of this script asks the registry for every review
  (the synchronous path of runs A to E in ``bench/README.md``);
- ``cache``: the registry process stopped, the webhook (still running) answering from its verified cache; the
  registry is started again for the next round.

Each is printed with p50, p99, max, errors, how many took longer than the shipped webhook configuration's
``timeoutSeconds`` (the API server would have failed them), the rate achieved (reviews over the time from the
first due to the last answered) and each p99's ratio to the floor's, with the load average before and after.
The database is dropped at the end, whatever happened.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[0] = str(REPO)

import argparse  # noqa: E402 (after sys.path[0] is set)
import hashlib  # noqa: E402 (after sys.path[0] is set)
import http.client  # noqa: E402 (after sys.path[0] is set)
import io  # noqa: E402 (after sys.path[0] is set)
import json  # noqa: E402 (after sys.path[0] is set)
import os  # noqa: E402 (after sys.path[0] is set)
import platform  # noqa: E402 (after sys.path[0] is set)
import shutil  # noqa: E402 (after sys.path[0] is set)
import signal  # noqa: E402 (after sys.path[0] is set)
import ssl  # noqa: E402 (after sys.path[0] is set)
import subprocess  # noqa: E402 (after sys.path[0] is set)
import tempfile  # noqa: E402 (after sys.path[0] is set)
import threading  # noqa: E402 (after sys.path[0] is set)
import time  # noqa: E402 (after sys.path[0] is set)
import uuid  # noqa: E402 (after sys.path[0] is set)
from dataclasses import dataclass  # noqa: E402 (after sys.path[0] is set)
from typing import Any  # noqa: E402 (after sys.path[0] is set)

from tests.support import db as dbsupport  # noqa: E402 (after sys.path[0] is set)
from tests.support.admission_webhook import admission_review, tls_pair  # noqa: E402 (after sys.path[0] is set)
from tests.support.server import free_port, stop_process, wait_until_up  # noqa: E402 (after sys.path[0] is set)

TENANT, MODEL, NAMESPACE = "acme", "llm", "bench"
MODELREG = str(Path(sys.executable).parent / "modelreg")
WEBHOOK_TIMEOUT = 5.0
"""The ``timeoutSeconds`` of the shipped ValidatingWebhookConfiguration (``deploy/admission/``): a review answered
later than this the API server would have failed (``failurePolicy: Fail``, so the pod denied)."""
WARMUP = 20
"""Reviews sent, one after the other, before each measured load (outside the figures): connections open, the
release verified and cached."""
SETTLE_SECONDS = 30
"""How long the cache warm-up waits for the webhook to notice the stopped registry (its first warned answer)."""


def seed(database_url: str, data_dir: Path, public_url: str) -> tuple[str, str]:
    """The approved version behind prod with its OCI manifests built; the admission token and the digest of the
    version's image-shaped manifest."""
    from sqlalchemy import select

    from registry.bootstrap import bootstrap, load_settings, prepare_embedded
    from registry.db.models import OciArtifact
    from registry.domain.aliases import make_target
    from registry.domain.files import FileEntry
    from registry.services import aliases, versions
    from tests.support.registry import drain, make_admin, role_token
    from tests.support.releases import approve_standin

    settings = load_settings(database_url=database_url, data_dir=data_dir, public_url=public_url)
    prepare_embedded(settings)
    container = bootstrap(settings)
    try:
        admin = make_admin(container, TENANT)
        files = {"config.json": json.dumps({"model_type": "llama", "hidden_size": 8}).encode(),
                 "tokenizer.json": b'{"version": "1.0"}', "generation_config.json": b"{}",
                 "README.md": b"# llm\n", "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "}
        entries = []
        with container.session_factory() as session:
            for path, data in files.items():
                digest = hashlib.sha256(data).hexdigest()
                versions.upload_blob(session, admin, TENANT, digest, io.BytesIO(data), len(data),
                                     blob_store=container.blob_store)
                entries.append(FileEntry(path, len(data), digest))
            versions.submit_uploaded(session, admin, TENANT, MODEL, entries, label="bench",
                                     limits=container.limits(), ports=container.ports)
        drain(container)
        approve_standin(container, TENANT, MODEL, 1)
        with container.session_factory() as session:
            aliases.promote(session, admin, TENANT, MODEL, "prod", make_target(1), policy=container.policy,
                            clock=container.clock)
        drain(container)  # the OCI manifests approval queued
        with container.session_factory() as session:
            image = session.scalar(select(OciArtifact.manifest_digest).where(OciArtifact.shape == "image"))
        if image is None:
            raise RuntimeError("the version's image-shaped OCI manifest was not built")
        return role_token(container, "webhook", TENANT, "admission"), image
    finally:
        container.dispose()


def policy_dir(workdir: Path) -> Path:
    """The shipped policies, with namespace ``bench`` serving tenant acme in ``enforce`` mode."""
    from registry.policy import default_policy_dir

    policies = workdir / "policies"
    shutil.copytree(default_policy_dir(), policies)
    data = json.loads((policies / "data.json").read_text())
    data["modelreg"]["config"]["admission"]["namespaces"] = {NAMESPACE: {"tenant": TENANT, "mode": "enforce"}}
    (policies / "data.json").write_text(json.dumps(data))
    return policies


def reviews(host: str, image_digest: str) -> list[bytes]:
    """The two AdmissionReview documents, encoded (their uids are replaced per send)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "server"}, "spec": {
        "initContainers": [{"name": "fetch", "image": "modelreg:latest", "command": ["modelreg", "fetch"],
                            "args": [f"{TENANT}/{MODEL}@prod", "/mnt/models"]}],
        "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.9.0",
                        "volumeMounts": [{"name": "weights", "mountPath": "/weights"}]}],
        "volumes": [{"name": "weights", "image": {"reference": f"{host}/{TENANT}/{MODEL}@{image_digest}",
                                                  "pullPolicy": "IfNotPresent"}}]}}
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "llm"},
            "spec": {"predictor": {"model": {"modelFormat": {"name": "huggingface"},
                                             "storageUri": f"modelreg://{TENANT}/{MODEL}@prod"}}}}
    return [json.dumps(admission_review(obj, NAMESPACE)).encode() for obj in (pod, isvc)]


def with_uid(document: bytes) -> tuple[bytes, str]:
    """``document`` with a request uid of its own, a fresh UUID as the API server's: never one of an earlier
    round or run (the registry records a reported review's uid once, ADR 0019)."""
    review = json.loads(document)
    uid = str(uuid.uuid4())
    review["request"]["uid"] = uid
    return json.dumps(review).encode(), uid


@dataclass
class Load:
    """One open-loop load's figures (milliseconds)."""

    scenario: str
    latencies: list[float]
    errors: int
    seconds: float
    first_error: str = ""

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * p))] * 1000 if ordered else float("nan")

    @property
    def late(self) -> int:
        return sum(1 for latency in self.latencies if latency > WEBHOOK_TIMEOUT)

    @property
    def rate(self) -> float:
        return (len(self.latencies) + self.errors) / self.seconds


class Sender:
    """A keep-alive TLS connection to the webhook, as the API server holds one."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.port, self.context = port, context
        self.conn: http.client.HTTPSConnection | None = None

    def post(self, body: bytes) -> tuple[int, bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=30)
        try:
            self.conn.request("POST", "/validate?timeout=10s", body=body,
                              headers={"Content-Type": "application/json", "Accept": "application/json"})
            response = self.conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def check(status: int, data: bytes, uid: str, *, warned: bool) -> str | None:
    """Why the answer is not an allowed review for ``uid`` (with warnings when ``warned``), or None."""
    if status != 200:
        return f"HTTP {status}: {data[:200]!r}"
    response = json.loads(data).get("response", {})
    if response.get("uid") != uid or response.get("allowed") is not True:
        return f"not allowed: {json.dumps(response)[:300]}"
    if warned != bool(response.get("warnings")):
        return f"warnings {'missing' if warned else 'unexpected'}: {json.dumps(response)[:300]}"
    return None


def warm_up(port: int, context: ssl.SSLContext, documents: list[bytes], *, warned: bool) -> None:
    """``WARMUP`` reviews, each checked; when ``warned``, first until the webhook has noticed the registry is down
    (until then it answers references the registry decided a moment ago from its proof, with no warning)."""
    sender = Sender(port, context)
    try:
        # It notices at its next ask or report (reports go every 0.2 s): settling is bounded by time, and its
        # reviews are not counted among the WARMUP checked ones.
        settle_until = time.monotonic() + SETTLE_SECONDS if warned else None
        index = 0
        while index < WARMUP:
            body, uid = with_uid(documents[index % len(documents)])
            problem = check(*sender.post(body), uid, warned=warned)
            if settle_until is not None and problem is not None and problem.startswith("warnings missing"):
                if time.monotonic() > settle_until:
                    raise RuntimeError(f"the webhook did not notice the stopped registry in {SETTLE_SECONDS} s")
                time.sleep(0.01)
                continue
            settle_until = None
            if problem is not None:
                raise RuntimeError(f"warm-up review {index}: {problem}")
            index += 1
    finally:
        sender.close()


def open_loop(scenario: str, port: int, context: ssl.SSLContext, documents: list[bytes], *, rate: float,
              seconds: float, connections: int, warned: bool) -> Load:
    """Send ``rate * seconds`` reviews on the open-loop schedule (module docstring) and gather the figures."""
    total = max(1, int(rate * seconds))
    # Bodies are made before the clock starts: the load generator's own JSON is not the webhook's latency.
    bodies = [with_uid(documents[i % len(documents)]) for i in range(total)]
    lock = threading.Lock()
    next_index = [0]
    latencies: list[float] = []
    errors: list[str] = []
    start = time.perf_counter() + 0.05

    def send_all() -> None:
        sender = Sender(port, context)
        try:
            while True:
                with lock:
                    index = next_index[0]
                    next_index[0] += 1
                if index >= total:
                    return
                due = start + index / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                body, uid = bodies[index]
                try:
                    problem = check(*sender.post(body), uid, warned=warned)
                except (OSError, http.client.HTTPException, ValueError) as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                elapsed = time.perf_counter() - due
                with lock:
                    if problem is None:
                        latencies.append(elapsed)
                    else:
                        errors.append(problem)
        finally:
            sender.close()

    threads = [threading.Thread(target=send_all, name=f"sender-{n}") for n in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.perf_counter() - start
    return Load(scenario, latencies, len(errors), took, errors[0] if errors else "")


class FixedAnswer:
    """The floor's webhook: every review allowed, nothing decided."""

    def answer(self, review: Any, *, mutate: bool) -> dict[str, Any]:
        from registry.node.admission import _request_of, _response

        return _response(_request_of(review)["uid"], True)


def serve_floor(cert: Path, key: Path, port: int) -> None:
    """The bare TLS server (``--floor-server``): the webhook's server class answering :class:`FixedAnswer`."""
    from registry.node.admission import AdmissionServer

    server = AdmissionServer(("127.0.0.1", port), FixedAnswer(), tls_cert=cert, tls_key=key)  # type: ignore[arg-type]
    server.ready.set()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print("floor listening", flush=True)
    server.serve_forever()


def start_floor(tls: Path, port: int, log: Path) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, __file__, "--floor-server", str(tls / "tls.crt"),
                                str(tls / "tls.key"), str(port)], stdout=open(log, "wb"),
                               stderr=subprocess.STDOUT, cwd=REPO)
    wait_https(process, port, tls / "tls.crt", log)
    return process


def wait_https(process: subprocess.Popen, port: int, cert: Path, log: Path, timeout: float = 60) -> None:
    """Wait until ``GET /readyz`` over TLS answers 200 (the floor answers 404 to it: any answer will do there)."""
    context = ssl.create_default_context(cafile=str(cert))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited {process.returncode}: {log.read_text()[-2000:]}")
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=2)
        try:
            conn.request("GET", "/readyz")
            if conn.getresponse().status in (200, 404):
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.05)
    raise RuntimeError(f"nothing answered on port {port}: {log.read_text()[-2000:]}")


def start_registry(database_url: str, data_dir: Path, policies: Path, port: int, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")}
    env.update(MODELREG_DATABASE_URL=database_url, MODELREG_POLICY_DIR=str(policies),
               MODELREG_PUBLIC_URL=f"http://127.0.0.1:{port}", PYTHONPATH=str(REPO))
    process = subprocess.Popen(
        [MODELREG, "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "0"], stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env, cwd=REPO)
    try:
        wait_until_up(process, f"http://127.0.0.1:{port}", log, timeout=60)
    except RuntimeError:
        process.kill()
        raise
    return process


def start_webhook(workdir: Path, registry_url: str, port: int, refresh_seconds: float) -> subprocess.Popen:
    log = workdir / "admission.log"
    tls = workdir / "tls"
    process = subprocess.Popen(
        [MODELREG, "admission", "--listen", f"127.0.0.1:{port}", "--tls-cert", str(tls / "tls.crt"),
         "--tls-key", str(tls / "tls.key"), "--registry", registry_url, "--token-file", str(workdir / "token"),
         "--trust-root", str(workdir / "root.json"), "--state-dir", str(workdir / "state"),
         "--refresh-seconds", str(refresh_seconds)],
        stdout=open(log, "ab"), stderr=subprocess.STDOUT, cwd=REPO)
    wait_https(process, port, tls / "tls.crt", log)
    return process


def decided_records(engine: Any) -> tuple[int, int]:
    """The ``admission.decided`` audit records, and those of them answered from the webhook's proof."""
    from sqlalchemy import text

    with engine.connect() as conn:
        row = conn.execute(text(
            "SELECT count(*), count(*) FILTER (WHERE CAST(details AS TEXT) LIKE '%webhook-proof%') "
            "FROM audit_events WHERE action = 'admission.decided'")).one()
    return int(row[0]), int(row[1])


def wait_for_records(engine: Any, expected: int, timeout: float = 120.0) -> tuple[float, int, int]:
    """Seconds until ``expected`` decided records are in the audit log (polled), and the counts then."""
    started = time.monotonic()
    while True:
        total, answered = decided_records(engine)
        if total >= expected or time.monotonic() - started > timeout:
            return time.monotonic() - started, total, answered
        time.sleep(0.05)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=200.0, help="reviews per second, open loop")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each load runs")
    parser.add_argument("--connections", type=int, default=8, help="sender threads, one keep-alive connection each")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--refresh-seconds", type=float, default=30.0,
                        help="the webhook's --refresh-seconds (0: the registry decides every review)")
    parser.add_argument("--floor-server", nargs=3, metavar=("CERT", "KEY", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_server:
        cert, key, port = args.floor_server
        serve_floor(Path(cert), Path(key), int(port))
        return 0

    import httpx

    from registry.db.session import make_engine

    database_url = dbsupport.create_pg_database()
    records_db = make_engine(database_url)
    workdir = Path(tempfile.mkdtemp(prefix="bench-admission-"))
    processes: dict[str, subprocess.Popen] = {}
    try:
        registry_port, hook_port, floor_port = free_port(), free_port(), free_port()
        registry_url = f"http://127.0.0.1:{registry_port}"
        token, image_digest = seed(database_url, workdir / "data", registry_url)
        policies = policy_dir(workdir)
        tls_pair(workdir / "tls")
        (workdir / "token").write_text(token)
        log = workdir / "serve.log"
        processes["registry"] = start_registry(database_url, workdir / "data", policies, registry_port, log)
        (workdir / "root.json").write_text(httpx.get(f"{registry_url}/v1/trust-root", timeout=30).text)
        processes["webhook"] = start_webhook(workdir, registry_url, hook_port, args.refresh_seconds)
        processes["floor"] = start_floor(workdir / "tls", floor_port, workdir / "floor.log")
        context = ssl.create_default_context(cafile=str(workdir / "tls" / "tls.crt"))
        documents = reviews(f"127.0.0.1:{registry_port}", image_digest)

        print(f"admission reviews open-loop at {args.rate:g}/s for {args.seconds:g} s, {args.connections} "
              f"keep-alive TLS connections (HTTP/1.1), POST /validate, a Pod (image volume + init fetch) and an "
              f"InferenceService in turn; PostgreSQL; {os.cpu_count()} CPUs, Python {platform.python_version()}; "
              f"webhook --refresh-seconds {args.refresh_seconds:g}")
        for number in range(1, args.rounds + 1):
            if processes["registry"].poll() is not None:
                processes["registry"] = start_registry(database_url, workdir / "data", policies, registry_port, log)
            before = load_average()
            loads = []
            for scenario, port, warned in (("floor", floor_port, False), ("live", hook_port, False)):
                warm_up(port, context, documents, warned=warned)
                before_load = decided_records(records_db)
                loads.append(open_loop(scenario, port, context, documents, rate=args.rate, seconds=args.seconds,
                                       connections=args.connections, warned=warned))
            # Every live review has its record, decided or reported: how long after the load the last arrives.
            waited, total, answered = wait_for_records(records_db, before_load[0] + len(loads[-1].latencies))
            stop_process(processes["registry"], grace=10)
            warm_up(hook_port, context, documents, warned=True)
            loads.append(open_loop("cache", hook_port, context, documents, rate=args.rate, seconds=args.seconds,
                                   connections=args.connections, warned=True))
            print(f"round {number}: load average {before} -> {load_average()}")
            print(f"round {number} live records: {total - before_load[0]} of {len(loads[1].latencies)} in the audit "
                  f"log {waited:.2f} s after the load ended, {answered - before_load[1]} answered from the proof")
            floor_p99 = loads[0].percentile(0.99)
            for load in loads:
                print(f"round {number} {load.scenario:<5}: {len(load.latencies) + load.errors} reviews at "
                      f"{load.rate:.0f}/s: p50 {load.percentile(0.5):.2f} ms, p99 {load.percentile(0.99):.2f} ms, "
                      f"max {load.percentile(1.0):.2f} ms, errors {load.errors}, "
                      f"over {WEBHOOK_TIMEOUT:g} s {load.late}, p99/floor {load.percentile(0.99) / floor_p99:.1f}x"
                      + (f" (first error: {load.first_error})" if load.errors else ""))
        return 0
    finally:
        for process in processes.values():
            stop_process(process, grace=10)
        records_db.dispose()
        dbsupport.drop_pg_database(database_url)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
