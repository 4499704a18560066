"""The ACL guard: no search body leaves es-rag without the caller's ACL in every retriever.

Builders already put the ACL filter everywhere; this is the independent check that catches
a future builder (or a body that callers shaped, such as a search frontend's aggregations)
that forgets one or reaches around it. A body that fails it raises ``AclGuardError`` and
nothing is sent.

It is an allow-list: every top-level key of a body must be one it knows, and each is
checked for what it could reveal.

What must carry the clause (``acl`` itself, as one element of a ``filter`` list):
- every top-level ``query`` (inside ``bool.filter``),
- every ``knn`` clause (top-level ``knn``, a list of them, and the ``knn`` retriever) in its
  ``filter``,
- every ``standard`` retriever's query, recursively through ``rrf``/``linear`` retrievers,
- OpenSearch-style ``knn`` queries (``query.knn.<field>.filter``, the ACL or a ``bool``
  whose ``filter`` holds it) likewise, and every clause of an OpenSearch ``hybrid`` query,
- every search body of an ``_msearch`` (whose headers are allow-listed too).

What is refused because it reads past the query's rows: ``suggest`` (the term dictionary
of the whole index), ``global`` and ``significant_*`` aggregations (the whole index as
background), ``terms`` with ``min_doc_count: 0`` (every value of the field, any tenant's),
``runtime_mappings`` (a runtime field can shadow ``tenant_id`` itself), ``collapse`` and
``profile``; and scripts anywhere in an aggregation.
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


# Keys that only shape, sort or count the rows the (ACL-filtered) query matched. Each value
# is the check its value must pass.
_SHAPE_KEYS = frozenset(
    {
        "size",
        "from",
        "_source",
        "highlight",
        "track_total_hits",
        "track_scores",
        "explain",
        "min_score",
        "timeout",
        "terminate_after",
        "search_after",
        "stored_fields",
        "docvalue_fields",
        "fields",
        "version",
        "seq_no_primary_term",
    }
)
_RETRIEVAL_KEYS = frozenset({"query", "knn", "retriever"})
_CHECKED_KEYS = frozenset({"sort", "post_filter", "aggs", "aggregations"})
KNOWN_KEYS = _SHAPE_KEYS | _RETRIEVAL_KEYS | _CHECKED_KEYS

# Aggregations that summarise the rows the query matched, and nothing else.
_BUCKET_AGGS = frozenset(
    {
        "terms",
        "multi_terms",
        "histogram",
        "date_histogram",
        "range",
        "date_range",
        "filter",
        "filters",
        "missing",
        "composite",
        "nested",
        "reverse_nested",
        "sampler",
    }
)
_METRIC_AGGS = frozenset(
    {
        "avg",
        "sum",
        "min",
        "max",
        "stats",
        "extended_stats",
        "value_count",
        "cardinality",
        "percentiles",
        "percentile_ranks",
        "weighted_avg",
        "median_absolute_deviation",
        "top_hits",
    }
)
_PIPELINE_AGGS = frozenset({"bucket_sort", "max_bucket", "min_bucket", "avg_bucket", "sum_bucket"})
KNOWN_AGGS = _BUCKET_AGGS | _METRIC_AGGS | _PIPELINE_AGGS
_MSEARCH_HEADER_KEYS = frozenset(
    {"index", "search_type", "preference", "routing", "request_cache", "search_pipeline"}
)


def _agg_problems(aggs: Any, path: str) -> Iterator[str]:
    if not isinstance(aggs, dict):
        yield f"{path}: aggregations must be an object"
        return
    for name, spec in aggs.items():
        where = f"{path}.{name}"
        if not isinstance(spec, dict):
            yield f"{where}: not an aggregation"
            continue
        kinds = [k for k in spec if k not in ("aggs", "aggregations", "meta")]
        if len(kinds) != 1:
            yield f"{where}: expected exactly one aggregation type, got {sorted(kinds)}"
            continue
        kind = kinds[0]
        body = spec[kind]
        if kind not in KNOWN_AGGS:
            yield (
                f"{where}: aggregation {kind!r} is not allowed (it may read rows outside the "
                "caller's ACL, or is not known to the guard)"
            )
        elif mentions(body, "script"):
            yield f"{where}: scripts are not allowed in aggregations"
        elif kind == "terms" and isinstance(body, dict) and body.get("min_doc_count") == 0:
            yield f"{where}: terms with min_doc_count 0 lists values of rows the caller cannot read"
        elif kind == "top_hits" and isinstance(body, dict) and "script_fields" in body:
            yield f"{where}: script_fields are not allowed"
        for sub in ("aggs", "aggregations"):
            if sub in spec:
                yield from _agg_problems(spec[sub], f"{where}.{sub}")


def mentions(node: Any, key: str) -> bool:
    """``key`` appears anywhere in ``node`` as an object key."""
    if isinstance(node, dict):
        return key in node or any(mentions(v, key) for v in node.values())
    if isinstance(node, list):
        return any(mentions(v, key) for v in node)
    return False


def _sort_problems(sort: Any) -> Iterator[str]:
    entries = sort if isinstance(sort, list) else [sort]
    for entry in entries:
        if isinstance(entry, str):
            continue
        if not isinstance(entry, dict) or "_script" in entry:
            yield "sort: only field sorts are allowed"


def problems(body: dict[str, Any], acl: dict[str, Any]) -> list[str]:
    """Every place in ``body`` that could return rows without the ACL (empty = safe)."""
    found: list[str] = []
    if not isinstance(body, dict):
        return ["body is not an object"]
    unknown = sorted(set(body) - KNOWN_KEYS)
    if unknown:
        found.append(f"top-level key(s) {unknown} are not allowed (not known to the ACL guard)")
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
    if "post_filter" in body and not isinstance(body["post_filter"], dict):
        found.append("post_filter must be a query")
    if "sort" in body:
        found.extend(_sort_problems(body["sort"]))
    for key in ("aggs", "aggregations"):
        if key in body:
            found.extend(_agg_problems(body[key], key))
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
    for i in range(0, len(searches), 2):
        header = searches[i]
        extra = sorted(set(header) - _MSEARCH_HEADER_KEYS) if isinstance(header, dict) else []
        if not isinstance(header, dict) or extra:
            raise AclGuardError(f"msearch header {i // 2} is not allowed: {extra or header!r}")
    for i in range(1, len(searches), 2):
        found = problems(searches[i], acl)
        if found:
            raise AclGuardError(
                f"refusing to send msearch body {i // 2} without the caller's ACL: "
                + "; ".join(found)
            )
