"""Elasticsearch query DSL in, an es-rag search plan out (no I/O).

Search frontends (Elastic's Search UI, apps on the official clients) send ``_search``
bodies. This module reads one and says what it means for es-rag:

- the free text of ``match``, ``multi_match`` (any type), ``match_phrase``,
  ``match_phrase_prefix``, ``match_bool_prefix``, ``combined_fields``, ``query_string`` and
  ``simple_query_string`` anywhere in a scoring ``bool`` (``must``/``should``) becomes *the
  question* for es-rag's hybrid search. Field lists, operators, fuzziness and boosts are
  not honoured: es-rag searches its own analysed fields and its vectors. Of the query
  string syntax only the words count: ``field:`` prefixes are dropped to their value, a
  negated word (``-word``, ``!word``, ``NOT word``) is left out of the question (it is not
  enforced as an exclusion), and quotes, ``+``, ``|``, ``*``, ``?``, ``~N``, ``^N``,
  brackets and ``AND``/``OR`` are removed;
- ``term``, ``terms``, ``range``, ``exists``, ``ids``, ``match_all`` and nested ``bool``s in
  filter context (``bool.filter``, ``bool.must_not``, ``post_filter``, a filter
  aggregation) on keyword, numeric, date, boolean and metadata fields are *filters*: they
  are passed on unchanged, after checking, into both retrievers next to the ACL;
- everything else is refused with a reason that names it (``DslError``, a 400), never
  dropped: a frontend that asks for ``function_score`` must learn it did not get it.

Access-control fields (``tenant_id``, ``visibility``, principals) can be neither filtered
nor aggregated on: es-rag applies the caller's ACL itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from es_rag.errors import EsRagError, FilterError
from es_rag.query.build import SOURCE_EXCLUDES
from es_rag.query.filters import ACCESS_FIELDS, resolve_type
from es_rag.query.guard import mentions

TEXT_QUERIES = frozenset(
    {
        "match",
        "multi_match",
        "match_phrase",
        "match_phrase_prefix",
        "match_bool_prefix",
        "combined_fields",
        "query_string",
        "simple_query_string",
    }
)
FILTER_QUERIES = frozenset({"term", "terms", "range", "exists", "ids", "match_all", "bool"})
HIGHLIGHT_FIELDS = frozenset({"content", "title", "title_path", "context_header"})
_HIGHLIGHT_KEYS = frozenset(
    {
        "fields",
        "pre_tags",
        "post_tags",
        "fragment_size",
        "number_of_fragments",
        "type",
        "order",
        "encoder",
        "require_field_match",
        "no_match_size",
        "tags_schema",
    }
)
AGGS = frozenset(
    {
        "terms",
        "range",
        "date_range",
        "histogram",
        "date_histogram",
        "filter",
        "filters",
        "missing",
        "cardinality",
        "value_count",
        "min",
        "max",
        "avg",
        "sum",
        "stats",
    }
)
# Body keys a _search may hold, and why the others are refused.
SEARCH_KEYS = frozenset(
    {
        "query",
        "post_filter",
        "from",
        "size",
        "_source",
        "highlight",
        "sort",
        "track_total_hits",
        "track_scores",
        "explain",
        "aggs",
        "aggregations",
        "timeout",
    }
)
_REFUSED_KEYS = {
    "knn": "es-rag runs the kNN retriever itself, with the caller's ACL inside it",
    "retriever": "es-rag builds the retrievers itself",
    "rescore": "es-rag's rerank is its own (rerank=true)",
    "suggest": "suggesters read the term dictionary of every tenant",
    "collapse": "collapse is not supported",
    "runtime_mappings": "a runtime field could shadow an access-control field",
    "script_fields": "scripts are not supported",
    "pit": "point in time is not supported",
    "search_after": "search_after is not supported; page with from/size",
    "profile": "profile exposes the whole query, ACL included",
    "stored_fields": "stored_fields is not supported; use _source",
    "docvalue_fields": "docvalue_fields is not supported; use _source",
    "fields": "fields is not supported; use _source",
    "min_score": "min_score is not supported on fused scores",
    "indices_boost": "there is one alias",
    "slice": "slice is not supported",
    "stats": "stats groups are not supported",
    "terminate_after": "terminate_after would make hybrid results depend on shard order",
    "version": "version is not supported",
    "seq_no_primary_term": "seq_no_primary_term is not supported",
    "rank": "es-rag fuses the retrievers itself",
    "sub_searches": "es-rag builds the searches itself",
}


class DslError(EsRagError):
    """A request es-rag cannot honour as asked (400); ``kind`` is Elasticsearch's type."""

    def __init__(self, reason: str, kind: str = "illegal_argument_exception") -> None:
        super().__init__(reason)
        self.kind = kind


