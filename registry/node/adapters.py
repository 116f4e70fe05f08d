"""An adapter on a node: the layout vLLM's filesystem resolver reads, the one rewrite, and the base beside it.

An adapter's release (``adapter_of``, ADR 0018) is fetched into ``DEST/<adapter name>/`` (the adapter model's
name: what vLLM's resolver takes as the LoRA's name under ``VLLM_LORA_RESOLVER_CACHE_DIR=DEST``), and with
``--with-base`` its base into ``DEST/<base name>/`` (``<base tenant>-<base name>`` when the two names are the
same), through the same door as any release: the base's release is asked for by the version number the
adapter's release names, opened with the same trust, and checked against ``adapter_of``
(:func:`registry.signing.release.check_base_release`: model, version, statement digest, weights digest) before a
byte of either is downloaded. The base is placed first, so a resolver never finds the adapter without it.

The adapter's directory is a fetched directory like any other, with one change: its ``adapter_config.json``
says ``base_model_name_or_path`` = the base's served name (``adapter_of.served_name``), so vLLM's string check
agrees with the signed binding (:func:`registry.domain.adapter_config.rewrite_base_name`, which changes only
that value's bytes). The signed original is kept as :data:`SIGNED_ADAPTER_CONFIG` (under ``.git/``, beside the
release file); ``modelreg verify`` hashes it against the release and checks that the config is exactly the
rewrite of it (:func:`rewrite_mismatches`). ``model_signing verify`` on that directory reports the rewritten
config, which its bundle signs as submitted; ``modelreg verify`` is the check of a fetched adapter.

Example:
    >>> from registry.signing.release import ReleaseFile
    >>> release = Release("acme/llm-support", "prod", "acme", 1, 1, None, None,
    ...                   (ReleaseFile("adapter_config.json", 2, "0" * 64),), {})
    >>> listed_path(release, "adapter_config.json"), written_paths(release)
    ('adapter_config.json', [])
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from registry.client.errors import BadManifestError
from registry.domain.adapter_config import MAX_CONFIG_BYTES, AdapterConfigError, rewrite_base_name
from registry.domain.errors import InvalidInputError
from registry.node.cache import sha256_file
from registry.signing.release import ADAPTER_CONFIG, Release

SIGNED_ADAPTER_CONFIG = ".git/modelreg-adapter-config.json"
"""Where a fetched adapter keeps its ``adapter_config.json`` as signed (``adapter_config.json`` is rewritten)."""


def is_adapter(release: Release) -> bool:
    return release.adapter_of is not None


def listed_path(release: Release, path: str) -> str:
    """Where a fetched directory holds the signed bytes of the release's file ``path``."""
    return SIGNED_ADAPTER_CONFIG if is_adapter(release) and path == ADAPTER_CONFIG else path


def written_paths(release: Release) -> list[str]:
    """What a fetched adapter's directory holds beside the release's files, its signature and release file."""
    return [SIGNED_ADAPTER_CONFIG] if is_adapter(release) else []


def adapter_dir_name(release: Release) -> str:
    """``<adapter name>``: the adapter model's name, the LoRA's name under vLLM's resolver."""
    return release.model.split("/", 1)[1]


def base_dir_name(release: Release) -> str:
    """``<base name>`` beside the adapter's directory (``<tenant>-<name>`` when the names are the same)."""
    assert release.adapter_of is not None
    name = release.adapter_of.name
    return f"{release.adapter_of.tenant}-{name}" if name == adapter_dir_name(release) else name


def _read_config(path: Path) -> bytes:
    with open(path, "rb") as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise BadManifestError(f"{ADAPTER_CONFIG} is over the {MAX_CONFIG_BYTES} bytes a node rewrites",
                               path=ADAPTER_CONFIG)
    return data


def expected_config(release: Release, signed: bytes) -> bytes:
    """The ``adapter_config.json`` a fetched adapter holds: ``signed`` with the base's served name written in.

    Raises:
        BadManifestError: the signed config cannot be rewritten (not one JSON object, a key twice...).
    """
    assert release.adapter_of is not None
    try:
        return rewrite_base_name(signed, release.adapter_of.served_name)
    except (AdapterConfigError, InvalidInputError) as exc:
        raise BadManifestError(f"the adapter's {ADAPTER_CONFIG} cannot be given its base's served name: {exc}",
                               path=ADAPTER_CONFIG) from None


def rewrite(release: Release, staging: Path) -> None:
    """In a staging directory whose files are verified: keep the signed config aside and write the rewritten one.

    Raises:
        BadManifestError: see :func:`expected_config`.
    """
    if not is_adapter(release):
        return
    config, kept = staging / ADAPTER_CONFIG, staging / SIGNED_ADAPTER_CONFIG
    rewritten = expected_config(release, _read_config(config))
    kept.parent.mkdir(parents=True, exist_ok=True)
    os.replace(config, kept)
    config.write_bytes(rewritten)
    config.chmod(0o444)


def rewrite_mismatches(release: Release, directory: Path) -> list[dict[str, str]]:
    """The difference between a fetched adapter's ``adapter_config.json`` and the rewrite of its signed original
    (already hashed against the release), as a ``ManifestMismatchError`` lists it; empty when they agree."""
    if not is_adapter(release):
        return []
    try:
        expected = expected_config(release, _read_config(directory / SIGNED_ADAPTER_CONFIG))
    except (BadManifestError, OSError) as exc:
        return [{"path": ADAPTER_CONFIG, "expected": "the signed config with its base's served name",
                 "actual": str(exc)[:300]}]
    try:
        actual = _read_config(directory / ADAPTER_CONFIG)
    except (BadManifestError, OSError) as exc:
        return [{"path": ADAPTER_CONFIG, "expected": "the signed config with its base's served name",
                 "actual": str(exc)[:300]}]
    if actual == expected:
        return []
    return [{"path": ADAPTER_CONFIG, "expected": hashlib.sha256(expected).hexdigest(),
             "actual": sha256_file(directory / ADAPTER_CONFIG)}]
