"""Licenses of mirrored versions: the Hub card (through the real huggingface_hub client against the test hub),
the README front matter and LICENSE files read back from the blob store, the submitter's declaration, conflicts,
gated upstreams, and hostile upstream values. SQLite and PostgreSQL (the ``database_url`` fixture)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import select
from typer.testing import CliRunner

from api.app import create_app
from registry.auth import issue_token
from registry.db.models import LicenseFinding, Principal, Version
from registry.domain.errors import UnrecognizedLicenseError
from registry.domain.text import printable
from registry.licenses.matching import TEXTS_DIR
from registry.services import licenses, versions
from registry.services.versions import SubmitRequest
from tests.support.hf_upstream import HfUpstream
from tests.support.live_app import serve_in_thread
from tests.support.registry import drain
from tests.support.tiny_model import tiny_model_files

APACHE = (TEXTS_DIR / "Apache-2.0.txt").read_bytes()
CC_BY_NC = (TEXTS_DIR / "CC-BY-NC-4.0.txt").read_bytes()
README = b"""---
license: apache-2.0
tags: [text-generation]
---
# Acme tiny

A model card.
"""


def _submit(container, admin, source, name="tiny", **kw):
    with container.session_factory() as session:
        version, _ = versions.submit(session, admin, "acme", name, SubmitRequest(source=source, **kw),
                                     open_source=container.open_source, limits=container.limits(),
                                     ports=container.ports)
        return version.id


def _record(container, version_id):
    """Mirror and seal: the seal step records the licenses; what it recorded."""
    drain(container)
    with container.session_factory() as session:
        version = session.get(Version, version_id)
        assert version.state == "awaiting_approval", version.failure_detail
        return version.license, {f["source"]: f for f in _findings(container, version_id)}


def _findings(container, version_id):
    with container.session_factory() as session:
        return [f.as_dict() for f in session.scalars(
            select(LicenseFinding).where(LicenseFinding.version_id == version_id).order_by(LicenseFinding.id))]


def test_card_readme_and_license_file_are_each_recorded_and_a_declared_conflict_is_a_finding(container, admin):
    with HfUpstream() as hub:
        container.settings.hf_allowed_endpoints.append(hub.url)
        hub.add_repo("org/acme", card_data={"license": "other", "license_name": "Acme Research License",
                                            "license_link": "https://acme.example/license"})
        hub.commit("org/acme", {**tiny_model_files(3), "README.md": README, "LICENSE": APACHE})
        version_id = _submit(container, admin, "hf://org/acme", hf_endpoint=hub.url, license="apache-2.0")
        resolved, found = _record(container, version_id)

    assert resolved == "Apache-2.0"
    assert found["declared"] | {} == {"source": "declared", "raw": "apache-2.0", "raw_length": None,
                                      "normalized": "Apache-2.0", "problem": None, "detail": None}
    assert (found["card"]["raw"], found["card"]["normalized"]) == ("other", "other:acme-research-license")
    assert found["card"]["detail"] == {"license_name": "Acme Research License",
                                       "license_link": "https://acme.example/license"}
    assert (found["readme"]["raw"], found["readme"]["normalized"]) == ("apache-2.0", "Apache-2.0")
    license_file = found["license_file:LICENSE"]
    assert license_file["normalized"] == "Apache-2.0"
    assert license_file["detail"]["method"] == "dice-word-3-gram" and license_file["detail"]["similarity"] == 1.0
    assert found["conflict"]["detail"] == {"declared": "Apache-2.0", "card": "other:acme-research-license"}
    # Recording again replaces, never adds.
    assert len(_findings(container, version_id)) == 5
    with container.session_factory() as session:
        licenses.record_licenses(session, session.get(Version, version_id), container.blob_store)
        session.commit()
    assert len(_findings(container, version_id)) == 5


def test_without_a_declaration_the_card_decides_and_a_restrictive_license_file_conflicts(container, admin):
    with HfUpstream() as hub:
        container.settings.hf_allowed_endpoints.append(hub.url)
        hub.add_repo("org/nc", card_data={"license": "mit"})
        hub.commit("org/nc", {**tiny_model_files(4), "LICENSE.md": CC_BY_NC})
        version_id = _submit(container, admin, "hf://org/nc", hf_endpoint=hub.url)
        with container.session_factory() as session:
            assert session.get(Version, version_id).license == "MIT"  # the card's, normalized at resolve
        resolved, found = _record(container, version_id)
    assert resolved == "MIT"
    assert found["license_file:LICENSE.md"]["normalized"] == "CC-BY-NC-4.0"
    assert found["conflict"]["problem"] == "card says MIT, license_file:LICENSE.md says CC-BY-NC-4.0"


@pytest.mark.parametrize("card_license", ["a license of many words " * 10, "x" * 10_000, "mit\x00", "mit\ud800",
                                          ["mit", "\x1b[2J"], {"id": "mit"}])
def test_a_hostile_upstream_license_is_kept_bounded_and_unrecognized(container, admin, card_license):
    """Issue 7: a card license over 128 characters was a 500 at submit on PostgreSQL. Neither length nor
    characters PostgreSQL cannot store (NUL, lone surrogates) fail the version or the findings."""
    with HfUpstream() as hub:
        container.settings.hf_allowed_endpoints.append(hub.url)
        hub.add_repo("org/verbose", card_data={"license": card_license})
        hub.commit("org/verbose", tiny_model_files(5))
        version_id = _submit(container, admin, "hf://org/verbose", hf_endpoint=hub.url)
        resolved, found = _record(container, version_id)
    assert resolved is None
    card = found["card"]
    assert card["normalized"] is None and card["problem"]
    if not isinstance(card_license, str):
        return
    if len(card_license) > 256:
        assert "longer than 256" in card["problem"]
    if len(card_license) > licenses.RAW_LIMIT:
        assert (len(card["raw"]), card["raw_length"]) == (licenses.RAW_LIMIT, len(card_license))
    else:
        assert (card["raw"], card["raw_length"]) == (printable(card_license), None)


def test_a_hostile_readme_front_matter_is_an_unrecognized_finding(container, admin, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    for path, data in tiny_model_files(6).items():
        (model / path).write_bytes(data)
    pwned = tmp_path / "pwned"
    (model / "README.md").write_text(f"---\nlicense: !!python/object/apply:os.system ['touch {pwned}']\n---\n")
    (model / "COPYING").write_bytes(b"All rights reserved. Do not copy.\n")
    version_id = _submit(container, admin, str(model), name="hostile", license="other:acme-eula")
    resolved, found = _record(container, version_id)
    assert resolved == "other:acme-eula"
    assert found["readme"]["normalized"] is None and "not YAML" in found["readme"]["problem"]
    assert found["license_file:COPYING"]["normalized"] is None
    assert "matches no SPDX text" in found["license_file:COPYING"]["problem"]
    assert not pwned.exists()


def test_an_unrecognized_declared_license_is_refused_before_anything_is_stored(container, admin, tmp_path):
    with pytest.raises(UnrecognizedLicenseError) as raised:
        _submit(container, admin, str(tmp_path), name="bogus", license="my-own-license")
    assert raised.value.details["license"] == "my-own-license"
    with container.session_factory() as session:
        assert session.scalars(select(Version)).first() is None


@pytest.mark.parametrize("whoami", [True, False])
def test_a_gated_upstream_records_which_token_accepted_its_terms(container, admin, whoami):
    token = "hf_registry_secret_token"
    with HfUpstream(token=token, token_owner="acme-mirror-bot" if whoami else None) as hub:
        container.settings.hf_endpoint = hub.url
        container.settings.hf_token = SecretStr(token)
        hub.add_repo("meta/gated", card_data={"license": "llama3.1"}, gated="manual")
        hub.commit("meta/gated", tiny_model_files(8))
        version_id = _submit(container, admin, "hf://meta/gated")
        resolved, found = _record(container, version_id)
    assert resolved == "other:llama3.1"
    with container.session_factory() as session:
        card = session.get(Version, version_id).upstream_card
    fingerprint = "sha256:" + hashlib.sha256(token.encode()).hexdigest()[:16]
    assert card["gated"] == "manual"
    assert card["access"] == {"token": "registry", "fingerprint": fingerprint,
                              "identity": "acme-mirror-bot" if whoami else None}
    assert token not in json.dumps(card)


def test_licenses_are_shown_by_the_api_and_by_version_show(container, admin, monkeypatch):
    with HfUpstream() as hub:
        container.settings.hf_allowed_endpoints.append(hub.url)
        hub.add_repo("org/shown", card_data={"license": "cc-by-nc-4.0"})
        hub.commit("org/shown", {**tiny_model_files(9), "LICENSE": CC_BY_NC})
        with container.session_factory() as session:
            issued = issue_token(session, session.scalar(select(Principal).where(Principal.name == admin.name)))
            session.commit()
        auth = {"Authorization": f"Bearer {issued.token}"}
        with TestClient(create_app(container), raise_server_exceptions=False) as client:
            r = client.post("/v1/models/acme/shown/versions", headers=auth,
                            json={"source": "hf://org/shown", "hf_endpoint": hub.url, "license": "MIT"})
            assert r.status_code == 202, r.text
            number = r.json()["version"]
            refused = client.post("/v1/models/acme/shown/versions", headers=auth,
                                  json={"source": "hf://org/shown", "hf_endpoint": hub.url, "license": "nope!"})
            assert refused.status_code == 422
            assert refused.json()["type"].endswith("/unrecognized-license")
            with container.session_factory() as session:
                version_id = session.scalar(select(Version.id).where(Version.number == number))
            _record(container, version_id)
            body = client.get(f"/v1/models/acme/shown/versions/{number}", headers=auth).json()
    shown = body["licenses"]
    assert (shown["resolved"], shown["declared"], shown["conflicts"]) == ("MIT", "MIT", 2)
    assert [f["source"] for f in shown["findings"]] == ["declared", "card", "license_file:LICENSE",
                                                        "conflict", "conflict"]
    assert body["license"] == "MIT"

    from registry.cli import app

    with serve_in_thread(create_app(container)) as url:
        result = CliRunner().invoke(app, ["version", "show", "acme/shown", str(number),
                                          "--url", url, "--token", issued.token])
    assert result.exit_code == 0, result.output
    assert "license: MIT (declared MIT)" in result.output
    assert "card: CC-BY-NC-4.0" in result.output
    assert "conflict: declared says MIT, card says CC-BY-NC-4.0" in result.output


def test_modelreg_submit_declares_a_license_and_refuses_an_unrecognized_one_in_one_line(container, admin, tmp_path):
    modelreg = str(Path(sys.executable).parent / "modelreg")
    model = tmp_path / "model"
    model.mkdir()
    for path, data in tiny_model_files(10).items():
        (model / path).write_bytes(data)
    with container.session_factory() as session:
        issued = issue_token(session, session.scalar(select(Principal).where(Principal.name == admin.name)))
        session.commit()
    with serve_in_thread(create_app(container)) as url:
        common = ["--model", "acme/declared", "--url", url, "--token", issued.token]
        refused = subprocess.run([modelreg, "submit", str(model), *common, "--license", "bogus-license"],
                                 capture_output=True, text=True, timeout=120)
        accepted = subprocess.run([modelreg, "submit", str(model), *common, "--license", "cc-by-nc-4.0", "--json"],
                                  capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "license 'bogus-license' is not recognized" in refused.stderr
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["licenses"]["declared"] == "cc-by-nc-4.0"
