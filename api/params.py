"""Path and query parameters the routers share, with the constraints the OpenAPI document states.

Each is an ``Annotated`` type whose pydantic constraints FastAPI both enforces (a value outside
them is a 422 problem before any service runs) and publishes. Integers are bounded by the column
they are compared with: PostgreSQL refuses a value past a column's range with an error (a 500),
and SQLite cannot bind an integer past 64 bits at all.

Usage (a sketch, not run as a doctest)::

    @router.get("/{tenant}/{name}/versions/{number}")
    def get_version(tenant: TenantName, name: ModelName, number: VersionNumber): ...
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from registry.auth import NAME_RE
from registry.domain.files import SHA256_RE
from registry.domain.refs import ALIAS_RE
from registry.workload_identity import is_node_principal_name

INT32_MAX = 2**31 - 1
"""The largest value of an ``Integer`` column (PostgreSQL ``integer``)."""
INT64_MAX = 2**63 - 1
"""The largest value of a ``BigInteger`` column, and of any SQLite integer."""


def _json_schema_pattern(python_re: re.Pattern[str]) -> str:
    """A whole-string Python pattern (``\\A...\\Z``) as JSON Schema and pydantic write it (``^...$``, where
    ``$`` is the end of the text, not the end of a line)."""
    body = python_re.pattern
    if not (body.startswith("\\A") and body.endswith("\\Z")):
        raise ValueError(f"not a whole-string pattern: {body}")
    return f"^{body[2:-2]}$"


NAME_PATTERN = _json_schema_pattern(NAME_RE)
SHA256_PATTERN = _json_schema_pattern(SHA256_RE)
_NAME = {"pattern": NAME_PATTERN, "min_length": 1, "max_length": 63}

TenantName = Annotated[str, Field(**_NAME, description="tenant name")]
ModelName = Annotated[str, Field(**_NAME, description="model name, unique within its tenant")]
AliasName = Annotated[str, Field(pattern=_json_schema_pattern(ALIAS_RE), min_length=1, max_length=63,
                                 description="alias name (prod, canary, staging...): a letter first")]
PrincipalName = Annotated[str, Field(**_NAME, description="principal name")]


def _any_principal_name(name: str) -> str:
    if NAME_RE.match(name) or is_node_principal_name(name):
        return name
    raise ValueError("not a principal name: a name (lower case, digits, '.', '_', '-') or a bound service "
                     "account's sa:NAMESPACE/SERVICE-ACCOUNT@ISSUER")


AnyPrincipalName = Annotated[str, Field(min_length=1, max_length=600,
                                        description="principal name, or a bound service account's "
                                                    "(sa:NAMESPACE/SERVICE-ACCOUNT@ISSUER)"),
                             AfterValidator(_any_principal_name)]
Sha256Hex = Annotated[str, Field(pattern=SHA256_PATTERN, min_length=64, max_length=64,
                                 description="sha256 of the blob, 64 lower-case hex digits")]
REF_PATTERN = r"^([1-9][0-9]{0,8}|[a-z][a-z0-9._-]{0,62})$"
"""A ref: a version number (nine digits at most) or an alias name."""
VersionNumber = Annotated[int, Field(ge=1, le=INT32_MAX, description="version number within its model")]
RowId = Annotated[int, Field(ge=1, le=INT64_MAX, description="a database id")]
AfterId = Annotated[int, Field(ge=0, le=INT64_MAX, description="what follows this id (0: from the start)")]
ByteCount = Annotated[int, Field(ge=0, le=INT64_MAX, description="a size in bytes")]
