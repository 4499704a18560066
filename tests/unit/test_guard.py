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
        "bm25": build.bm25_body("x", acl=ACL, size=5),
        "knn": build.knn_body(VEC, acl=ACL, size=5, num_candidates=10),
        "native": build.native_rrf_body(
            "x", VEC, acl=ACL, size=5, rank_window_size=5, rank_constant=60, num_candidates=10
        ),
        "native_weighted": build.native_rrf_body(
            "x",
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
