"""Canary documents and probes for the leak count of the Elasticsearch-compatible surface.

Shared by tests/integration/test_es_surface.py (which asserts no leak) and
scripts/bench_es_surface.py (which reports the count). Two tenants, four people, public,
allow-listed, deny-listed and allow-and-deny documents over one shared vocabulary; every
paragraph carries its document's marker word (``mk`` + 8 hex) so that anything a probe
returns (a hit, a highlight fragment, an aggregation bucket, a count) can be traced to the
documents it came from and checked against an oracle written here, apart from es_rag.acl.

Probes go through ``_search`` (text and browse, with highlights and aggregations on the
marker, the document id and the department), ``_msearch``, and ``_count``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MARKER = re.compile(r"\bmk[0-9a-f]{8}\b")
TENANTS = ("canary-a", "canary-b")
PEOPLE = ("alice", "bob", "carol", "dave")
VOCAB = ("salary review", "merger plan", "vpn token", "holiday policy", "audit finding")


@dataclass(frozen=True)
class Canary:
    tenant: str
    doc_id: str
    marker: str
    public: bool = False
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    department: str = "ops"
    text: str = ""

    def readable_by(self, tenant: str, people: set[str]) -> bool:
        """The oracle: the tenant's own, public or allowed, and not denied."""
        principals = {f"user:{p}" for p in people}
        if tenant != self.tenant or principals & set(self.deny):
            return False
        return self.public or bool(principals & set(self.allow))


@dataclass
class Leaks:
    probes: int = 0
    found: list[str] = field(default_factory=list)


def canaries() -> list[Canary]:
    """Every ACL shape in both tenants, each document on two topics of the shared vocabulary."""
    shapes: list[dict[str, Any]] = [
        {"public": True},
        {"allow": ("user:alice",)},
        {"allow": ("user:bob", "user:carol")},
        {"public": True, "deny": ("user:dave",)},
        {"allow": ("user:alice", "user:dave"), "deny": ("user:alice",)},
        {"allow": ("user:carol",)},
    ]
    docs = []
    for t, tenant in enumerate(TENANTS):
        for i, shape in enumerate(shapes):
            marker = "mk" + hashlib.sha1(f"{tenant}/{i}".encode()).hexdigest()[:8]
            topics = (VOCAB[i % len(VOCAB)], VOCAB[(i + t + 1) % len(VOCAB)])
            text = (
                f"# Canary {i}\n\n## {topics[0].title()}\n\nThe {topics[0]} note {marker} "
                f"for the team. It covers the {topics[1]} in detail, {marker}.\n\n"
                f"## {topics[1].title()}\n\nMore on the {topics[1]} and the {topics[0]}, "
                f"marked {marker}.\n"
            )
            docs.append(
                Canary(
                    tenant=tenant,
                    doc_id=f"canary-{i}.md",  # the same ids in both tenants
                    marker=marker,
                    department=("hr", "eng", "ops")[i % 3],
                    text=text,
                    **shape,
                )
            )
    return docs


def ingest(ingestor: Any, docs: list[Canary]) -> None:
    from es_rag.acl import make_acl
    from es_rag.types import Document

    for d in docs:
        acl = make_acl(d.tenant, public=d.public, allow=d.allow, deny=d.deny)
        meta = {"department": d.department, "marker": d.marker}
        doc = Document(
            doc_id=d.doc_id, text=d.text, acl=acl, mime_type="text/markdown", metadata=meta
        )
        ingestor.ingest(doc, refresh=True)


def row_counts(engine: Any, index: str, docs: list[Canary]) -> dict[str, int]:
    """Each marker's searchable rows, read as an administrator (the oracle's side)."""
    from es_rag.query import build

    out = {}
    for d in docs:
        query = {
            "bool": {
                "filter": [
                    build.CHILDREN_ONLY,
                    build.WITHOUT_NAVIGATION,
                    {"term": {"metadata.marker": d.marker}},
                    {"term": {"tenant_id": d.tenant}},
                ]
            }
        }
        out[d.marker] = engine.count(index, query)
    return out


def callers() -> list[tuple[str, set[str]]]:
    return [(tenant, {person}) for tenant in TENANTS for person in PEOPLE]


