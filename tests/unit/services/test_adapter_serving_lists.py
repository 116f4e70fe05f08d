"""What a base's ``version.revoked`` says of its adapters: those of the base's own tenant only (another tenant's
readers of the event must not learn them; they get their own ``adapter.unservable``), at most 100, and the count."""

from __future__ import annotations

from types import SimpleNamespace

from registry.services.adapter_serving import MAX_LISTED_ADAPTERS, listed_in_revocation


def _version(tenant: str, name: str, number: int) -> SimpleNamespace:
    return SimpleNamespace(model=SimpleNamespace(tenant=SimpleNamespace(name=tenant), name=name), number=number)


def test_only_the_bases_tenant_s_adapters_are_named_and_the_list_is_bounded():
    base = _version("acme", "llm", 1)
    adapters = [_version("acme", "support", 1), _version("globex", "theirs", 4), _version("acme", "legal", 2)]
    assert listed_in_revocation(base, adapters) == {"adapters": ["acme/support@1", "acme/legal@2"],
                                                   "adapters_total": 2}
    many = [_version("acme", "support", n) for n in range(1, MAX_LISTED_ADAPTERS + 6)]
    listed = listed_in_revocation(base, many)
    assert len(listed["adapters"]) == MAX_LISTED_ADAPTERS and listed["adapters_total"] == MAX_LISTED_ADAPTERS + 5
