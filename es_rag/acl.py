"""Access control, pure: identity strings, principals → the filter clause, ACL validation.

A row is visible iff ``tenant_id == tenant`` AND (``visibility == public`` OR
``allowed_principals ∩ principals ≠ ∅``) AND ``denied_principals ∩ principals = ∅``
(DESIGN.md §5). The same clause goes into every retriever (BM25 query, kNN filter, both
``_msearch`` bodies, both native sub-retrievers) so that k hits are k visible hits and
nothing invisible can be retrieved, counted or highlighted.

Identity strings are compared as exact keywords by the server, so every tenant and
principal is brought to one form before it is written or asked for, by the same function
at ingest and at query time (``Ingestor`` and ``Searcher`` apply it to whatever they are
given, so no entry point can skip it):

- Unicode NFC, surrounding whitespace removed;
- the kind (``user``, ``group``, ``role``…) lower-cased; a bare name means ``user:NAME``;
- the name case-insensitive by default (Unicode case folding, then NFC again), or kept as
  given with ``ES_RAG_PRINCIPAL_CASE_SENSITIVE=true``; tenants follow the same policy;
- control, format (zero-width, bidi), surrogate, private-use and unassigned characters are
  refused, as is whitespace inside a principal; lengths are capped.

Without this, ``user:Alice`` and ``user:alice`` (or the NFC and NFD spellings of one name)
would be two people, and a deny entry written in the other form would silently not fire.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Any

from es_rag.errors import AccessControlError
from es_rag.types import AccessControl, Caller

_KIND = re.compile(r"^[a-z][a-z0-9_-]*$")
_DEFAULT_KIND = "user"
MAX_PRINCIPAL_CHARS = 256
MAX_TENANT_CHARS = 128
# Character classes no identity may contain: controls, format characters (zero-width
# spaces and joiners, bidi overrides, BOM), surrogates, private use, unassigned, and
# line/paragraph separators.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def identity_policy(case_sensitive: bool) -> str:
    """The normal form's name, recorded in the index contract: both sides must agree."""
    return "nfc" if case_sensitive else "nfc-casefold"


def _clean(value: Any, what: str, *, max_chars: int, spaces: bool) -> str:
    if not isinstance(value, str):
        raise AccessControlError(f"{what} must be a string, got {type(value).__name__}")
    text = unicodedata.normalize("NFC", value.strip())
    if not text:
        raise AccessControlError(f"empty {what}")
    for ch in text:
        category = unicodedata.category(ch)
        if category in _REFUSED_CATEGORIES:
            raise AccessControlError(
                f"{what} {value!r} contains U+{ord(ch):04X} ({category}): control, "
                "zero-width and other invisible characters are not allowed"
            )
        if category == "Zs" and not (spaces and ch == " "):
            raise AccessControlError(f"{what} {value!r} contains whitespace")
    if len(text) > max_chars:
        raise AccessControlError(f"{what} is {len(text)} characters long; the limit is {max_chars}")
    return text


def _fold(text: str, case_sensitive: bool) -> str:
    return text if case_sensitive else unicodedata.normalize("NFC", text.casefold())


def normalize_tenant(value: Any, *, case_sensitive: bool = False) -> str:
    """A tenant in its one form (single ASCII spaces allowed inside)."""
    text = _clean(value, "tenant", max_chars=MAX_TENANT_CHARS, spaces=True)
    return _fold(text, case_sensitive)


def normalize_principal(
    value: Any, *, default_kind: str = _DEFAULT_KIND, case_sensitive: bool = False
) -> str:
    """``Alice`` → ``user:alice``; ``Group:Payments`` → ``group:payments``; bad values raise."""
    text = _clean(value, "principal", max_chars=MAX_PRINCIPAL_CHARS, spaces=False)
    kind, sep, name = text.partition(":")
    if not sep:
        kind, name = default_kind, text
    kind = kind.lower()
    if not _KIND.match(kind) or not name:
        raise AccessControlError(
            f"malformed principal {value!r}: expected KIND:NAME such as user:u1 or group:payments"
        )
    out = f"{kind}:{_fold(name, case_sensitive)}"
    if len(out) > MAX_PRINCIPAL_CHARS:
        raise AccessControlError(
            f"principal is {len(out)} characters long; the limit is {MAX_PRINCIPAL_CHARS}"
        )
    return out