def probes(alias: str) -> list[tuple[str, str, Any]]:
    """(method, path, body) for one caller: every route and body shape that returns rows."""
    aggs = {
        # source_uri holds the marker: keyword fields aggregate on both engines
        "markers": {"terms": {"field": "source_uri", "size": 100}},
        "docs": {
            "terms": {"field": "doc_id", "size": 100},
            "aggs": {"n": {"cardinality": {"field": "source_uri"}}},
        },
        "dept": {
            "filters": {
                "filters": {d: {"term": {"metadata.department": d}} for d in ("hr", "eng", "ops")}
            }
        },
        "pages": {"max": {"field": "chunk_count"}},
    }
    out: list[tuple[str, str, Any]] = []
    for topic in VOCAB:
        text = {"multi_match": {"query": topic, "fields": ["title", "content"]}}
        body = {"query": text, "size": 50, "aggs": aggs, "highlight": {"fields": {"content": {}}}}
        out.append(("POST", f"/{alias}/_search", body))
        out.append(("POST", f"/{alias}/_count", {"query": text}))
        posted = {**body, "post_filter": {"term": {"metadata.department": "hr"}}}
        out.append(("POST", f"/{alias}/_search", posted))
    browse = {"query": {"match_all": {}}, "size": 100, "aggs": aggs}
    out.append(("POST", f"/{alias}/_search", browse))
    out.append(("POST", f"/{alias}/_count", {}))
    out.append(
        (
            "POST",
            "/_msearch",
            [{"index": alias}, browse, {"index": alias}, {"query": {"match": {"content": "vpn"}}}],
        )
    )
    return out


def check(
    call: Callable[[str, str, Any], dict[str, Any]],
    alias: str,
    tenant: str,
    people: set[str],
    docs: list[Canary],
    rows: dict[str, int],
    leaks: Leaks,
) -> None:
    """Every probe for one caller; what it may not read goes to ``leaks``. ``rows`` is each
    marker's number of searchable rows, read from the index by the harness."""
    readable = {d.marker for d in docs if d.readable_by(tenant, people)}
    mine = {d.marker for d in docs}
    who = f"{tenant}/{'+'.join(sorted(people))}"
    may_read = sum(rows[m] for m in readable)
    per_doc = {d.doc_id: 0 for d in docs}
    per_dept = {d.department: 0 for d in docs}
    for d in docs:
        if d.marker in readable:
            per_doc[d.doc_id] += 1
            per_dept[d.department] += rows[d.marker]

    def flag(path: str, what: str) -> None:
        leaks.found.append(f"{who} {path}: {what}")

    for method, path, body in probes(alias):
        answer = call(method, path, body)
        leaks.probes += 1
        for part in answer.get("responses", [answer]):
            bad = set(MARKER.findall(json.dumps(part))) & mine - readable
            if bad:
                flag(path, f"markers {sorted(bad)}")
            if "count" in part and (
                part["count"] > may_read or (body == {} and part["count"] != may_read)
            ):
                flag(path, f"count {part['count']}, may read {may_read}")
            aggs = part.get("aggregations") or {}
            for bucket in aggs.get("markers", {}).get("buckets", []):
                found = MARKER.search(bucket["key"])
                if bucket["doc_count"] > rows.get(found.group(0) if found else "", 0):
                    flag(path, f"marker bucket {bucket}")
            for bucket in aggs.get("docs", {}).get("buckets", []):
                if bucket["n"]["value"] > per_doc.get(bucket["key"], 0):
                    flag(path, f"doc bucket {bucket}")
            for dept, bucket in aggs.get("dept", {}).get("buckets", {}).items():
                if bucket["doc_count"] > per_dept.get(dept, 0):
                    flag(path, f"department {dept}: {bucket['doc_count']} > {per_dept[dept]}")
            hits = part.get("hits", {})
            total = hits.get("total", {}).get("value", 0)
            if total > may_read:
                flag(path, f"total {total}, may read {may_read}")
            browse = isinstance(body, dict) and body.get("query") == {"match_all": {}}
            if browse and total != may_read:
                flag(path, f"browse total {total} != {may_read}")
