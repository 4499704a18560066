"""Access control, pure: principals → the filter clause; ingest-side ACL validation.

A row is visible iff ``tenant_id == tenant`` AND (``visibility == public`` OR
``allowed_principals ∩ principals ≠ ∅``) AND ``denied_principals ∩ principals = ∅``
(DESIGN.md §5). The same clause goes into every retriever (BM25 query, kNN filter, both
``_msearch`` bodies, both native sub-retrievers) so that k hits are k visible hits and
nothing invisible can be retrieved, counted or highlighted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from es_rag.errors import AccessControlError
from es_rag.types import AccessControl, Caller

_PRINCIPAL = re.compile(r"^[a-z][a-z0-9_-]*:\S+$")
_DEFAULT_KIND = "user"


def normalize_principal(value: str, *, default_kind: str = _DEFAULT_KIND) -> str:
    """``alice`` → ``user:alice``; ``group:payments`` stays; malformed values raise."""
    value = value.strip()
    if not value:
        raise AccessControlError("empty principal")
    if ":" not in value:
        value = f"{default_kind}:{value}"
    if not _PRINCIPAL.match(value):
        raise AccessControlError(
            f"malformed principal {value!r}: expected KIND:NAME such as user:u1 or group:payments"
        )
    return value


def make_caller(
    tenant: str,
    *,
    users: Iterable[str] = (),
    groups: Iterable[str] = (),
    roles: Iterable[str] = (),
) -> Caller:
    """Build a caller from CLI-style flags (``--as``, ``--group``, ``--role``)."""
    if not tenant or not tenant.strip():
        raise AccessControlError("a tenant is required")
    principals = {normalize_principal(u, default_kind="user") for u in users}
    principals |= {normalize_principal(g, default_kind="group") for g in groups}
    principals |= {normalize_principal(r, default_kind="role") for r in roles}
    return Caller(tenant=tenant.strip(), principals=frozenset(principals))


def make_acl(
    tenant: str,
    *,
    allow: Iterable[str] = (),
    deny: Iterable[str] = (),
    public: bool = False,
) -> AccessControl:
    """Validate an ingest-side ACL: restricted documents must name who may read them."""
    if not tenant or not tenant.strip():
        raise AccessControlError("a tenant is required for every document")
    allowed = tuple(sorted({normalize_principal(p) for p in allow}))
    denied = tuple(sorted({normalize_principal(p) for p in deny}))
    if not public and not allowed:
        raise AccessControlError(
            "document has no ACL: give at least one --allow principal, or --public to make it "
            "readable by everyone in the tenant"
        )
    return AccessControl(
        tenant_id=tenant.strip(),
        visibility="public" if public else "restricted",
        allowed_principals=allowed,
        denied_principals=denied,
    )


def acl_filter(caller: Caller) -> dict[str, Any]:
    """The Elasticsearch bool clause that keeps exactly the rows ``caller`` may read.

    Used in filter context everywhere (no scoring, cacheable by the server).
    """
    principals = sorted(caller.principals)
    visible: list[dict[str, Any]] = [{"term": {"visibility": "public"}}]
    if principals:
        visible.append({"terms": {"allowed_principals": principals}})
    clause: dict[str, Any] = {
        "bool": {
            "filter": [
                {"term": {"tenant_id": caller.tenant}},
                {"bool": {"should": visible, "minimum_should_match": 1}},
            ]
        }
    }
    if principals:
        clause["bool"]["must_not"] = [{"terms": {"denied_principals": principals}}]
    return clause
