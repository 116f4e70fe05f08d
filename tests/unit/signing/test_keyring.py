"""The key ring: the configured key, and the keys rotations leave in the data directory's keys/ folder."""

from __future__ import annotations

from registry.signing import keyring as keyring_module
from registry.signing.keyring import KeyRing
from registry.signing.keys import SigningKey, write_new_key


def test_the_primary_key_and_the_directory_keys_are_held(tmp_path):
    primary = SigningKey.generate()
    first = write_new_key(tmp_path / "signing-key-2.pem")
    (tmp_path / "notes.pem").write_text("not a key")  # skipped, not fatal
    ring = KeyRing(primary, tmp_path)
    assert set(ring.held()) == {primary.key_id, first.key_id}
    assert ring.find(["f" * 64, first.key_id, primary.key_id]).key_id == first.key_id
    assert ring.find(["f" * 64]) is None


def test_a_key_written_later_is_found_when_it_is_the_first_choice(tmp_path):
    primary = SigningKey.generate()
    ring = KeyRing(primary, tmp_path / "keys")
    later = write_new_key(tmp_path / "keys" / "signing-key-3.pem")
    # Preferred but not loaded yet: the folder is scanned again, rather than settling for the primary.
    assert ring.find([later.key_id, primary.key_id]).key_id == later.key_id


def test_a_missing_key_rescans_the_folder_at_most_once_per_interval(tmp_path, monkeypatch):
    ring = KeyRing(SigningKey.generate(), tmp_path)
    scans = []
    monkeypatch.setattr(ring, "rescan", lambda: scans.append(1))
    for _ in range(5):
        assert ring.find(["a" * 64]) is None
    assert len(scans) == 1
    monkeypatch.setattr(keyring_module, "RESCAN_SECONDS", 0.0)
    ring.find(["a" * 64])
    assert len(scans) == 2
