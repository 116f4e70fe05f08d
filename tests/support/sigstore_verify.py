"""npm's ``@sigstore/verify`` as the tests run it: a stock Sigstore verifier checking a bundle key-based.

:func:`verify` installs it from the committed lockfile (``npm ci`` into ``tests/support/sigstore_verify/
node_modules``) when absent, then runs ``verify.mjs`` under Node with the bundle, the signed bytes and the
trusted keys (hint -> PEM), and returns its verdict. A missing ``node`` or ``npm``, or a failed install,
fails the test: it is never skipped.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.interprocess import exclusive

HERE = Path(__file__).resolve().parent / "sigstore_verify"


def ensure_installed() -> None:
    """``npm ci`` the verifier once (the lockfile pins every package)."""
    with exclusive(HERE / "node_modules.lock"):
        if (HERE / "node_modules" / "@sigstore" / "verify" / "package.json").exists():
            return
        for tool in ("node", "npm"):
            if shutil.which(tool) is None:
                pytest.fail(f"the signature tests need `{tool}` on PATH (the verifier is npm's @sigstore/verify)",
                            pytrace=False)
        done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=HERE, capture_output=True, text=True,
                              timeout=600)
        if done.returncode != 0:
            pytest.fail(f"npm ci of @sigstore/verify failed: {done.stderr[-2000:]}", pytrace=False)


def verify(bundle: bytes, artifact: bytes, keys: dict[str, str]) -> dict[str, Any]:
    """``@sigstore/verify``'s verdict on ``bundle`` over ``artifact`` with ``keys`` trusted (no tlog, no
    certificate authority): ``{"ok": True}`` or ``{"ok": False, "code": ..., "message": ...}``."""
    ensure_installed()
    request = {"bundle": json.loads(bundle), "artifact_b64": base64.b64encode(artifact).decode(), "keys": keys}
    done = subprocess.run(["node", "verify.mjs"], cwd=HERE, input=json.dumps(request), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)
