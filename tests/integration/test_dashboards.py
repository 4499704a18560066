"""The shipped saved objects' queries, run on real servers with es-rag's own rows.

Kibana's objects run on Elasticsearch and OpenSearch Dashboards' on OpenSearch, against an
index populated the way es-rag populates it: documents ingested by the worker's own code
(``run_ingest``, which writes the status rows), a failure inside ingest, a parse failure
recorded from its error, a versioned document (so a version fence shares the status
index), and a document ingested inline (chunks, no status row). Each saved search's
Lucene query runs as the ``query_string`` both products send, with its sort, and must
return exactly the rows it promises; each visualization runs as the aggregation it stands
for; and every field the objects use must be in the servers' own ``_field_caps`` for the
data view (what Kibana reads to build one) with the capability its use needs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from es_rag.acl import make_acl
from es_rag.analysis import TextAnalyzer
from es_rag.config import Settings
from es_rag.dashboards import KIBANA, OPENSEARCH_DASHBOARDS, render
from es_rag.embedding import SentenceTransformerEmbedder
from es_rag.engine.client import Engine
from es_rag.errors import UnsupportedFormatError
from es_rag.jobs.payloads import DocumentPayload, IngestPayload
from es_rag.jobs.work import record_failure, run_ingest
from es_rag.pipeline import Ingestor
from es_rag.types import Document
from tests.conftest import unique_index
from tests.integration.conftest import drop_alias
from tests.saved_objects import (
    AGG_FIELD_TYPES,
    clauses,
    index_pattern_of,
    query_body,
    query_of,
    vis_search_body,
    vis_state,
)

pytestmark = pytest.mark.integration

HANDBOOK = """# Employee handbook

## Arrival

ALPHA Welcome to the company. Your first week starts with an introduction to the team,
a tour of the building, and a meeting with your manager to agree on goals for the first
three months. Laptops are handed out on the first morning by the service desk.

## Holidays

Employees receive twenty-eight days of annual leave. Requests go through the leave
portal at least two weeks ahead; the manager approves or declines within three working
days. Unused days up to five carry over into the first quarter of the next year.

## Travel

Business trips need approval before booking. Economy class is booked for flights under
six hours, hotels through the travel portal, and receipts are uploaded within a month of
the return. OMEGA Questions go to the travel office.
"""
FAQ = "# FAQ\n\nThe VPN client is installed on every laptop; hardware tokens are mandatory.\n"
REACTOR = "# Reactor\n\nThe maintenance window of the reactor starts at midnight on Sundays.\n"


@dataclass
class Population:
    alias: str
    children: dict[tuple[str, str], int]  # (tenant, doc id) -> child chunks
    failed: list[tuple[str, str]]  # (tenant, doc id), in the order they failed


def _queued(
    ingestor: Ingestor, tenant: str, doc_id: str, text: str, version: str | None = None
) -> Any:
    """A document through the worker's embed-queue path: parsed elsewhere, recorded here."""
    acl = make_acl(tenant, public=True)
    doc = Document(doc_id=doc_id, text=text, acl=acl, title=doc_id, doc_version=version)
    payload = IngestPayload(
        tenant=tenant, public=True, path=f"/data/{doc_id}", doc_id=doc_id, doc_version=version
    )
    return run_ingest(ingestor, payload, doc=DocumentPayload(document=doc, parse_ms=7.5))


@pytest.fixture(scope="module")
def population(
    engine: Engine,
    es_url: str,
    minilm_path: str,
    embedder: SentenceTransformerEmbedder,
    analyzer: TextAnalyzer,
) -> Iterator[Population]:
    settings = Settings(
        es_url=es_url,
        engine=engine.flavor,  # type: ignore[arg-type]
        index=unique_index("dash"),
        embedding_model=minilm_path,
        chunk_size=120,
        chunk_overlap=20,
    )
    ingestor = Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer)
    alias = settings.index
    try:
        assert _queued(ingestor, "acme", "handbook", HANDBOOK).status == "indexed"
        assert _queued(ingestor, "acme", "kb/faq", FAQ, version="3").status == "indexed"
        blank = _queued(ingestor, "acme", "blank.md", "   \n")
        assert (blank.status, blank.error_type) == ("failed", "EmptyDocumentError")
        time.sleep(0.01)  # updated_at is kept to the millisecond: keep the order certain
        binary = IngestPayload(tenant="globex", public=True, path="/data/blob.bin")
        error = UnsupportedFormatError("binary data, not a document es-rag parses")
        record_failure(ingestor, binary, error, attempt=1, task_id="task-1")
        # inline ingest: chunks and no status row
        reactor = Document(doc_id="reactor", text=REACTOR, acl=make_acl("globex", public=True))
        (done,) = ingestor.ingest_many([reactor])
        assert done.status == "indexed"
        engine.refresh(alias)
        ingestor.status.refresh()
        children: dict[tuple[str, str], int] = {}
        body = {"query": {"term": {"chunk_type": "child"}}}
        for hit in engine.scan(alias, body):
            key = (hit["_source"]["tenant_id"], hit["_source"]["doc_id"])
            children[key] = children.get(key, 0) + 1
        assert children[("acme", "handbook")] >= 3, children  # a document of several chunks
        yield Population(
            alias, children, failed=[("acme", "blank.md"), ("globex", "/data/blob.bin")]
        )
    finally:
        drop_alias(engine, alias)
        engine.delete_index(f"{alias}-status")