def make_caller(
    tenant: str,
    *,
    users: Iterable[str] = (),
    groups: Iterable[str] = (),
    roles: Iterable[str] = (),
    case_sensitive: bool = False,
) -> Caller:
    """Build a caller from CLI-style flags (``--as``, ``--group``, ``--role``)."""
    cs = case_sensitive
    principals = {normalize_principal(u, default_kind="user", case_sensitive=cs) for u in users}
    principals |= {normalize_principal(g, default_kind="group", case_sensitive=cs) for g in groups}
    principals |= {normalize_principal(r, default_kind="role", case_sensitive=cs) for r in roles}
    return Caller(
        tenant=normalize_tenant(tenant, case_sensitive=cs), principals=frozenset(principals)
    )


def make_acl(
    tenant: str,
    *,
    allow: Iterable[str] = (),
    deny: Iterable[str] = (),
    public: bool = False,
    case_sensitive: bool = False,
) -> AccessControl:
    """Validate an ingest-side ACL: restricted documents must name who may read them."""
    if not isinstance(tenant, str) or not tenant.strip():
        raise AccessControlError("a tenant is required for every document")
    cs = case_sensitive
    allowed = tuple(sorted({normalize_principal(p, case_sensitive=cs) for p in allow}))
    denied = tuple(sorted({normalize_principal(p, case_sensitive=cs) for p in deny}))
    return AccessControl(
        tenant_id=normalize_tenant(tenant, case_sensitive=cs),
        visibility="public" if public else "restricted",
        allowed_principals=allowed,
        denied_principals=denied,
    )


def normalize_acl(acl: AccessControl, *, case_sensitive: bool = False) -> AccessControl:
    """The same ACL in the one form (idempotent): what ingest writes, whoever built it."""
    return make_acl(
        acl.tenant_id,
        allow=acl.allowed_principals,
        deny=acl.denied_principals,
        public=acl.visibility == "public",
        case_sensitive=case_sensitive,
    )


def normalize_caller(caller: Caller, *, case_sensitive: bool = False) -> Caller:
    """The same caller in the one form (idempotent): what a search filters with."""
    cs = case_sensitive
    return Caller(
        tenant=normalize_tenant(caller.tenant, case_sensitive=cs),
        principals=frozenset(normalize_principal(p, case_sensitive=cs) for p in caller.principals),
    )


def check_acl(acl: AccessControl) -> None:
    """Refuse an ACL that cannot mean what it says (``AccessControl`` calls this itself)."""
    normalize_tenant(acl.tenant_id, case_sensitive=True)
    if acl.visibility not in ("public", "restricted"):
        raise AccessControlError(
            f"visibility must be 'public' or 'restricted', not {acl.visibility!r}"
        )
    for field_name in ("allowed_principals", "denied_principals"):
        values = getattr(acl, field_name)
        if isinstance(values, str) or not isinstance(values, tuple | list | frozenset | set):
            raise AccessControlError(f"{field_name} must be a sequence of principals")
        for p in values:
            normalize_principal(p, case_sensitive=True)
    if acl.visibility == "restricted" and not acl.allowed_principals:
        raise AccessControlError(
            "document has no ACL: give at least one --allow principal, or --public to make it "
            "readable by everyone in the tenant"
        )


def check_caller(caller: Caller) -> None:
    """Refuse a caller whose tenant or principals are malformed (``Caller`` calls this)."""
    normalize_tenant(caller.tenant, case_sensitive=True)
    if isinstance(caller.principals, str):
        raise AccessControlError("principals must be a set of strings, not one string")
    for p in caller.principals:
        normalize_principal(p, case_sensitive=True)


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
