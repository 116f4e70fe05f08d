"""A version's license: what each place says, the resolved license, and the conflicts between them.

Places, in the order that decides the resolved license (``versions.license``):

1. ``declared``: what the submitter declared at submit (checked to normalize then);
2. ``card``: the Hub API's card data (``license``, and for ``license: other`` the ``license_name`` and
   ``license_link``), kept on the version at resolve time (``versions.upstream_card``);
3. ``readme``: the YAML front matter of ``README.md`` (between ``---`` lines at its top; the first
   ``README_LIMIT`` bytes only, ``yaml.safe_load``);
4. ``license_file:<path>``: ``LICENSE``, ``LICENSE.txt``, ``LICENSE.md`` or ``COPYING`` at the top of the
   version, its first ``LICENSE_FILE_LIMIT`` bytes matched against the SPDX texts
   (:mod:`registry.licenses.matching`).

Every place found is a row of ``license_findings`` with its raw value; a recognized license that differs
from the resolved one is a ``conflict`` finding beside it. Files are read from the blob store after
mirroring, with bounded ranged reads.

Usage (a sketch, not run as a doctest)::

    record_licenses(session, version, blob_store).license
    # -> 'Apache-2.0'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml
from sqlalchemy.orm import Session

from registry.db.models import LicenseFinding, Version
from registry.domain.errors import UnrecognizedLicenseError
from registry.domain.licenses import MAX_LICENSE_LENGTH, NormalizedLicense, normalize_license
from registry.domain.text import printable
from registry.licenses import matching
from registry.storage.base import BlobStore

RAW_LIMIT = 4096
"""Characters of a raw value kept in a finding; a longer one keeps this many and its full length."""
README_LIMIT = 64 * 1024
LICENSE_FILE_LIMIT = 256 * 1024
LICENSE_FILE_NAMES = ("license", "license.txt", "license.md", "copying")
README_NAME = "readme.md"
CARD_TEXT_FIELDS = ("license_name", "license_link")


@dataclass(frozen=True)
class LicenseRecord:
    """What ``record_licenses`` found: the resolved license and the findings, as stored."""

    license: str | None
    findings: list[LicenseFinding]


def bounded_raw(value: object) -> tuple[str | None, int | None]:
    """``value`` as text for a finding: cut at ``RAW_LIMIT`` characters, with the full length when cut.

    Lists and other YAML/JSON values are kept as their JSON text. Control, bidirectional and surrogate
    characters are escaped visibly (``\\x00``): PostgreSQL stores no NUL and UTF-8 no lone surrogate,
    and a reviewer must see them.
    """
    if value is None:
        return None, None
    text = printable(value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False))
    if len(text) > RAW_LIMIT:
        return text[:RAW_LIMIT], len(text)
    return text, None


def bounded_card(card: dict | None) -> dict | None:
    """An upstream's card fields as stored on the version (``versions.upstream_card``): every text cut at
    ``RAW_LIMIT`` with its full length beside it (``<field>_length``), so nothing is cut unsaid."""
    if card is None:
        return None
    stored: dict[str, Any] = {}
    for key, value in card.items():
        raw, length = bounded_raw(value) if key in ("license", *CARD_TEXT_FIELDS) else (None, None)
        if length is None:
            stored[key] = value
        else:
            stored[key], stored[f"{key}_length"] = raw, length
    return stored


def card_license(card: dict | None) -> NormalizedLicense | None:
    """The normalized license of stored card fields; None when the card names none."""
    if not card or card.get("license") is None:
        return None
    if "license_length" in card:
        return NormalizedLicense(None, f"longer than {MAX_LICENSE_LENGTH} characters")
    return normalize_license(card["license"], license_name=card.get("license_name"))


def check_declared(license: str | None) -> str | None:
    """Check a license declared at submit; returns it as given (stored raw, normalized when recorded).

    Raises:
        UnrecognizedLicenseError: it normalizes to nothing (unknown id, bad expression, too long, control
            characters).
    """
    if license is None:
        return None
    normalized = normalize_license(license)
    if normalized.id is None:
        raise UnrecognizedLicenseError(license if isinstance(license, str) else repr(license),
                                       normalized.problem or "unrecognized")
    return license


def record_licenses(session: Session, version: Version, blob_store: BlobStore) -> LicenseRecord:
    """Find a sealed (mirrored) version's licenses, store them as findings and set ``version.license``.

    Runs in the caller's transaction (it flushes, never commits) and replaces the version's earlier
    findings, so running it twice gives the same rows.

    Args:
        session: In a write transaction.
        version: A version whose files are mirrored (each has its ``sha256``).
        blob_store: Where those files are.

    Returns:
        The resolved license and the findings.

    Raises:
        BlobNotFoundError: a file the version lists is missing from the store.
    """
    rows: list[LicenseFinding] = []
    if version.declared_license is not None:
        rows.append(_row("declared", version.declared_license, normalize_license(version.declared_license)))
    card = version.upstream_card or {}
    normalized = card_license(card)
    if normalized is not None:
        detail = {k: card[k] for k in CARD_TEXT_FIELDS if card.get(k) is not None} or None
        # A value cut when it was stored on the version keeps the length the upstream's had.
        rows.append(_row("card", card["license"], normalized, detail, raw_length=card.get("license_length")))
    top_level = {f.path.lower(): f for f in version.files if "/" not in f.path and f.sha256}
    readme = read_readme(version, blob_store)
    if readme is not None:
        front = front_matter(readme)
        if front is not None:
            rows.append(_readme_finding(front))
    for name in LICENSE_FILE_NAMES:
        file = top_level.get(name)
        if file is not None:
            text = _read(blob_store, file.sha256, LICENSE_FILE_LIMIT).decode("utf-8", "replace")
            match = matching.match_license_text(text)
            problem = None if match.spdx_id else (
                f"matches no SPDX text (closest {match.best} at {match.similarity})")
            # The raw value of a file is its title line; the whole file is the blob its digest names.
            title = next((line.strip() for line in text.splitlines() if line.strip()), "")
            rows.append(_row(f"license_file:{file.path}", title, NormalizedLicense(match.spdx_id, problem),
                             {"method": matching.METHOD, "threshold": matching.THRESHOLD, "margin": matching.MARGIN,
                              "similarity": match.similarity, "closest": match.best, "sha256": file.sha256,
                              "bytes": file.size, "bytes_read": min(file.size, LICENSE_FILE_LIMIT)}))
    resolved = next((row for row in rows if row.normalized is not None), None)
    conflicts = [
        LicenseFinding(source="conflict", raw=None, normalized=None,
                       problem=f"{resolved.source} says {resolved.normalized}, {row.source} says {row.normalized}",
                       detail={resolved.source: resolved.normalized, row.source: row.normalized})
        for row in rows
        if resolved is not None and row.normalized is not None and row.normalized != resolved.normalized
    ]
    # Replaces the earlier findings (delete-orphan), so recording twice gives the same rows.
    version.license_findings = rows + conflicts
    version.license = resolved.normalized if resolved is not None else None
    session.flush()
    return LicenseRecord(version.license, rows + conflicts)


def _row(source: str, raw: object, normalized: NormalizedLicense, detail: dict[str, Any] | None = None,
         *, raw_length: int | None = None) -> LicenseFinding:
    text, cut_at = bounded_raw(raw)
    return LicenseFinding(source=source, raw=text, raw_length=raw_length or cut_at,
                          normalized=normalized.id, problem=normalized.problem, detail=detail)


def _read(blob_store: BlobStore, digest: str, limit: int) -> bytes:
    return b"".join(blob_store.open_range(digest, 0, limit))


def read_readme(version: Version, blob_store: BlobStore) -> bytes | None:
    """The first ``README_LIMIT`` bytes of the version's top-level ``README.md`` (any case); None when it has none.

    Raises:
        BlobNotFoundError: the README is missing from the store.
    """
    readme = next((f for f in version.files if f.path.lower() == README_NAME and f.sha256), None)
    return None if readme is None else _read(blob_store, readme.sha256, README_LIMIT)


def front_matter(data: bytes) -> dict[str, Any] | str | None:
    """The YAML mapping between the ``---`` lines at the top of a README; a string saying why it is
    unusable; None when the README has none."""
    text = data.decode("utf-8", "replace").lstrip("\ufeff")
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None
    try:
        end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == "---")
    except StopIteration:
        return f"front matter not closed within the first {README_LIMIT} bytes"
    try:
        loaded = yaml.safe_load("\n".join(lines[1:end]))
    # Hostile YAML of any kind (bad syntax, deep nesting) is only an unusable front matter.
    except (yaml.YAMLError, RecursionError, ValueError) as e:
        return f"front matter is not YAML: {type(e).__name__}"
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        return f"front matter is a {type(loaded).__name__}, not a mapping"
    return loaded


def _readme_finding(front: dict[str, Any] | str) -> LicenseFinding:
    if isinstance(front, str):
        return _row("readme", None, NormalizedLicense(None, front))
    value = front.get("license")
    if value is None:
        return _row("readme", None, NormalizedLicense(None, "front matter names no license"))
    detail = {k: bounded_raw(front[k])[0] for k in CARD_TEXT_FIELDS if front.get(k) is not None} or None
    return _row("readme", value, normalize_license(value, license_name=front.get("license_name")), detail)
