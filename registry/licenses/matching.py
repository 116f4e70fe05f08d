"""Which SPDX license a LICENSE file holds, by text similarity.

Both texts are normalized (lower case, every run of characters other than letters and digits becomes one
space, so line wrapping, punctuation and Markdown do not count) and split into word 3-grams (shingles). The
similarity is the Sorensen-Dice coefficient of the two shingle sets: 1.0 for the same words in the same
order, lower as words are added, dropped or changed. A file matches the best-scoring shipped text when that
score is at least ``THRESHOLD`` and ``MARGIN`` above the next text's; a copyright line or a filled-in ``<year>`` costs a
few shingles only, while siblings such as CC-BY-4.0 and CC-BY-NC-4.0 differ in whole clauses (about 0.97 to each other,
so the margin decides).

Usage (a sketch, not run as a doctest)::

    match_license_text(open("LICENSE").read())
    # -> LicenseMatch(spdx_id='Apache-2.0', similarity=0.98)
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

TEXTS_DIR = Path(__file__).parent / "texts"
THRESHOLD = 0.9
MARGIN = 0.01
METHOD = "dice-word-3-gram"
_NON_WORD = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class LicenseMatch:
    """The best shipped text for a file: its SPDX id and similarity (0..1); ``spdx_id`` is None below the
    threshold (``best`` then names the closest one, for the record)."""

    spdx_id: str | None
    similarity: float
    best: str | None


def shingles(text: str) -> frozenset[tuple[str, ...]]:
    """The word 3-grams of ``text`` after normalizing case, punctuation and whitespace."""
    words = _NON_WORD.sub(" ", text.lower()).split()
    if len(words) < 3:
        return frozenset({tuple(words)}) if words else frozenset()
    return frozenset(zip(words, words[1:], words[2:]))


def similarity(a: frozenset, b: frozenset) -> float:
    """Sorensen-Dice coefficient of two shingle sets."""
    if not a or not b:
        return 0.0
    return 2 * len(a & b) / (len(a) + len(b))


@functools.cache
def reference_shingles() -> dict[str, frozenset[tuple[str, ...]]]:
    """SPDX id -> shingles of each text in ``texts/``."""
    return {p.stem: shingles(p.read_text(encoding="utf-8")) for p in sorted(TEXTS_DIR.glob("*.txt"))}


def match_license_text(text: str, references: dict[str, frozenset] | None = None) -> LicenseMatch:
    """The shipped license ``text`` is, if one scores at least ``THRESHOLD`` and ``MARGIN`` above the next.

    Args:
        text: The file's text.
        references: SPDX id -> shingles to compare with; the shipped texts when None.
    """
    found = shingles(text)
    refs = reference_shingles() if references is None else references
    scored = sorted(((similarity(found, ref), spdx_id) for spdx_id, ref in refs.items()), reverse=True)
    score, best = scored[0] if scored else (0.0, None)
    runner_up = scored[1][0] if len(scored) > 1 else 0.0
    # Siblings (CC-BY-4.0 and CC-BY-NC-4.0) share most of their words: a file about as close to two of
    # them matches neither, rather than possibly the more permissive one.
    matched = score >= THRESHOLD and score - runner_up >= MARGIN
    return LicenseMatch(best if matched else None, round(score, 4), best)
