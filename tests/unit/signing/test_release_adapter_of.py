"""An adapter's release names its base (``adapter_of``), signed with the rest: a malformed one is refused as
malformed, and :func:`check_base_release` holds a base release against it field by field."""

from __future__ import annotations

import base64
import datetime as dt
import json

import pytest

from registry.domain.components import components_map, unit_components
from registry.domain.errors import AdapterBaseMismatchError, SignatureError
from registry.domain.files import FileEntry
from registry.signing.keys import SigningKey
from registry.signing.release import (
    base_weights_digest,
    check_base_release,
    release_payload,
    sign_release,
    verify_release,
)
from registry.signing.trust_root import parse_root, root_document, sign_root

NOW = dt.datetime(2026, 12, 8, tzinfo=dt.timezone.utc)
KEY = SigningKey.generate()
ROOT = parse_root(sign_root(root_document(1, [KEY.public_key], 1, NOW + dt.timedelta(days=365)), [KEY]))
BASE_FILES = [{"path": "config.json", "size": 2, "sha256": "1" * 64},
              {"path": "model.safetensors", "size": 8, "sha256": "2" * 64}]
ADAPTER_FILES = [{"path": "adapter_config.json", "size": 2, "sha256": "3" * 64},
                 {"path": "adapter_model.safetensors", "size": 8, "sha256": "4" * 64}]
WEIGHTS = components_map(unit_components([FileEntry(**f) for f in BASE_FILES], {}))["weights"]
BOUND = {"model": "acme/llm", "ref": "prod", "version": 3, "bound_version": 1, "weights_digest": WEIGHTS,
         "statement_digest": "5" * 64, "served_name": "acme/llm"}


def _release(model: str, ref: str, files: list[dict], *, version: int = 1, statement: str = "5" * 64,
             adapter_of: dict | None = None, payload_edit=None):
    payload = release_payload(model=model, ref=ref, tenant="acme", version=version,
                              source={"kind": "upload", "repo": "x", "revision": "0" * 40}, files=files,
                              license=None, facts=None, statement_digest=statement, approval_digest="d" * 64,
                              serial=1, issued_at=NOW, expires_at=NOW + dt.timedelta(minutes=5),
                              adapter_of=adapter_of)
    if payload_edit is not None:
        payload_edit(payload)
    return verify_release(sign_release(payload, [KEY]), ROOT, now=NOW, model=model, ref=ref)


def test_the_adapter_of_is_read_from_the_signed_release_and_matches_its_base():
    adapter = _release("acme/llm-support", "prod", ADAPTER_FILES, adapter_of=BOUND)
    assert adapter.adapter_of is not None and adapter.adapter_of.as_dict() == BOUND
    assert (adapter.adapter_of.tenant, adapter.adapter_of.name) == ("acme", "llm")
    base = _release("acme/llm", "3", BASE_FILES, version=3)
    assert base.adapter_of is None and base_weights_digest(base) == WEIGHTS
    check_base_release(adapter, base)
    with pytest.raises(ValueError):
        check_base_release(base, adapter)


@pytest.mark.parametrize("base_kwargs,differ", [
    ({"version": 2}, ["version"]),
    ({"statement": "6" * 64}, ["statement_digest"]),
    ({"files": [BASE_FILES[0], {**BASE_FILES[1], "sha256": "7" * 64}]}, ["weights_digest"]),
    ({"version": 2, "statement": "6" * 64}, ["version", "statement_digest"]),
])
def test_a_base_release_that_is_not_the_one_named_is_refused_with_what_differs(base_kwargs, differ):
    adapter = _release("acme/llm-support", "prod", ADAPTER_FILES, adapter_of=BOUND)
    kwargs = {"version": 3, "files": BASE_FILES, **base_kwargs}
    base = _release("acme/llm", "3", kwargs.pop("files"), **kwargs)
    with pytest.raises(AdapterBaseMismatchError) as refused:
        check_base_release(adapter, base)
    assert refused.value.details["differ"] == differ


@pytest.mark.parametrize("edit", [
    lambda p: p["adapter_of"].pop("served_name"),
    lambda p: p["adapter_of"].update(extra=1),
    lambda p: p["adapter_of"].update(version="3"),
    lambda p: p["adapter_of"].update(bound_version=0),
    lambda p: p["adapter_of"].update(weights_digest="A" * 64),
    lambda p: p["adapter_of"].update(model="acme/llm@3"),
    lambda p: p["adapter_of"].update(model="llm"),
    lambda p: p["adapter_of"].update(ref="../x"),
    lambda p: p["adapter_of"].update(served_name="a\nb"),
    lambda p: p.update(adapter_of=["acme/llm"]),
    lambda p: p.update(files=[f for f in p["files"] if f["path"] != "adapter_config.json"]),
])
def test_a_malformed_adapter_of_is_refused_as_malformed(edit):
    with pytest.raises(SignatureError) as refused:
        _release("acme/llm-support", "prod", ADAPTER_FILES, adapter_of=BOUND, payload_edit=edit)
    assert refused.value.details["reason"] == "malformed"


def test_the_adapter_of_is_covered_by_the_signature():
    payload = release_payload(model="acme/llm-support", ref="prod", tenant="acme", version=1,
                              source={"kind": "upload", "repo": "x", "revision": "0" * 40}, files=ADAPTER_FILES,
                              license=None, facts=None, statement_digest="5" * 64, approval_digest="d" * 64,
                              serial=1, issued_at=NOW, expires_at=NOW + dt.timedelta(minutes=5), adapter_of=BOUND)
    envelope = sign_release(payload, [KEY])
    edited = json.loads(base64.b64decode(envelope["payload"]))
    edited["adapter_of"]["served_name"] = "acme/other"
    envelope["payload"] = base64.b64encode(json.dumps(edited).encode()).decode()
    with pytest.raises(SignatureError):
        verify_release(envelope, ROOT, now=NOW, model="acme/llm-support", ref="prod")
