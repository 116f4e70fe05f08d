"""The hand mutation pass of issue 7: each mutant planted alone, its tests run, the file restored.

Usage (from the repository root, on a clean work tree: each file is restored with ``git checkout``)::

    python -m tests.support.mutation_pass            # every mutant
    python -m tests.support.mutation_pass J2 A1      # some

Prints one JSON line per mutant: the test files that failed, split into the suite before the pass
(``killed_by_old``) and the guards it added (``killed_by_new``). docs/mutation-pass.md has the results.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

WT = Path(__file__).resolve().parents[2]
PY = sys.executable
MATRIX = ["tests/e2e/test_authorization_matrix.py", *(f"tests/e2e/test_authorization_matrix_{f}.py" for f in
          ("console", "deployment", "hf", "models", "oci", "provenance"))]
NEW = {*MATRIX, "tests/e2e/test_readme.py",
       "tests/integration/test_registry_state_is_no_source.py"}
NEW_PREFIX = "tests/integration/test_guards_"  # further guard tests added during the pass

STORAGE = ["tests/integration/blob_store", "tests/e2e/test_api_uploads.py"]
JOBS = ["tests/integration/test_job_queue.py", "tests/integration/test_queue_postgres.py",
        "tests/integration/test_guards_queue.py"]
AUTH = [*MATRIX, "tests/integration/test_services_identity.py", "tests/e2e/test_api_uploads.py",
        "tests/e2e/test_cli_and_api.py"]
SIGN = ["tests/unit/signing", "tests/integration/test_model_signing_cli.py",
        "tests/e2e/test_readme.py::test_readme_use_block_runs_as_written[local]"]

M = [
 # id, file, text replaced, replacement, tests to run, what the bug is
 ("S1", "registry/storage/local.py",
  "            if expected_sha256 is not None and digest != expected_sha256:\n"
  "                raise DigestMismatchError",
  "            if False:\n                raise DigestMismatchError", STORAGE, "local put: digest check removed"),
 ("S2", "registry/storage/local.py",
  "            check_size(label, expected_size, size)\n            if expected_sha256",
  "            self._commit(tmp, digest)\n            check_size(label, expected_size, size)\n"
  "            if expected_sha256", STORAGE, "local put: commit before the size/digest checks"),
 ("S3", "registry/storage/local.py",
  "            check_size(label, expected_size, size)\n            if expected_sha256",
  "            if expected_sha256", STORAGE, "local put: size check (short body) removed"),
 ("S4", "registry/storage/local.py", "        if expires_at < time.time():", "        if False:",
  STORAGE + ["tests/e2e/test_cli_and_api.py::test_local_presigned_blob_url_serves_ranges_and_refuses_tampering"],
  "presigned URL: expiry not checked"),
 ("S5", "registry/storage/local.py", "            os.link(tmp, final)", "            os.replace(tmp, final)", STORAGE,
  "local commit overwrites an existing blob"),
 ("S6", "registry/storage/s3.py",
  "        if expected_sha256 is not None and digest != expected_sha256:\n            raise DigestMismatchError",
  "        if False:\n            raise DigestMismatchError", STORAGE, "s3 put: digest check removed"),
 ("S7", "registry/storage/s3.py", "            meter.finish(expected_sha256)\n            condition",
  "            condition", STORAGE, "s3 multipart: completed at the final key before the digest is verified"),
 ("S8", "registry/storage/s3.py",
  "            if self._stat_or_none(digest) is not None:\n"
  "                return PutResult(digest, meter.size, created=False)\n", "", STORAGE,
  "s3 promote: copies over an existing blob"),
 ("J1", "registry/jobs.py", "with_for_update(skip_locked=True)", "with_for_update()", JOBS,
  "claim: FOR UPDATE without SKIP LOCKED"),
 ("J2", "registry/jobs.py", ",\n                       _JOBS.c.attempts == job.attempts)", ")", JOBS,
  "settle: attempt number not checked (a stale attempt settles)"),
 ("J3", "registry/jobs.py", "_JOBS.c.locked_by == worker_id,", "", JOBS, "settle: lease holder not checked"),
 ("J4", "registry/jobs.py", "dead = not retry or job.attempts >= job.max_attempts",
  "dead = not retry or job.attempts > job.max_attempts", JOBS, "fail: one attempt more than max_attempts"),
 ("J5", "registry/jobs.py", "if row.attempts <= row.max_attempts:", "if row.attempts <= row.max_attempts + 1:", JOBS,
  "postgres claim: expired last attempt run again instead of dead"),
 ("J6", "registry/jobs.py", "if job.state == RUNNING and job.attempts >= job.max_attempts:",
  "if job.state == RUNNING and job.attempts > job.max_attempts:", JOBS,
  "sqlite claim: expired last attempt run again instead of dead"),
 ("J7", "registry/jobs.py", "c.lease_expires_at < now", "c.lease_expires_at > now", JOBS,
  "claim: takes jobs whose lease is still live"),
 ("J8", "registry/jobs.py", "            if existing.state == DEAD:", "            if False:", JOBS,
  "enqueue: a dead job with the key is not revived"),
 ("J9", "registry/jobs.py", "values.update(state=QUEUED, run_after=now + self.backoff(job.attempts))",
  "values.update(state=QUEUED, run_after=now)", JOBS, "fail: retry with no backoff"),
 ("A1", "registry/auth.py", "    if row.revoked_at is not None:\n", "    if False:\n", AUTH, "revoked tokens accepted"),
 ("A2", "registry/auth.py", "    if row.expires_at is not None and row.expires_at <= now:", "    if False:", AUTH,
  "expired tokens accepted"),
 ("A3", "registry/auth.py", "    if principal.disabled:", "    if False:", AUTH, "disabled principal accepted"),
 ("A4", "registry/services/versions.py", "    require(principal, tenant, Permission.READ)\n    return _get_version(",
  "    return _get_version(", AUTH, "read check removed (read_version)"),
 ("A5", "registry/services/versions.py", "    require(principal, tenant, Permission.READ)\n    model = _get_model(",
  "    model = _get_model(", AUTH, "read check removed (list_versions)"),
 ("A6", "registry/auth.py", "        for role, _capacity in self.roles.get(tenant, frozenset()):",
  "        for role, _capacity in (r for rs in self.roles.values() for r in rs):", AUTH,
  "tenant check: a role in any tenant counts in every tenant"),
 ("A7", "registry/auth.py", "    Role.NODE: frozenset({Permission.FETCH}),",
  "    Role.NODE: frozenset({Permission.FETCH, Permission.READ}),", AUTH, "role check: node may read"),
 ("A8", "registry/auth.py", "    if not principal.is_admin:",
  "    if not (principal.is_admin or Role.ADMIN in {r for rs in principal.roles.values() for r, _ in rs}):", AUTH,
  "require_admin: a tenant admin is a registry admin"),
 ("A9", "registry/auth.py", "row.expires_at <= now", "row.expires_at < now", AUTH, "token expiry boundary (<= to <)"),
 ("A10", "api/routers/blobs.py", "    require(principal, tenant, Permission.SUBMIT)\n    info", "    info", AUTH,
  "HEAD blob: submitter check removed"),
 ("G1", "registry/signing/dsse.py", "len(type_bytes), type_bytes, len(payload), payload",
  "len(payload_type), type_bytes, len(payload), payload", SIGN, "PAE: type length in characters, not bytes"),
 ("G2", "registry/signing/dsse.py",
  'return b"DSSEv1 %d %s %d %s" % (len(type_bytes), type_bytes, len(payload), payload)',
  'return b"DSSEv1 %d %s %s" % (len(type_bytes), type_bytes, payload)', SIGN, "PAE: payload length left out"),
 ("G3", "registry/signing/keys.py", "self._key_id = hashlib.sha256(self._pem).hexdigest()",
  "self._key_id = hashlib.sha256(self._pem.strip()).hexdigest()", SIGN,
  "key id over the PEM without its final newline"),
 ("G4", "registry/signing/dsse.py", "            if key.key_id in verified:\n                continue\n", "", SIGN,
  "threshold: one key counted twice"),
 ("G5", "registry/signing/bundle.py", "    if hint != key.key_id:", "    if False:", SIGN,
  "bundle: key hint not checked"),
 ("G6", "registry/signing/dsse.py", "    if actual_type != payload_type:", "    if False:", SIGN,
  "DSSE: payload type not checked"),
 ("G7", "registry/signing/bundle.py", '    if len(envelope["signatures"]) != 1:', "    if False:", SIGN,
  "bundle: more than one signature accepted"),
 ("G8", "registry/cli/versions.py", "    output.write_text(json.dumps(bundle))",
  '    output.write_text(json.dumps(bundle["dsseEnvelope"]))',
  SIGN + ["tests/unit/test_cli.py", "tests/e2e/test_cli_and_api.py"], "version signature writes only the envelope"),
 ("G9", "api/routers/keys.py", "    key = container.signing_key.public_key\n",
  "    from registry.signing.keys import SigningKey\n    key = SigningKey.generate().public_key\n",
  SIGN + ["tests/e2e/test_cli_and_api.py"], "/v1/keys serves an unrelated key"),
 ("X1", "registry/bootstrap.py", "            forbidden_paths.append(Path(store.path))\n", "            pass\n",
  ["tests/integration/test_registry_state_is_no_source.py", "tests/unit/sources",
   "tests/integration/test_sources_local.py",
   "tests/e2e/test_cli_and_api.py::test_errors_are_problem_json_with_stable_types"],
  "blob store accepted as a source (local)"),
 ("X2", "registry/bootstrap.py", "            forbidden_buckets.append(store.netloc)\n", "            pass\n",
  ["tests/integration/test_registry_state_is_no_source.py", "tests/unit/sources",
   "tests/integration/test_sources_s3.py"], "blob store accepted as a source (S3 bucket)"),
 ("S9", "registry/storage/local.py", 'f"GET\\n{digest}\\n{expires}"', 'f"GET\\n{expires}"',
  STORAGE + ["tests/e2e/test_cli_and_api.py::test_local_presigned_blob_url_serves_ranges_and_refuses_tampering"],
  "presigned URL: signature does not cover the digest (one URL opens every blob)"),
 ("A11", "registry/services/versions.py",
  "        LimitExceededError: ``size`` is over the largest file a version may hold.\n    \"\"\"\n"
  "    require(principal, tenant, Permission.SUBMIT)\n",
  "        LimitExceededError: ``size`` is over the largest file a version may hold.\n    \"\"\"\n", AUTH,
  "blob upload: submitter check removed"),
 ("A12", "api/routers/audit.py", "require(principal, tenant, Permission.AUDIT)",
  "require(principal, tenant, Permission.READ)", AUTH, "audit events: any reader of the tenant may read them"),
 ("A13", "registry/services/versions.py",
  "    require(principal, tenant, Permission.SUBMIT)\n    validate_name(\"model\", name)\n"
  "    tenant_row = get_tenant(session, tenant)\n    kind",
  "    validate_name(\"model\", name)\n    tenant_row = get_tenant(session, tenant)\n    kind", AUTH,
  "submit (hf/s3/local source): submitter check removed"),
]



def run(ids: set[str]) -> None:
    for mid, path, old, new, tests, desc in M:
        if ids and mid not in ids:
            continue
        # The file is restored from git afterwards: uncommitted edits in it would be lost.
        if subprocess.run(["git", "diff", "--quiet", "--", path], cwd=WT).returncode != 0:
            raise SystemExit(f"{path} has uncommitted changes; commit or stash them first")
        f = WT / path
        src = f.read_text()
        if src.count(old) < 1:
            rec = {"id": mid, "desc": desc, "error": "pattern not found"}
        else:
            f.write_text(src.replace(old, new))
            t0 = time.time()
            p = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=no", "-rf", *tests],
                               cwd=WT, env={**os.environ, "PYTHONPATH": str(WT)},
                               capture_output=True, text=True, timeout=1500)
            subprocess.run(["git", "checkout", "--", path], cwd=WT, check=True)
            failed = sorted(set(re.findall(r"^FAILED (\S+?)(?:::|\s)", p.stdout, re.M)))
            tail = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr[-300:]
            rec = {"id": mid, "desc": desc, "failed_files": failed,
                   "killed_by_old": [x for x in failed if x not in NEW and not x.startswith(NEW_PREFIX)],
                   "killed_by_new": [x for x in failed if x in NEW or x.startswith(NEW_PREFIX)],
                   "summary": tail, "seconds": round(time.time() - t0)}
        print(json.dumps(rec), flush=True)



if __name__ == "__main__":
    run(set(sys.argv[1:]))
