"""The ACL guard: no search body leaves es-rag without the caller's ACL in every retriever.

Builders already put the ACL filter everywhere; this is the independent check that catches
a future builder (or a hand-edited body) that forgets one. A body that fails it is a bug in
es-rag, never a user error, so it raises ``AclGuardError`` and nothing is sent.

What must carry the clause (``acl`` itself, as one element of a ``filter`` list):
- every top-level ``query`` (inside ``bool.filter``),
- every ``knn`` clause (top-level ``knn``, a list of them, and the ``knn`` retriever) in its
  ``filter``,
- every ``standard`` retriever's query, recursively through ``rrf``/``linear`` retrievers,
- OpenSearch-style ``knn`` queries (``query.knn.<field>.filter``, the ACL or a ``bool``
  whose ``filter`` holds it) likewise, and every clause of an OpenSearch ``hybrid`` query,
- every search body of an ``_msearch``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from es_rag.errors import AclGuardError


def _has_acl(filters: Any, acl: dict[str, Any]) -> bool:
    if isinstance(filters, dict):
        filters = [filters]
    return isinstance(filters, list) and any(f == acl for f in filters)


def _query_ok(query: Any, acl: dict[str, Any]) -> bool:
    if not isinstance(query, dict):
        return False
    if "bool" in query:
        return _has_acl(query["bool"].get("filter"), acl)
    if "knn" in query:  # OpenSearch knn query: {"knn": {field: {"vector":…, "filter":…}}}
        inner = query["knn"]
        return bool(inner) and all(_knn_filter_ok(spec, acl) for spec in inner.values())
    if "hybrid" in query:  # OpenSearch hybrid query: every clause on its own
        clauses = query["hybrid"].get("queries") or []
        return bool(clauses) and all(_query_ok(clause, acl) for clause in clauses)
    return False


def _knn_filter_ok(spec: Any, acl: dict[str, Any]) -> bool:
    """The OpenSearch kNN ``filter`` is one query: the ACL itself or a bool holding it."""
    if not isinstance(spec, dict):
        return False
    flt = spec.get("filter")
    if _has_acl(flt, acl):
        return True
    return isinstance(flt, dict) and "bool" in flt and _has_acl(flt["bool"].get("filter"), acl)


def _retriever_problems(retriever: Any, acl: dict[str, Any], path: str) -> Iterator[str]:
    if not isinstance(retriever, dict) or len(retriever) != 1:
        yield f"{path}: not a retriever"
        return
    ((kind, spec),) = retriever.items()
    if kind == "standard":
        if not _query_ok(spec.get("query"), acl):
            yield f"{path}.standard.query lacks the ACL filter"
    elif kind == "knn":
        if not _has_acl(spec.get("filter"), acl):
            yield f"{path}.knn lacks the ACL filter"
    elif kind in ("rrf", "linear"):
        children = spec.get("retrievers") or []
        if not children:
            yield f"{path}.{kind} has no retrievers"
        for i, child in enumerate(children):
            inner = child.get("retriever", child) if isinstance(child, dict) else child
            yield from _retriever_problems(inner, acl, f"{path}.{kind}.retrievers[{i}]")
    else:
        yield f"{path}: retriever {kind!r} is not known to the ACL guard"


def problems(body: dict[str, Any], acl: dict[str, Any]) -> list[str]:
    """Every place in ``body`` that could return rows without the ACL (empty = safe)."""
    found: list[str] = []
    retrieves = False
    if "query" in body:
        retrieves = True
        if not _query_ok(body["query"], acl):
            found.append("query lacks the ACL filter")
    if "knn" in body:
        retrieves = True
        clauses = body["knn"] if isinstance(body["knn"], list) else [body["knn"]]
        for i, clause in enumerate(clauses):
            if not isinstance(clause, dict) or not _has_acl(clause.get("filter"), acl):
                found.append(f"knn[{i}] lacks the ACL filter")
    if "retriever" in body:
        retrieves = True
        found.extend(_retriever_problems(body["retriever"], acl, "retriever"))
    if not retrieves:
        found.append("body has no query, knn or retriever (it would match every row)")
    return found


def check_body(body: dict[str, Any], acl: dict[str, Any]) -> None:
    found = problems(body, acl)
    if found:
        raise AclGuardError(
            "refusing to send a search without the caller's ACL: " + "; ".join(found)
        )


def check_msearch(searches: Sequence[dict[str, Any]], acl: dict[str, Any]) -> None:
    """``searches`` alternates header and body, as ``_msearch`` takes them."""
    if len(searches) % 2:
        raise AclGuardError("msearch: header/body pairs expected")
    for i in range(1, len(searches), 2):
        found = problems(searches[i], acl)
        if found:
            raise AclGuardError(
                f"refusing to send msearch body {i // 2} without the caller's ACL: "
                + "; ".join(found)
            )
