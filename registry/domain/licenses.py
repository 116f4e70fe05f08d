"""License normalization: what hubs and model cards write, turned into one comparable id.

A license id here is either an SPDX license expression in its canonical case (``Apache-2.0``,
``CC-BY-NC-4.0``, ``MIT AND (Apache-2.0 OR BSD-3-Clause)``, ``GPL-2.0-or-later WITH Classpath-exception-2.0``)
or ``other:<name>`` for a license SPDX does not list: the Hub's own ids (``llama3.1`` -> ``other:llama3.1``,
``openrail++`` -> ``other:openrail++``) and ``license: other`` with a ``license_name``.

Upstream metadata is hostile input: a value that is too long, holds control or bidirectional characters,
is not a string, or names no known license is *unrecognized* (``NormalizedLicense.id is None`` with a
``problem`` that says why); nothing here raises on bad input, and nothing is truncated.

SPDX ids and expression parsing come from the ``license-expression`` package (the SPDX list it ships,
loaded once from package data; no network, no database), so this module stays free of I/O otherwise.

Example:
    >>> normalize_license("apache-2.0").id
    'Apache-2.0'
    >>> normalize_license("other", license_name="Acme Research License").id
    'other:acme-research-license'
    >>> normalize_license("llama3.1").id
    'other:llama3.1'
    >>> normalize_license("x" * 500).problem
    'longer than 256 characters'
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from registry.domain.text import text_problem

MAX_LICENSE_LENGTH = 256
"""The longest license value (an id or an expression) that is parsed at all; a normalized id is never longer."""
LICENSE_ID_MAX_LENGTH = 128
"""The longest normalized id (the ``versions.license`` column); a longer expression is unrecognized."""
MAX_LICENSES_IN_LIST = 16
OTHER_PREFIX = "other:"

# The Hub's license ids (its model card "license" field) that name an SPDX license by another key.
_HUB_TO_SPDX = {
    "odbl": "ODbL-1.0",
    "odc-by": "ODC-By-1.0",
    "pddl": "PDDL-1.0",
}

# The Hub's license ids that SPDX does not list (or that name a family, like "bsd"): kept as other:<id>.
HUB_NON_SPDX_IDS = frozenset({
    "openrail", "openrail++", "bigscience-openrail-m", "creativeml-openrail-m", "bigscience-bloom-rail-1.0",
    "bigcode-openrail-m", "llama2", "llama3", "llama3.1", "llama3.2", "llama3.3", "llama4", "gemma",
    "deepfloyd-if-license", "fair-noncommercial-research-license", "apple-ascl", "apple-amlr",
    "intel-research", "h-research", "c-uda", "lgpl-lr", "bsd", "cc", "gpl", "lgpl", "gfdl", "cdla-permissive-1.0",
    "cdla-sharing-1.0",
})

# What a license_name may become after slugging: the Hub's own ids look like this.
_SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9.+_-]*$")
_SLUG_STRIP = re.compile(r"[^a-z0-9.+_-]+")


@dataclass(frozen=True)
class NormalizedLicense:
    """The outcome of normalizing one declared license.

    Attributes:
        id: The SPDX expression or ``other:<name>``; None when unrecognized.
        problem: Why it is unrecognized (None when ``id`` is set).
    """

    id: str | None
    problem: str | None = None

    @property
    def recognized(self) -> bool:
        return self.id is not None


def _unrecognized(problem: str) -> NormalizedLicense:
    return NormalizedLicense(None, problem)


@functools.cache
def _spdx() -> Any:
    # Imported here: building the licensing index reads a few MB of package data, once per process.
    from license_expression import get_spdx_licensing

    return get_spdx_licensing()


def _check_text(value: object, what: str) -> str | NormalizedLicense:
    if not isinstance(value, str):
        return _unrecognized(f"{what} is a {type(value).__name__}, not text")
    problem = text_problem(value, MAX_LICENSE_LENGTH)
    if problem is not None:
        return _unrecognized(problem[0])
    stripped = value.strip()
    if not stripped:
        return _unrecognized(f"{what} is empty")
    return stripped


def slug(name: str) -> str:
    """A license name as a Hub-style id: lower case, runs of other characters become one ``-``."""
    return _SLUG_STRIP.sub("-", name.strip().lower()).strip("-")


def normalize_license(value: object, *, license_name: object = None) -> NormalizedLicense:
    """Normalize a declared license (a card's ``license``, a front matter's, a submitter's).

    Args:
        value: A string (a Hub id, an SPDX id or expression, ``other``, or ``other:<name>``) or a list
            of them (a card listing several licenses: all of them apply, so they are joined with AND).
        license_name: The card's ``license_name``, used when ``value`` is ``other``.

    Returns:
        The normalized license, or an unrecognized one saying why. Never raises.
    """
    if isinstance(value, (list, tuple)):
        return _normalize_list(list(value), license_name)
    text = _check_text(value, "license")
    if isinstance(text, NormalizedLicense):
        return text
    lowered = text.lower()
    if lowered == "other":
        return _other(license_name)
    if lowered.startswith(OTHER_PREFIX):
        return _other(text[len(OTHER_PREFIX):])
    if lowered == "unknown":
        return _unrecognized("declared as unknown")
    if lowered in _HUB_TO_SPDX:
        return NormalizedLicense(_HUB_TO_SPDX[lowered])
    if lowered in HUB_NON_SPDX_IDS:
        return NormalizedLicense(OTHER_PREFIX + lowered)
    return _parse_spdx(text)


def _other(name: object) -> NormalizedLicense:
    if name is None:
        return _unrecognized("license 'other' without a license_name")
    text = _check_text(name, "license_name")
    if isinstance(text, NormalizedLicense):
        return text
    name_slug = slug(text)
    if not name_slug or not _SLUG_RE.match(name_slug):
        return _unrecognized(f"license_name {text!r} has no usable name")
    if len(OTHER_PREFIX + name_slug) > LICENSE_ID_MAX_LENGTH:
        return _unrecognized(f"license_name longer than {LICENSE_ID_MAX_LENGTH - len(OTHER_PREFIX)} characters")
    return NormalizedLicense(OTHER_PREFIX + name_slug)


def _normalize_list(values: list[object], license_name: object) -> NormalizedLicense:
    if not values:
        return _unrecognized("license is an empty list")
    if len(values) > MAX_LICENSES_IN_LIST:
        return _unrecognized(f"more than {MAX_LICENSES_IN_LIST} licenses listed")
    ids: list[str] = []
    for value in values:
        if isinstance(value, (list, tuple)):
            return _unrecognized("license is a nested list")
        one = normalize_license(value, license_name=license_name)
        if one.id is None:
            return one
        ids.append(one.id if " " not in one.id else f"({one.id})")
    unique = list(dict.fromkeys(ids))
    if len(unique) == 1:
        return normalize_license(values[0], license_name=license_name)
    joined = " AND ".join(unique)
    if len(joined) > LICENSE_ID_MAX_LENGTH:
        return _unrecognized(f"the licenses listed are longer than {LICENSE_ID_MAX_LENGTH} characters together")
    return NormalizedLicense(joined)


def _parse_spdx(text: str) -> NormalizedLicense:
    from license_expression import ExpressionError, ExpressionParseError

    try:
        expression = _spdx().parse(text, validate=True, strict=True)
    except ExpressionParseError as e:
        return _unrecognized(f"not a license expression: {e}")
    except ExpressionError as e:
        return _unrecognized(f"not an SPDX license: {e}")
    # Anything else a parser of hostile text raises is still only an unrecognized license.
    except Exception as e:  # noqa: BLE001
        return _unrecognized(f"not a license expression: {type(e).__name__}")
    if expression is None:
        return _unrecognized("license is empty")
    rendered = expression.render("{symbol.key}")
    if len(rendered) > LICENSE_ID_MAX_LENGTH:
        return _unrecognized(f"longer than {LICENSE_ID_MAX_LENGTH} characters once normalized")
    return NormalizedLicense(rendered)

