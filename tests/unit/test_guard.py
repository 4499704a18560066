"""The ACL guard accepts every body the builders make and refuses hand-broken ones."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from es_rag.acl import acl_filter, make_caller
from es_rag.errors import AclGuardError
from es_rag.query import build
from es_rag.query.guard import check_body, check_msearch

pytestmark = pytest.mark.unit

ACL = acl_filter(make_caller("acme", users=["u1"]))
OTHER = acl_filter(make_caller("acme", users=["u2"]))
VEC = [0.1, 0.2]


def bodies() -> dict[str, dict[str, Any]]:
    return {
        "bm25": build.hits_body(5, query=build.bm25_query("x", acl=ACL)),
        "knn": build.knn_body(VEC, acl=ACL, size=5, num_candidates=10),
        "native": build.native_rrf_body(
            build.bm25_query("x", acl=ACL),
            VEC,
            acl=ACL,
            size=5,
            rank_window_size=5,
            rank_constant=60,
            num_candidates=10,
        ),
        "native_weighted": build.native_rrf_body(
            build.bm25_query("x", acl=ACL),
            VEC,
            acl=ACL,
            size=5,
            rank_window_size=5,
            rank_constant=60,
            num_candidates=10,
            bm25_weight=2.0,
        ),
    }


@pytest.mark.parametrize("name", sorted(bodies()))
def test_builder_bodies_pass(name: str) -> None:
    check_body(bodies()[name], ACL)


def test_msearch_pair_passes() -> None:
    b = bodies()
    check_msearch(build.msearch_pair("idx", b["bm25"], b["knn"]), ACL)


def _broken(name: str, mutate: Any) -> dict[str, Any]:
    body = copy.deepcopy(bodies()[name])
    mutate(body)
    return body


BROKEN = {
    "knn without filter": _broken("knn", lambda b: b["knn"].pop("filter")),
    "knn with another caller's acl": _broken("knn", lambda b: b["knn"].update(filter=[OTHER])),
    "bm25 acl dropped": _broken("bm25", lambda b: b["query"]["bool"]["filter"].pop(0)),
    "bm25 acl moved to should": _broken(
        "bm25",
        lambda b: b["query"]["bool"].update(should=[b["query"]["bool"].pop("filter")[0]]),
    ),
    "no query at all": {"size": 10},
    "match_all": {"query": {"match_all": {}}},
    "native knn retriever without acl": _broken(
        "native", lambda b: b["retriever"]["rrf"]["retrievers"][1]["knn"].pop("filter")
    ),
    "native standard without acl": _broken(
        "native",
        lambda b: b["retriever"]["rrf"]["retrievers"][0]["standard"].update(
            query={"match": {"content": "x"}}
        ),
    ),
    "weighted knn retriever without acl": _broken(
        "native_weighted",
        lambda b: b["retriever"]["rrf"]["retrievers"][1]["retriever"]["knn"].update(filter=[]),
    ),
    "unknown retriever": {"retriever": {"text_similarity_reranker": {"retriever": {}}}},
    "extra knn in a list": _broken(
        "knn", lambda b: b.update(knn=[b["knn"], {"field": "embedding", "query_vector": VEC}])
    ),
    "opensearch knn without filter": {
        "query": {"knn": {"embedding": {"vector": VEC, "k": 5}}},
    },
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_bodies_are_refused(case: str) -> None:
    with pytest.raises(AclGuardError, match=r"ACL|retriever|every row"):
        check_body(BROKEN[case], ACL)


def test_opensearch_knn_with_filter_passes() -> None:
    check_body({"query": {"knn": {"embedding": {"vector": VEC, "k": 5, "filter": ACL}}}}, ACL)


def test_msearch_second_body_broken() -> None:
    b = bodies()
    searches = build.msearch_pair("idx", b["bm25"], BROKEN["knn without filter"])
    with pytest.raises(AclGuardError, match="msearch body 1"):
        check_msearch(searches, ACL)
    with pytest.raises(AclGuardError, match="pairs"):
        check_msearch(searches[:3], ACL)


def _with(**extra: Any) -> dict[str, Any]:
    return {**bodies()["bm25"], **extra}


# Keys and aggregations that read past the query (and so past the ACL), or that the guard
# does not know: all refused before anything is sent.
REACHES_AROUND = {
    "global aggregation": _with(
        aggs={"all": {"global": {}, "aggs": {"t": {"terms": {"field": "tenant_id"}}}}}
    ),
    "global nested under a terms": _with(
        aggs={"by": {"terms": {"field": "doc_id"}, "aggs": {"all": {"global": {}}}}}
    ),
    "significant_terms": _with(aggs={"s": {"significant_terms": {"field": "content_terms"}}}),
    "significant_text": _with(aggs={"s": {"significant_text": {"field": "content"}}}),
    "terms with min_doc_count 0": _with(
        aggs={"t": {"terms": {"field": "doc_id", "min_doc_count": 0}}}
    ),
    "scripted metric": _with(aggs={"m": {"scripted_metric": {"map_script": "x"}}}),
    "a script inside terms": _with(aggs={"t": {"terms": {"script": {"source": "1"}}}}),
    "suggest": _with(suggest={"s": {"text": "x", "term": {"field": "content"}}}),
    "runtime field shadowing tenant_id": _with(
        runtime_mappings={"tenant_id": {"type": "keyword", "script": "emit('acme')"}}
    ),
    "collapse": _with(collapse={"field": "doc_id"}),
    "profile": _with(profile=True),
    "script fields": _with(script_fields={"f": {"script": "1"}}),
    "script sort": _with(sort=[{"_script": {"type": "number", "script": "1"}}]),
    "unknown key": _with(rank={"rrf": {}}),
    "two aggregation types": _with(
        aggs={"t": {"terms": {"field": "doc_id"}, "max": {"field": "ordinal"}}}
    ),
    "top_hits with script fields": _with(
        aggs={"h": {"top_hits": {"script_fields": {"f": {"script": "1"}}}}}
    ),
}


@pytest.mark.parametrize("case", sorted(REACHES_AROUND))
def test_bodies_that_reach_around_the_acl_are_refused(case: str) -> None:
    with pytest.raises(AclGuardError, match="refusing"):
        check_body(REACHES_AROUND[case], ACL)


def test_aggregations_over_the_callers_rows_pass() -> None:
    check_body(
        _with(
            size=0,
            track_total_hits=True,
            post_filter={"term": {"mime_type": "text/markdown"}},
            sort=[{"updated_at": "desc"}, "_score"],
            aggs={
                "types": {
                    "terms": {"field": "mime_type", "size": 10},
                    "aggs": {
                        "pages": {"max": {"field": "page_end"}},
                        "top": {"top_hits": {"size": 1, "_source": ["title"]}},
                    },
                },
                "by_day": {"date_histogram": {"field": "updated_at", "calendar_interval": "day"}},
                "docs": {"cardinality": {"field": "doc_id"}},
                "recent": {"filter": {"range": {"updated_at": {"gte": "now-30d"}}}},
            },
        ),
        ACL,
    )


def test_msearch_headers_are_allow_listed() -> None:
    b = bodies()
    ok = build.msearch_pair("idx", b["bm25"], b["knn"], search_type="dfs_query_then_fetch")
    assert ok[0]["search_type"] == "dfs_query_then_fetch" and "search_type" not in ok[2]
    check_msearch(ok, ACL)
    with pytest.raises(AclGuardError, match="header 0"):
        check_msearch([{"index": "idx", "ignore_unavailable": True}, b["bm25"]], ACL)
