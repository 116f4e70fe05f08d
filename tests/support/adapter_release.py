"""The adapter-serving tests' world: the release-unit world (``acme/llm@1``, the tiny Llama, in ``prod``) with
more base versions and a LoRA adapter approved and in ``prod``, all through the real pipeline.

- ``acme/llm@2``: the tiny Llama of seed 1 (other weights), approved, in no alias;
- ``acme/llm@3``: ``acme/llm@1``'s files and a README (the same weights), approved, in no alias;
- ``acme/llm-support@1``: a LoRA PEFT made for ``acme/llm@1`` (its config names the path it was trained from,
  :data:`TRAINED_FROM`), bound to ``acme/llm@1``, approved, ``prod`` -> 1;
- ``acme/llm-support@2``: a LoRA made for ``acme/llm@2``, bound to it, approved, in no alias;
- a ``node`` token of acme.

:func:`build_adapter_in_prod` builds it (``pytest.mark.seeded(builder=build_adapter_in_prod)``); the fixtures
``people`` and ``in_prod`` read it as they read the release-unit world.

Example:
    >>> pytestmark = pytest.mark.seeded(builder=build_adapter_in_prod)  # doctest: +SKIP
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

TRAINED_FROM = "/work/checkpoints/llama-tiny"
"""The ``base_model_name_or_path`` the submitted adapters say (a trainer's path, as PEFT writes it)."""
SERVED_NAME = f"{TENANT}/{NAME}"


def adapter_files(seed: int) -> dict[str, bytes]:
    """The adapter made for the tiny Llama of ``seed``, as submitted."""
    return tiny_adapter_files("lora", seed, TRAINED_FROM)


def promote(container, people, model: str, alias: str, number: int) -> None:
    """Move ``acme/<model>@<alias>`` to ``number`` as the ML approver does."""
    with container.session_factory() as session:
        aliases.promote(session, people["mia"], TENANT, model, alias, make_target(number), policy=container.policy,
                        clock=container.clock)


def build_adapter_in_prod(container, root: Path) -> dict:
    """The world of the module docstring: ``{"people", "files", "node"}``."""
    world = build_in_prod(container, root)
    people = world["people"]
    assert submit(container, people["admin"], root / "v2", tiny_llm_files(1)) == 2
    assert submit(container, people["admin"], root / "v3", {**tiny_llm_files(), "README.md": b"# tiny\n"}) == 3
    for number in (2, 3):
        assert approve(container, people, number) == "approved"
    with api(container) as client:
        for number, seed in ((1, 0), (2, 1)):
            r = submit_adapter(client, people["tokens"]["sam"], adapter_files(seed), f"{TENANT}/{NAME}@{number}",
                               label=f"adapter-{number}")
            assert r.status_code == 202 and r.json()["version"] == number, r.text
            drain(container)
            assert approve_adapter(container, people, number) == "approved"
    promote(container, people, ADAPTER, "prod", 1)
    return {**world, "node": role_token(container, "node-1", TENANT, "node")}
