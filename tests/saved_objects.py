"""What the dashboard tests share: the mappings' fields, the saved objects' queries and
fields, and a translation of a visualization into the search Kibana would send.

The saved objects' queries are Lucene (``language: lucene``), which both products send as
a ``query_string``; they are kept to a subset that ``clauses`` reads exactly
(``field:value`` and ``_exists_:field`` joined by ``AND``), so a test can list every field
a query touches.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MAPPINGS = ROOT / "mappings"

NUMERIC = {
    "long",
    "integer",
    "short",
    "byte",
    "double",
    "float",
    "half_float",
    "scaled_float",
    "unsigned_long",
}
DATES = {"date", "date_nanos"}
#: Field types with doc values: what terms, cardinality and sort need.
AGGREGATABLE = {"keyword", "boolean", "ip", *NUMERIC, *DATES}
#: Field types a query can match (vectors and disabled objects cannot).
SEARCHABLE = AGGREGATABLE | {"text", "flattened", "flat_object", "match_only_text"}
#: What each aggregation-based agg type needs of its field.
AGG_FIELD_TYPES = {
    "terms": AGGREGATABLE,
    "cardinality": AGGREGATABLE,
    "date_histogram": DATES,
    "percentiles": NUMERIC,
    "avg": NUMERIC,
    "sum": NUMERIC,
    "min": NUMERIC | DATES,
    "max": NUMERIC | DATES,
}


def mapping_fields(filename: str) -> dict[str, str]:
    """Every field of a mapping file, dotted path → type; objects are walked, multi-fields
    (``error.keyword``) listed, a disabled object (``payload``) left out: it has no field."""
    data = json.loads((MAPPINGS / filename).read_text(encoding="utf-8"))
    out: dict[str, str] = {}

    def walk(properties: dict[str, Any], prefix: str) -> None:
        for name, spec in properties.items():
            path = f"{prefix}{name}"
            if "properties" in spec:
                walk(spec["properties"], f"{path}.")
                continue
            if spec.get("enabled") is False:
                continue
            out[path] = spec["type"]
            for sub, subspec in spec.get("fields", {}).items():
                out[f"{path}.{sub}"] = subspec["type"]

    walk(data["mappings"]["properties"], "")
    return out


def view_fields(engine: str, view_title: str) -> dict[str, str]:
    """The fields behind a data view title of the templates (``{{alias}}`` or its status)."""
    if view_title.endswith("-status"):
        return mapping_fields("status-v2.json")
    flavor = "elasticsearch" if engine == "kibana" else "opensearch"
    return mapping_fields(f"{flavor}-chunks-v1.json")


_CLAUSE = re.compile(
    r'^(?P<field>[A-Za-z_][\w.]*):(?P<value>\*|[\w.-]+|"(?:[^"\\]|\\.)*"|\{\{tenant\}\})$'
)


def clauses(query: str) -> list[tuple[str, str]]:
    """``(field, value)`` for each clause of a query in the tests' Lucene subset; ``_exists_``
    clauses come back as ``(field, "_exists_")``. Anything else raises ``ValueError``."""
    if not query.strip():
        return []
    out = []
    for part in query.split(" AND "):
        m = _CLAUSE.match(part)
        if not m:
            raise ValueError(f"{part!r} in {query!r} is outside the supported Lucene subset")
        if m["field"] == "_exists_":
            out.append((m["value"], "_exists_"))
        else:
            out.append((m["field"], m["value"]))
    return out


def search_source(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["attributes"].get("kibanaSavedObjectMeta") or {}
    return dict(json.loads(meta.get("searchSourceJSON") or "{}"))


def query_of(obj: dict[str, Any]) -> str:
    query = search_source(obj).get("query") or {}
    assert query.get("language") == "lucene", obj["id"]
    return str(query.get("query", ""))


def vis_state(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(obj["attributes"]["visState"]))


def index_pattern_of(obj: dict[str, Any], objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The data view a search or visualization reads (through its ``indexRefName``)."""
    ref_name = search_source(obj)["indexRefName"]
    ref = next(r for r in obj["references"] if r["name"] == ref_name)
    return next(o for o in objects if o["type"] == "index-pattern" and o["id"] == ref["id"])


def query_body(query: str) -> dict[str, Any]:
    """The query a saved search's or visualization's Lucene string becomes: a
    ``query_string`` with ``analyze_wildcard`` (Kibana's ``query:queryString:options``)."""
    if not query:
        return {"match_all": {}}
    return {"query_string": {"query": query, "analyze_wildcard": True}}


def vis_search_body(state: dict[str, Any], query: str, *, interval: str = "1h") -> dict[str, Any]:
    """The aggregation search an aggregation-based visualization stands for: its bucket
    aggs nested in order (x-axis outside, split series inside), its metrics in the
    innermost bucket. ``interval`` stands in for ``auto``."""
    aggs = [a for a in state["aggs"] if a.get("enabled", True)]
    metrics: dict[str, Any] = {}
    for a in aggs:
        if a["schema"] != "metric" or a["type"] == "count":
            continue
        params = a["params"]
        spec: dict[str, Any] = {"field": params["field"]}
        if a["type"] == "percentiles":
            spec["percents"] = params["percents"]
        metrics[a["id"]] = {a["type"]: spec}
    inner = metrics
    for a in reversed([a for a in aggs if a["schema"] != "metric"]):
        params = a["params"]
        if a["type"] == "terms":
            bucket: dict[str, Any] = {"field": params["field"], "size": params["size"]}
            if params.get("orderBy") == "_key":
                bucket["order"] = {"_key": params.get("order", "asc")}
            else:
                bucket["order"] = {"_count": params.get("order", "desc")}
            spec = {"terms": bucket}
        elif a["type"] == "date_histogram":
            spec = {
                "date_histogram": {
                    "field": params["field"],
                    "fixed_interval": interval,
                    "min_doc_count": params.get("min_doc_count", 1),
                }
            }
        else:
            raise ValueError(f"bucket agg {a['type']} is not translated")
        if inner:
            spec["aggs"] = inner
        inner = {a["id"]: spec}
    return {"size": 0, "track_total_hits": True, "query": query_body(query), "aggs": inner}
