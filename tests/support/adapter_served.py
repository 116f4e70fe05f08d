"""A released adapter, for the tests of how ``/hf`` and ``/v2`` serve adapters (the fetch tests: ``adapter_release``).

:func:`build_served_adapter` builds the world once per worker and database (a module marks itself
``pytest.mark.seeded(builder=build_served_adapter)`` and reads the ``seeded`` fixture): the release-unit world
(acme/llm@1, the tiny Llama, approved and in ``prod``, ``tests/support/release_unit.py``), acme/llm@2 (the same
Llama with other weights) approved but not promoted, and acme/llm-support@1, the LoRA PEFT made for acme/llm@1,
submitted ``adapter_of`` acme/llm@1 through the API, approved by the three approvers and promoted to ``prod``; every
job run, the OCI artifacts of all three built.

Example:
    >>> seeded["adapter"]["adapter_config.json"]  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

from registry.domain.aliases import make_target
from registry.services import aliases
from tests.support.adapter_submissions import ADAPTER, api, approve_adapter, submit_adapter
from tests.support.registry import drain, role_token
from tests.support.release_unit import NAME, TENANT, approve, build_in_prod, submit
from tests.support.tiny_adapter import tiny_adapter_files
from tests.support.tiny_llm import tiny_llm_files

BASE_REPO = f"{TENANT}/{NAME}"
ADAPTER_REPO = f"{TENANT}/{ADAPTER}"


def promote(container, people, name: str, number: int, alias: str = "prod") -> None:
    """Move ``alias`` of acme/``name`` to ``number`` (as the ML approver)."""
    with container.session_factory() as session:
        aliases.promote(session, people["mia"], TENANT, name, alias, make_target(number), policy=container.policy,
                        clock=container.clock)


def build_served_adapter(container, root: Path) -> dict:
    """The world (see the module's docstring): ``{"people", "files" (acme/llm@1's), "other_files" (@2's),
    "adapter" (acme/llm-support@1's, as submitted), "node" (a token of node-1, a serving node of acme)}``."""
    world = build_in_prod(container, root)
    people = world["people"]
    other = dict(tiny_llm_files(2))
    assert submit(container, people["admin"], root / "v2", other) == 2
    assert approve(container, people, 2) == "approved"
    files = dict(tiny_adapter_files("lora"))
    with api(container) as client:
        submitted = submit_adapter(client, people["tokens"]["sam"], files, f"{BASE_REPO}@1")
        assert submitted.status_code == 202, submitted.text
    drain(container)
    assert approve_adapter(container, people, 1) == "approved"
    promote(container, people, ADAPTER, 1)
    drain(container)
    return {**world, "other_files": other, "adapter": files, "node": role_token(container, "node-1", TENANT, "node")}
