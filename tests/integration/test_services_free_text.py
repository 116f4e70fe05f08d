"""Services refuse bad free text themselves, whatever the caller (API, CLI, workers)."""

from __future__ import annotations

import hashlib

import pytest

from registry.domain.errors import InvalidTextError
from registry.domain.files import FileEntry
from registry.services import identity, versions
from tests.support.registry import make_admin


def test_token_description(container, session):
    admin = make_admin(container)
    with pytest.raises(InvalidTextError) as error:
        identity.create_token(session, admin, admin.name, description="deploy \x1b]8;;http://evil\x07key")
    assert error.value.details["field"] == "description"


def test_submission_revision_source_and_label(container, session, tmp_path):
    admin = make_admin(container)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    for request, field in [
        (versions.SubmitRequest(source=str(tmp_path / "m"), revision="main\u202e"), "revision"),
        (versions.SubmitRequest(source=str(tmp_path / "m") + "\x00"), "source"),
        (versions.SubmitRequest(source="hf://org/repo", hf_endpoint="http://hub\x85"), "hf_endpoint"),
    ]:
        with pytest.raises(InvalidTextError) as error:
            versions.submit(session, admin, "acme", "m", request, open_source=container.open_source,
                            limits=container.limits(), ports=container.ports)
        assert error.value.details["field"] == field
    entry = FileEntry("config.json", 2, hashlib.sha256(b"{}").hexdigest())
    with pytest.raises(InvalidTextError) as error:
        versions.submit_uploaded(session, admin, "acme", "m", [entry], label="label\x9b2J",
                                 limits=container.limits(), ports=container.ports)
    assert error.value.details["field"] == "label"