@dataclass
class SearchPlan:
    """What a ``_search`` body asks of es-rag."""

    text: str = ""  # the question; empty: a filtered browse
    filters: list[dict[str, Any]] = field(default_factory=list)  # inside both retrievers
    post_filter: dict[str, Any] | None = None  # on hits, not on aggregations
    from_: int = 0
    size: int = 10
    source: Any = True  # a _source spec, with es-rag's internal fields excluded
    highlight: dict[str, Any] | None = None
    sort: list[dict[str, Any]] = field(default_factory=list)  # empty: by relevance
    track_total_hits: bool | int = 10000
    explain: bool = False
    aggs: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The plan as the golden-body fixtures hold it (tests/fixtures/es_bodies)."""
        out = {k: v for k, v in self.__dict__.items() if k != "from_"}
        return {"from": self.from_, **out}

    @property
    def filters_navigation(self) -> bool:
        """A filter names ``element_types``: the caller asks for navigation rows itself."""
        return _mentions_field(self.filters, "element_types") or _mentions_field(
            self.post_filter, "element_types"
        )


# ------------------------------------------------------------------------------ parsing


def parse_search(
    body: dict[str, Any] | None,
    types: dict[str, str],
    params: dict[str, str] | None = None,
    *,
    metadata_columns: bool = True,
) -> SearchPlan:
    """Read a ``_search`` body (and the URL parameters that shape it).

    ``metadata_columns`` False (OpenSearch): metadata keys filter but neither aggregate nor
    sort, because OpenSearch's ``flat_object`` answers terms aggregations on its keys with
    no buckets and cardinality with a count over every key."""
    body = dict(body or {})
    params = params or {}
    if not isinstance(body, dict):
        raise DslError("the request body must be a JSON object", "parsing_exception")
    for key in body:
        if key in _REFUSED_KEYS:
            raise DslError(f"es-rag does not support [{key}] in a search: {_REFUSED_KEYS[key]}")
        if key not in SEARCH_KEYS:
            raise DslError(f"unknown key [{key}] in a search body", "parsing_exception")
    plan = SearchPlan()
    texts: list[str] = []
    if body.get("query") is not None:
        _scoring(body["query"], types, texts, plan.filters, "query")
    if params.get("q") is not None:  # a URI search: ?q=words, read like a query_string
        if body.get("query") is not None:
            raise DslError("both [q] and a query in the body given")
        texts.append(plain_text(params["q"]))
    plan.text = _join(texts)
    if body.get("post_filter") is not None:
        plan.post_filter = check_filter(body["post_filter"], types, "post_filter")
    plan.from_ = _int(params.get("from", body.get("from", 0)), "from", low=0)
    plan.size = _int(params.get("size", body.get("size", 10)), "size", low=0)
    plan.source = source_spec(source_param(params, body.get("_source", True)))
    if body.get("highlight") is not None:
        plan.highlight = _highlight(body["highlight"])
    sort = body.get("sort")
    if params.get("sort"):  # ?sort=field:asc,other
        sort = [
            {f: o} if o else f
            for f, _, o in (entry.partition(":") for entry in params["sort"].split(","))
        ]
    if sort is not None:
        plan.sort = _sort(sort, types, metadata_columns)
    plan.track_total_hits = _track(params.get("track_total_hits", body.get("track_total_hits")))
    plan.explain = _bool(params.get("explain", body.get("explain", False)), "explain")
    aggs = body.get("aggs", body.get("aggregations"))
    if "aggs" in body and "aggregations" in body:
        raise DslError("both [aggs] and [aggregations] given", "parsing_exception")
    if aggs is not None:
        plan.aggs = check_aggs(aggs, types, "aggs", metadata_columns)
    return plan


def parse_count(body: dict[str, Any] | None, types: dict[str, str]) -> SearchPlan:
    """``_count`` takes only a query."""
    extra = sorted(set(body or {}) - {"query"})
    if extra:
        raise DslError(f"unknown key {extra} in a count body", "parsing_exception")
    return parse_search({"query": (body or {}).get("query")}, types)


def _scoring(
    node: Any, types: dict[str, str], texts: list[str], filters: list[dict[str, Any]], path: str
) -> None:
    """A clause in scoring context: its text joins the question, its filters the filters."""
    kind, spec = _one(node, path)
    where = f"{path}.{kind}"
    if kind in TEXT_QUERIES:
        text = _text_of(kind, spec, where)
        if text:
            texts.append(text)
    elif kind == "match_all":
        _only(spec, {"boost", "_name"}, where)
    elif kind == "bool":
        _only(
            spec,
            {"must", "should", "filter", "must_not", "minimum_should_match", "boost", "_name"},
            where,
        )
        for occur in ("must", "should"):
            for i, clause in enumerate(_clauses(spec.get(occur), f"{where}.{occur}")):
                inner_kind, _ = _one(clause, f"{where}.{occur}[{i}]")
                if occur == "should" and inner_kind not in TEXT_QUERIES | {"bool", "match_all"}:
                    raise DslError(
                        f"[{inner_kind}] in {where}.should is not supported: an optional "
                        "filter does not select rows; put it in bool.filter"
                    )
                if inner_kind in FILTER_QUERIES - {"bool", "match_all"}:
                    filters.append(check_filter(clause, types, f"{where}.{occur}[{i}]"))
                else:
                    _scoring(clause, types, texts, filters, f"{where}.{occur}[{i}]")
        for i, clause in enumerate(_clauses(spec.get("filter"), f"{where}.filter")):
            filters.append(check_filter(clause, types, f"{where}.filter[{i}]"))
        negated = [
            check_filter(c, types, f"{where}.must_not[{i}]")
            for i, c in enumerate(_clauses(spec.get("must_not"), f"{where}.must_not"))
        ]
        if negated:
            filters.append({"bool": {"must_not": negated}})
    elif kind in FILTER_QUERIES:
        filters.append(check_filter(node, types, path))
    else:
        raise DslError(f"es-rag does not support the [{kind}] query (at {path})")


def _text_of(kind: str, spec: Any, where: str) -> str:
    if kind in ("match", "match_phrase", "match_phrase_prefix", "match_bool_prefix"):
        if not isinstance(spec, dict) or len(spec) != 1:
            raise DslError(f"[{kind}] takes one field (at {where})", "parsing_exception")
        (value,) = spec.values()
        if isinstance(value, dict):
            value = value.get("query")
        return _as_text(value, where)
    if not isinstance(spec, dict) or "query" not in spec:
        raise DslError(f"[{kind}] needs a query (at {where})", "parsing_exception")
    text = _as_text(spec["query"], where)
    return plain_text(text) if kind in ("query_string", "simple_query_string") else text


def _as_text(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DslError(f"the query text at {where} must be a string", "parsing_exception")
    return str(value).strip()


_FIELD_PREFIX = re.compile(r"(?<![\w.])[\w.]+:(?=[^\s/])")
_NEGATED = re.compile(r"(?:(?<=\s)|^)(?:[-!]|NOT\s+)(\"[^\"]*\"|\S+)")
_OPERATOR_WORDS = re.compile(r"(?<!\S)(?:AND|OR|NOT|&&|\|\|)(?!\S)")
_BOOSTS = re.compile(r"[~^][\d.]*")
_SYNTAX = re.compile(r"[+\"(){}\[\]*?\\|&<>=]")


def plain_text(query: str) -> str:
    """The words of a ``query_string``: the question es-rag searches for."""
    text = _NEGATED.sub(" ", query)
    text = _FIELD_PREFIX.sub("", text)
    text = _OPERATOR_WORDS.sub(" ", text)
    text = _BOOSTS.sub("", text)
    text = _SYNTAX.sub(" ", text)
    return " ".join(text.split())


def _join(texts: list[str]) -> str:
    """Search UI sends the same words in several clauses: ask once."""
    return " ".join(dict.fromkeys(t for t in texts if t))


# ------------------------------------------------------------------------------ filters


def check_filter(node: Any, types: dict[str, str], path: str) -> dict[str, Any]:
    """Check one filter-context query; it is returned as given (es-rag sends it as is)."""
    kind, spec = _one(node, path)
    where = f"{path}.{kind}"
    if kind == "bool":
        _only(
            spec,
            {"must", "should", "filter", "must_not", "minimum_should_match", "boost", "_name"},
            where,
        )
        for occur in ("must", "should", "filter", "must_not"):
            for i, clause in enumerate(_clauses(spec.get(occur), f"{where}.{occur}")):
                check_filter(clause, types, f"{where}.{occur}[{i}]")
    elif kind in ("match_all", "match_none"):
        _only(spec, {"boost", "_name"}, where)
    elif kind == "ids":
        _only(spec, {"values", "boost", "_name"}, where)
        if not isinstance(spec.get("values"), list):
            raise DslError(f"[ids] needs a list of values (at {where})", "parsing_exception")
    elif kind == "exists":
        _only(spec, {"field", "boost", "_name"}, where)
        _filterable(spec.get("field"), types, where)
    elif kind in ("term", "terms", "range"):
        options = {"boost", "_name"} | ({"case_insensitive"} if kind == "term" else set())
        fields = [k for k in spec if k not in options]
        if len(fields) != 1:
            raise DslError(f"[{kind}] takes one field (at {where})", "parsing_exception")
        name = fields[0]
        _filterable(name, types, where)
        value = spec[name]
        if kind == "terms" and not isinstance(value, list):
            # {"index", "id", "path"}: a lookup would read another row, outside the ACL.
            raise DslError(
                f"[terms] takes a list of values; terms lookup is not supported (at {where})"
            )
        if kind == "range" and not isinstance(value, dict):
            raise DslError(f"[range] takes an object of bounds (at {where})", "parsing_exception")
        if kind == "range":
            _only(
                value, {"gte", "gt", "lte", "lt", "format", "time_zone", "relation", "boost"}, where
            )
    elif kind in TEXT_QUERIES:
        raise DslError(
            f"[{kind}] in filter context is not supported (at {path}): es-rag's text goes to "
            "its hybrid search; filter on keyword, numeric or date fields"
        )
    else:
        raise DslError(f"es-rag does not support the [{kind}] query (at {path})")
    return node


def _filterable(name: Any, types: dict[str, str], where: str, metadata: bool = True) -> str:
    """The field's kind, if it can filter (and, with ``metadata`` False, whether a metadata
    key can aggregate or sort: see ``parse_search``)."""
    if not isinstance(name, str) or not name:
        raise DslError(f"a field name is expected (at {where})", "parsing_exception")
    if name == "_id":
        return "keyword"
    try:
        kind = resolve_type(name, types)
    except FilterError as e:
        raise DslError(f"{e} (at {where})") from None
    if kind == "flattened_key" and not metadata:
        raise DslError(
            f"{name} is a metadata key, which OpenSearch's flat_object cannot aggregate or sort "
            f"on (at {where}); use a keyword field such as mime_type, doc_id or "
            "title_path.keyword, or Elasticsearch's flattened type"
        )
    if kind == "flattened":
        raise DslError(
            f"{name} is an object of metadata; name a key such as {name}.<key> (at {where})"
        )
    return kind


# ------------------------------------------------------------------------------ aggregations


def check_aggs(
    aggs: Any, types: dict[str, str], path: str, metadata_columns: bool = True
) -> dict[str, Any]:
    """Facet aggregations over the rows the caller may read; returned as given."""
    if not isinstance(aggs, dict):
        raise DslError(f"{path} must be an object", "parsing_exception")
    for name, spec in aggs.items():
        where = f"{path}.{name}"
        if not isinstance(spec, dict):
            raise DslError(f"{where} is not an aggregation", "parsing_exception")
        kinds = [k for k in spec if k not in ("aggs", "aggregations", "meta")]
        if len(kinds) != 1:
            raise DslError(
                f"{where}: one aggregation type expected, got {sorted(kinds)}", "parsing_exception"
            )
        kind = kinds[0]
        body = spec[kind]
        if kind == "global":
            raise DslError(
                f"{where}: a [global] aggregation is refused: it would count rows outside the "
                "query and the caller's ACL"
            )
        if kind not in AGGS:
            raise DslError(f"{where}: es-rag does not support the [{kind}] aggregation")
        if mentions(body, "script"):
            raise DslError(f"{where}: scripts are not supported")
        if kind == "filter":
            check_filter(body, types, f"{where}.filter")
        elif kind == "filters":
            inner = body.get("filters") if isinstance(body, dict) else None
            named = inner.items() if isinstance(inner, dict) else enumerate(inner or [])
            if not inner:
                raise DslError(f"{where}.filters needs filters", "parsing_exception")
            for key, q in named:
                check_filter(q, types, f"{where}.filters.{key}")
        else:
            if not isinstance(body, dict):
                raise DslError(f"{where}.{kind} must be an object", "parsing_exception")
            _filterable(body.get("field"), types, f"{where}.{kind}", metadata_columns)
            if kind == "terms" and body.get("min_doc_count") == 0:
                raise DslError(
                    f"{where}: terms with min_doc_count 0 would list values of rows the caller "
                    "cannot read"
                )
        for sub in ("aggs", "aggregations"):
            if sub in spec:
                check_aggs(spec[sub], types, f"{where}.{sub}", metadata_columns)
    return aggs


# ------------------------------------------------------------------------------ shaping


def source_spec(value: Any) -> Any:
    """A ``_source`` spec that leaves out the vector and the BM25 term fields unless the
    request names them."""
    if value is False:
        return False
    if value is True or value is None:
        return {"excludes": list(SOURCE_EXCLUDES)}
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list):
        value = {"includes": value}
    if not isinstance(value, dict) or set(value) - {"includes", "excludes", "include", "exclude"}:
        raise DslError("[_source] must be a boolean, a field list or {includes, excludes}")
    includes = list(value.get("includes", value.get("include")) or [])
    excludes = list(value.get("excludes", value.get("exclude")) or [])
    if isinstance(includes, str) or isinstance(excludes, str):
        raise DslError("[_source] includes and excludes are lists", "parsing_exception")
    excludes += [f for f in SOURCE_EXCLUDES if f not in includes and f not in excludes]
    spec: dict[str, Any] = {"excludes": excludes}
    if includes:
        spec["includes"] = includes
    return spec


def source_param(params: dict[str, str], body: Any) -> Any:
    """``?_source=false|a,b``, ``?_source_includes=``, ``?_source_excludes=`` (the Python
    client's ``source_includes``) win over the body's ``_source``, as in Elasticsearch."""
    names = ("_source", "_source_includes", "_source_excludes")
    if not any(n in params for n in names):
        return body
    plain = params.get("_source")
    if plain in ("true", "false"):
        return plain == "true"

    def listed(name: str) -> list[str]:
        return [f for f in (params.get(name) or "").split(",") if f]

    return {
        "includes": listed("_source_includes") or listed("_source"),
        "excludes": listed("_source_excludes"),
    }


def _highlight(spec: Any) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise DslError("[highlight] must be an object", "parsing_exception")
    _only(spec, _HIGHLIGHT_KEYS, "highlight")
    fields = spec.get("fields") or {}
    if isinstance(fields, list):  # [{"content": {}}, ...] keeps the order
        merged: dict[str, Any] = {}
        for entry in fields:
            merged.update(entry)
        fields = merged
    if not fields:
        raise DslError("[highlight] needs fields", "parsing_exception")
    for name, options in fields.items():
        if name not in HIGHLIGHT_FIELDS:
            raise DslError(
                f"highlight on [{name}] is not supported; es-rag highlights "
                f"{', '.join(sorted(HIGHLIGHT_FIELDS))}"
            )
        if isinstance(options, dict) and "highlight_query" in options:
            raise DslError("highlight_query is not supported: es-rag highlights the question")
    return {**spec, "fields": fields}


def _sort(value: Any, types: dict[str, str], metadata_columns: bool) -> list[dict[str, Any]]:
    """Normalised to ``[{field: {"order": ...}}]``; ``_score`` alone means relevance."""
    entries = value if isinstance(value, list) else [value]
    out: list[dict[str, Any]] = []
    for entry in entries:
        options: Any
        if isinstance(entry, str):
            name, options = entry, {}
        elif isinstance(entry, dict) and len(entry) == 1:
            ((name, options),) = entry.items()
            options = {"order": options} if isinstance(options, str) else options
        else:
            raise DslError("sort entries are field names or {field: order}", "parsing_exception")
        if name.startswith("_") and name not in ("_score", "_doc"):
            raise DslError(f"sort on [{name}] is not supported")
        if not isinstance(options, dict):
            raise DslError(f"sort options of [{name}] must be an object", "parsing_exception")
        _only(
            options,
            {"order", "missing", "unmapped_type", "mode", "format", "numeric_type"},
            f"sort.{name}",
        )
        if options.get("order", "desc" if name == "_score" else "asc") not in ("asc", "desc"):
            raise DslError(f"sort order of [{name}] is asc or desc")
        if name not in ("_score", "_doc"):
            _filterable(name, types, f"sort.{name}", metadata_columns)
        out.append({name: options})
    if all(next(iter(e)) == "_score" and e["_score"].get("order", "desc") == "desc" for e in out):
        return []  # relevance, the default
    return out


def _track(value: Any) -> bool | int:
    if value is None:
        return 10000
    if isinstance(value, str):
        value = value.lower()
        if value in ("true", "false"):
            return value == "true"
    if isinstance(value, bool):
        return value
    return _int(value, "track_total_hits", low=0)


def _int(value: Any, name: str, *, low: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise DslError(f"[{name}] must be an integer", "parsing_exception") from None
    if isinstance(value, bool) or number < low or str(number) != str(value).strip():
        raise DslError(f"[{name}] must be an integer >= {low}")
    return number


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise DslError(f"[{name}] must be true or false", "parsing_exception")


def _one(node: Any, path: str) -> tuple[str, Any]:
    if not isinstance(node, dict) or len(node) != 1:
        raise DslError(f"{path} must be an object with one query type", "parsing_exception")
    ((kind, spec),) = node.items()
    if not isinstance(spec, dict) and kind not in ("match_all", "match_none"):
        raise DslError(f"[{kind}] must be an object (at {path})", "parsing_exception")
    return kind, spec if spec is not None else {}


def _only(spec: Any, allowed: set[str] | frozenset[str], where: str) -> None:
    extra = sorted(set(spec or {}) - set(allowed)) if isinstance(spec, dict) else []
    if extra:
        raise DslError(f"es-rag does not support {extra} in {where}")


def _clauses(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        return value
    raise DslError(f"{where} must be a query or a list of queries", "parsing_exception")


def _mentions_field(node: Any, name: str) -> bool:
    if isinstance(node, dict):
        return (
            name in node
            or node.get("field") == name
            or any(_mentions_field(v, name) for v in node.values())
        )
    if isinstance(node, list):
        return any(_mentions_field(v, name) for v in node)
    return False


__all__ = [
    "ACCESS_FIELDS",
    "DslError",
    "SearchPlan",
    "check_aggs",
    "check_filter",
    "parse_count",
    "parse_search",
    "plain_text",
    "source_param",
    "source_spec",
]
