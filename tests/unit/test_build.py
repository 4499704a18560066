"""Request bodies equal reviewed fixtures (tests/fixtures/bodies/*.json).

To update a fixture after an intended change: ES_RAG_UPDATE_FIXTURES=1 pytest this file,
then review the JSON diff like code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from es_rag.acl import acl_filter, make_caller
from es_rag.query import build

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parents[1] / "fixtures" / "bodies"
CALLER = make_caller("acme", users=["u1"], groups=["support"])
ACL = acl_filter(CALLER)
VECTOR = [0.5, -0.25, 0.125]


def bm25_body(query_terms: str, *, size: int) -> dict[str, Any]:
    """What the BM25 strategy sends for ``query_terms``."""
    return build.hits_body(size, query=build.bm25_query(query_terms, acl=ACL))


def _check(name: str, body: Any) -> None:
    path = FIXTURES / f"{name}.json"
    if os.environ.get("ES_RAG_UPDATE_FIXTURES"):
        path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    assert body == json.loads(path.read_text())


def test_acl_clause() -> None:
    _check("acl", ACL)


def test_acl_clause_without_principals_sees_public_only() -> None:
    clause = acl_filter(make_caller("acme"))
    assert clause == {
        "bool": {
            "filter": [
                {"term": {"tenant_id": "acme"}},
                {
                    "bool": {
                        "should": [{"term": {"visibility": "public"}}],
                        "minimum_should_match": 1,
                    }
                },
            ]
        }
    }


def test_bm25_body() -> None:
    _check("bm25", bm25_body("refund err_refund_1042", size=10))


def test_knn_body() -> None:
    _check("knn", build.knn_body(VECTOR, acl=ACL, size=10, num_candidates=100))


def test_msearch_pair() -> None:
    bm25 = bm25_body("refund", size=50)
    knn = build.knn_body(VECTOR, acl=ACL, size=50, num_candidates=100)
    _check("msearch", build.msearch_pair("es-rag", bm25, knn))


def test_native_rrf_body() -> None:
    body = build.native_rrf_body(
        build.bm25_query("refund", acl=ACL),
        VECTOR,
        acl=ACL,
        size=10,
        rank_window_size=50,
        rank_constant=60,
        num_candidates=100,
    )
    _check("native_rrf", body)


def test_native_rrf_weighted_body() -> None:
    body = build.native_rrf_body(
        build.bm25_query("refund", acl=ACL),
        VECTOR,
        acl=ACL,
        size=10,
        rank_window_size=50,
        rank_constant=20,
        num_candidates=100,
        bm25_weight=2.0,
        knn_weight=0.5,
    )
    _check("native_rrf_weighted", body)


def _acl_everywhere(body: Any) -> int:
    """Count the ACL clauses inside a body (each retriever must carry one)."""
    if body == ACL:
        return 1
    if isinstance(body, dict):
        return sum(_acl_everywhere(v) for v in body.values())
    if isinstance(body, list):
        return sum(_acl_everywhere(v) for v in body)
    return 0


def test_every_retriever_carries_the_acl() -> None:
    assert _acl_everywhere(bm25_body("x", size=5)) == 1
    assert _acl_everywhere(build.knn_body(VECTOR, acl=ACL, size=5, num_candidates=10)) == 1
    native = build.native_rrf_body(
        build.bm25_query("x", acl=ACL),
        VECTOR,
        acl=ACL,
        size=5,
        rank_window_size=5,
        rank_constant=60,
        num_candidates=10,
    )
    assert _acl_everywhere(native) == 2
    rrf = native["retriever"]["rrf"]["retrievers"]
    assert ACL in rrf[0]["standard"]["query"]["bool"]["filter"]
    assert ACL in rrf[1]["knn"]["filter"]


def test_knn_candidates_never_below_k() -> None:
    body = build.knn_body(VECTOR, acl=ACL, size=200, num_candidates=100)
    assert body["knn"]["num_candidates"] == 200
    assert body["knn"]["k"] == 200


def test_native_size_capped_by_window() -> None:
    body = build.native_rrf_body(
        build.bm25_query("x", acl=ACL),
        VECTOR,
        acl=ACL,
        size=80,
        rank_window_size=50,
        rank_constant=60,
        num_candidates=100,
    )
    assert body["size"] == 50


def test_weak_evidence_judge_without_dense_scores() -> None:
    """A strategy whose hits carry no dense similarity is not judged insufficient by it."""
    from es_rag.acl import make_caller
    from es_rag.config import Settings
    from es_rag.query.context import ContextBuilder
    from es_rag.query.search import Searcher
    from es_rag.types import Hit, SearchResponse

    def hit(scores: dict) -> Hit:
        return Hit(
            chunk_id="c",
            doc_id="d",
            source_uri=None,
            title_path=[],
            page_start=None,
            page_end=None,
            text="t",
            score=0.03,
            ranks={"bm25": 1, "knn": 1},
            scores=scores,
        )

    builder = ContextBuilder(Searcher(Settings(min_knn_score=0.6)))
    caller = make_caller("t", users=["u"])

    def judge(response: SearchResponse) -> tuple[bool, str, dict]:
        return builder.judge("q", response, caller)

    ok, reason, _ = judge(SearchResponse("native-rrf", [hit({"rrf": 0.03})], {}))
    assert ok and "not applied" in reason
    ok, reason, _ = judge(SearchResponse("native-rrf", [hit({"rrf": 0.03, "knn": 0.55})], {}))
    assert not ok and "below 0.6" in reason
    ok, _, _ = judge(SearchResponse("client-rrf", [hit({"rrf": 0.03, "knn": 0.61})], {}))
    assert ok


def test_context_selection_keeps_strongest_first_when_merging() -> None:
    """A weaker item that contains a stronger one takes its place, not the end of the list."""
    from es_rag.config import Settings
    from es_rag.query.context import ContextBuilder, Evidence
    from es_rag.query.search import Searcher

    def ev(doc: str, text: str, score: float, cid: str) -> Evidence:
        return Evidence(
            n=0,
            doc_id=doc,
            source_uri=None,
            title_path=[],
            pages=None,
            text=text,
            score=score,
            chunk_ids=[cid],
        )

    builder = ContextBuilder(Searcher(Settings()), count_tokens=lambda t: len(t.split()))
    items = [
        ev("a", "alpha beta", 0.9, "a1"),
        ev("b", "gamma delta", 0.8, "b1"),
        ev("a", "alpha beta gamma", 0.7, "a2"),  # covers the first item
        ev("c", "epsilon " * 50, 0.6, "c1"),  # too big for the budget
    ]
    chosen = builder._select(items, per_doc=3, budget=20)
    assert [(e.n, e.doc_id, e.text) for e in chosen] == [
        (1, "a", "alpha beta gamma"),
        (2, "b", "gamma delta"),
    ]
    assert chosen[0].score == 0.9 and chosen[0].chunk_ids == ["a1", "a2"]
    # a covering item that does not fit leaves what it would have replaced in place
    tight = builder._select(items[:3], per_doc=3, budget=4)
    assert [e.text for e in tight] == ["alpha beta", "gamma delta"]