@pytest.fixture(scope="module")
def product(engine: Engine) -> str:
    return KIBANA if engine.flavor == "elasticsearch" else OPENSEARCH_DASHBOARDS


def named(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(o for o in objects if o["id"].startswith(f"es-rag.{name}."))


def discover(
    engine: Engine,
    objects: list[dict[str, Any]],
    search: dict[str, Any],
    *,
    query: str | None = None,
) -> list[dict[str, Any]]:
    """The rows Discover shows for a saved search: its query, the time picker's range on a
    time-based view (the last hour here), its sort."""
    view = index_pattern_of(search, objects)["attributes"]
    filters: list[dict[str, Any]] = [query_body(query_of(search) if query is None else query)]
    if view.get("timeFieldName"):
        filters.append({"range": {view["timeFieldName"]: {"gte": "now-1h", "lte": "now"}}})
    body = {
        "size": 500,
        "query": {"bool": {"filter": filters}},
        "sort": [{field: {"order": order}} for field, order in search["attributes"]["sort"]],
    }
    resp = engine.search(view["title"], body)
    return [hit["_source"] for hit in resp["hits"]["hits"]]


# --- the data views ---------------------------------------------------------------------
def test_every_field_is_in_the_data_views_field_caps(
    engine: Engine, population: Population, product: str
) -> None:
    objects = render(product, alias=population.alias)
    caps: dict[str, dict[str, Any]] = {}
    for view in (o for o in objects if o["type"] == "index-pattern"):
        title = view["attributes"]["title"]
        resp = engine.body(engine.client.field_caps(index=title, fields="*"))
        assert resp["indices"], f"{title} resolves to no index"
        caps[view["id"]] = {
            name: next(iter(types.values())) for name, types in resp["fields"].items()
        }
        time_field = view["attributes"].get("timeFieldName")
        if time_field:
            assert caps[view["id"]][time_field]["type"] == "date"
            assert caps[view["id"]][time_field]["aggregatable"]

    def cap(obj: dict[str, Any], field: str) -> dict[str, Any]:
        found = caps[index_pattern_of(obj, objects)["id"]].get(field)
        assert found, f"{obj['id']}: {field} is not in the data view"
        return found

    for obj in objects:
        if obj["type"] == "search":
            for column in obj["attributes"]["columns"]:
                cap(obj, column)
            for field, _ in obj["attributes"]["sort"]:
                assert cap(obj, field)["aggregatable"], (obj["id"], field)
        if obj["type"] in ("search", "visualization"):
            for field, _ in clauses(query_of(obj)):
                assert cap(obj, field)["searchable"], (obj["id"], field)
        if obj["type"] == "visualization":
            for agg in vis_state(obj)["aggs"]:
                if "field" in agg["params"]:
                    found = cap(obj, agg["params"]["field"])
                    assert found["aggregatable"], (obj["id"], agg)
                    assert found["type"] in AGG_FIELD_TYPES[agg["type"]], (obj["id"], agg)


# --- the saved searches -----------------------------------------------------------------
def test_failed_documents_with_their_errors(
    engine: Engine, population: Population, product: str
) -> None:
    objects = render(product, alias=population.alias)
    rows = discover(engine, objects, named(objects, "failed-documents"))
    assert [(r["tenant_id"], r["doc_id"]) for r in rows] == population.failed[::-1]
    by_doc = {r["doc_id"]: r for r in rows}
    assert by_doc["blank.md"]["error_type"] == "EmptyDocumentError"
    assert by_doc["/data/blob.bin"]["error_type"] == "UnsupportedFormatError"
    assert all(r["error"] and r["kind"] == "status" for r in rows)
    # the status index also holds a version fence, which no view of it shows
    fences = engine.count(f"{population.alias}-status", {"term": {"kind": "fence"}})
    assert fences == 1


@pytest.mark.parametrize("tenant", [None, "acme"])
def test_documents_of_a_tenant(
    engine: Engine, population: Population, product: str, tenant: str | None
) -> None:
    objects = render(product, alias=population.alias, tenant=tenant)
    rows = discover(engine, objects, named(objects, "tenant-documents"))
    expected = sorted(k for k in population.children if tenant in (None, k[0]))
    assert [(r["tenant_id"], r["doc_id"]) for r in rows] == expected
    assert all(r["ordinal"] == 0 and r["chunk_type"] == "child" for r in rows)
    # one row per document, whatever path it came in by (reactor was ingested inline)
    assert tenant is not None or ("globex", "reactor") in expected


def test_chunks_of_a_document_in_order(
    engine: Engine, population: Population, product: str
) -> None:
    objects = render(product, alias=population.alias)
    search = named(objects, "document-chunks")
    rows = discover(engine, objects, search)
    # every document's chunks, grouped, in reading order
    keys = [(r["tenant_id"], r["doc_id"]) for r in rows]
    assert keys == sorted(keys) and len(rows) == sum(population.children.values())
    for key, n in population.children.items():
        assert [r["ordinal"] for r in rows if (r["tenant_id"], r["doc_id"]) == key] == list(
            range(n)
        )
    # the operator's narrowing (README): doc_id:* becomes the document's id
    query = query_of(search)
    assert query.count("doc_id:*") == 1
    one = discover(engine, objects, search, query=query.replace("doc_id:*", 'doc_id:"handbook"'))
    assert [r["ordinal"] for r in one] == list(range(population.children[("acme", "handbook")]))
    assert {r["doc_id"] for r in one} == {"handbook"}
    assert "ALPHA" in one[0]["content"] and "OMEGA" in one[-1]["content"]


# --- the visualizations -----------------------------------------------------------------
def counts_by(resp: dict[str, Any], agg_id: str) -> dict[str, int]:
    """doc_count per key of the bucket agg ``agg_id``, summed over the buckets around it."""
    out: dict[str, int] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == agg_id and isinstance(value, dict) and "buckets" in value:
                    for b in value["buckets"]:
                        out[str(b["key"])] = out.get(str(b["key"]), 0) + b["doc_count"]
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(resp.get("aggregations", {}))
    return out


def test_visualizations_aggregate_what_they_say(
    engine: Engine, population: Population, product: str
) -> None:
    objects = render(product, alias=population.alias)
    results = {}
    for obj in (o for o in objects if o["type"] == "visualization"):
        view = index_pattern_of(obj, objects)["attributes"]
        body = vis_search_body(vis_state(obj), query_of(obj))
        if view.get("timeFieldName"):
            body["query"] = {
                "bool": {
                    "filter": [
                        body["query"],
                        {"range": {view["timeFieldName"]: {"gte": "now-1h", "lte": "now"}}},
                    ]
                }
            }
        results[obj["id"].split(".")[1]] = engine.search(view["title"], body)

    def total(name: str) -> int:
        value = results[name]["hits"]["total"]
        return int(value["value"] if isinstance(value, dict) else value)

    # status rows only (4), never the fence that shares their index (5 rows in all)
    assert engine.count(f"{population.alias}-status", {"match_all": {}}) == 5
    assert total("status-over-time") == 4
    assert counts_by(results["status-over-time"], "3") == {"indexed": 2, "failed": 2}
    assert counts_by(results["failures-by-error-type"], "2") == {
        "EmptyDocumentError": 1,
        "UnsupportedFormatError": 1,
    }
    assert counts_by(results["queue-throughput"], "3") == {"indexed": 2, "failed": 2}
    # stage timings: the rows run_ingest timed (the recorded parse failure has none)
    assert total("stage-timings") == 3
    buckets = results["stage-timings"]["aggregations"]["6"]["buckets"]
    totals = [v for b in buckets for v in b["5"]["values"].values() if v is not None]
    parses = [v for b in buckets for v in b["1"]["values"].values() if v is not None]
    assert totals and all(v > 0 for v in totals)
    assert parses and all(abs(v - 7.5) < 1e-6 for v in parses)
    per_tenant = counts_by(results["chunks-per-tenant"], "2")
    expected: dict[str, int] = {}
    for (tenant, _), n in population.children.items():
        expected[tenant] = expected.get(tenant, 0) + n
    assert per_tenant == expected
