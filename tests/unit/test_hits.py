"""Hit assembly and strategies, pure: responses in, ranked hits out; bodies from queries."""

from __future__ import annotations

import json
from typing import Any

import pytest

from es_rag.acl import acl_filter, make_caller
from es_rag.config import Settings
from es_rag.engine.base import ClusterInfo
from es_rag.errors import ConfigurationError, StrategyUnavailableError
from es_rag.query import build, hits
from es_rag.query.guard import check_body, check_msearch
from es_rag.query.strategies import NAMES, REGISTRY, Query, resolve

pytestmark = pytest.mark.unit

ACL = acl_filter(make_caller("acme", users=["u1"]))


def raw(doc: str, score: float, **source: Any) -> dict[str, Any]:
    return {"_id": doc, "_score": score, "_source": {"doc_id": doc, "content": doc, **source}}


def response(*rows: dict[str, Any]) -> dict[str, Any]:
    return {"hits": {"hits": list(rows)}}


def test_a_single_retriever_keeps_the_servers_order_and_names_its_rank() -> None:
    out = hits.single(response(raw("a", 3.0, title_path=["T"]), raw("b", 1.0)), "bm25")
    assert [h.chunk_id for h in out] == ["a", "b"]
    assert out[0].ranks == {"bm25": 1, "knn": None} and out[1].ranks["bm25"] == 2
    assert out[0].scores == {"bm25": 3.0} and out[0].title_path == ["T"]
    assert out[1].explain == {"bm25": {"rank": 2, "score": 1.0}}


def test_client_rrf_fuses_by_rank_and_explains_each_share() -> None:
    bm25 = response(raw("a", 9.0), raw("b", 5.0))
    knn = response(raw("b", 0.9), raw("c", 0.8))
    out = hits.client_fused(
        [bm25, knn], method="rrf", window=10, rank_constant=60, weights={"bm25": 1, "knn": 1}
    )
    assert [h.chunk_id for h in out] == ["b", "a", "c"]  # b is in both lists
    b = out[0]
    assert b.ranks == {"bm25": 2, "knn": 1}
    assert b.score == pytest.approx(1 / 62 + 1 / 61)
    assert b.explain["bm25"]["rrf"] == pytest.approx(1 / 62)
    assert b.scores == {"bm25": 5.0, "knn": 0.9, "rrf": b.score}


def test_client_linear_fuses_normalised_scores() -> None:
    bm25 = response(raw("a", 10.0), raw("b", 0.0))
    knn = response(raw("b", 1.0), raw("a", 0.0))
    out = hits.client_fused(
        [bm25, knn], method="linear", window=10, rank_constant=60, weights={"bm25": 3, "knn": 1}
    )
    assert [h.chunk_id for h in out] == ["a", "b"]  # bm25 weighs three times as much
    assert out[0].scores["linear"] == pytest.approx(0.75) and "linear" in out[0].explain


def test_highlights_come_with_the_hit_from_either_response_and_inputs_stay_as_they_were() -> None:
    bm25 = response({**raw("a", 1.0), "highlight": {"content": ["<em>a</em>"]}})
    knn = response(raw("a", 0.5))
    before = repr([bm25, knn])
    (hit,) = hits.client_fused(
        [bm25, knn], method="rrf", window=10, rank_constant=60, weights={"bm25": 1, "knn": 1}
    )
    assert hit.highlights == ["<em>a</em>"]
    assert repr([bm25, knn]) == before


def test_server_fused_hits_say_ranks_are_unknown() -> None:
    (hit,) = hits.server_fused(response(raw("a", 0.03)))
    assert hit.ranks == {"bm25": None, "knn": None} and hit.scores == {"rrf": 0.03}


def test_native_ranks_parsed_from_the_server_explanation() -> None:
    """The shape Elasticsearch's RRFRankDoc.explain produces (positions + 1; 0 = absent)."""
    explanation = {
        "value": 0.032,
        "description": "sum of:",
        "details": [
            {
                "value": 0.032,
                "description": "rrf score: [0.032522473] computed for initial ranks [2, 0] with "
                "rankConstant: [60] as sum of [1 / (rank + rankConstant)] for each query",
                "details": [
                    {
                        "value": 2,
                        "description": "rrf score: [0.016129032], for rank [2] in query at "
                        "index [0] computed as [1 / (2 + 60)], for matching query with score",
                        "details": [{"value": 7.25, "description": "sum of:", "details": []}],
                    },
                    {
                        "value": 0.0,
                        "description": "rrf score: [0], result not found in query at index [1]",
                        "details": [],
                    },
                ],
            }
        ],
    }
    ranks, scores = hits.native_ranks(explanation)
    assert ranks == {"bm25": 2, "knn": None}
    assert scores == {"bm25": 7.25, "knn": None}
    assert hits.native_ranks(None) == ({"bm25": None, "knn": None}, {"bm25": None, "knn": None})


def test_native_rrf_hits_report_each_retrievers_rank_and_share() -> None:
    explanation = {
        "description": "rrf score: [0.03] computed for initial ranks [1, 3] with rankConstant",
        "details": [
            {
                "description": "rrf score for rank [1] in query at index [0]",
                "details": [{"value": 4.0}],
            },
            {
                "description": "rrf score for rank [3] in query at index [1]",
                "details": [{"value": 0.7}],
            },
        ],
    }
    (hit,) = hits.native_rrf(
        response({**raw("a", 0.03), "_explanation": explanation}),
        rank_constant=60,
        weights={"bm25": 1.0, "knn": 2.0},
    )
    assert hit.ranks == {"bm25": 1, "knn": 3}
    assert hit.scores == {"bm25": 4.0, "knn": 0.7, "rrf": 0.03}
    assert hit.explain["knn"]["rrf"] == pytest.approx(2 / 63)


def cluster(**kw: Any) -> ClusterInfo:
    base: dict[str, Any] = {
        "flavor": "elasticsearch",
        "version": "9.2.8",
        "license_type": "basic",
        "native_rrf": False,
        "native_rrf_reason": "unknown retriever [rrf]",
    }
    return ClusterInfo(**{**base, **kw})


def never() -> ClusterInfo:
    raise AssertionError("the cluster was probed although the answer did not depend on it")


def test_auto_is_a_pure_function_of_the_probe_and_the_settings() -> None:
    # The default fusion, z-scores, runs here on any cluster: no probe is needed.
    assert Settings().fusion == "zscore"
    assert resolve("auto", Settings(), never) == (REGISTRY["client-zscore"], None)
    s = Settings(fusion="rrf")
    assert resolve("auto", s, lambda: cluster(native_rrf=True)) == (REGISTRY["native-rrf"], None)
    strategy, note = resolve(None, s, lambda: cluster())
    assert (
        strategy.name == "client-rrf" and note == "native RRF unavailable: unknown retriever [rrf]"
    )
    hybrid = cluster(flavor="opensearch", hybrid=True, native_rrf_reason="es only")
    assert resolve("auto", s, lambda: hybrid)[0].name == "opensearch-hybrid"
    # Score fusion runs here on any cluster, and the single retrievers need no probe.
    assert resolve("auto", s.model_copy(update={"fusion": "linear"}), never)[0].name == (
        "client-linear"
    )
    assert resolve("auto", s.model_copy(update={"fusion": "zscore"}), never)[0].name == (
        "client-zscore"
    )
    for name in ("bm25", "knn", "client-rrf", "client-linear", "client-zscore"):
        assert resolve(name, s, never)[0].name == name
    with pytest.raises(StrategyUnavailableError, match="native-rrf cannot run: unknown"):
        resolve("native-rrf", s, lambda: cluster())
    with pytest.raises(ConfigurationError, match="unknown strategy"):
        resolve("fancy", s, never)
    assert ("auto", *REGISTRY) == NAMES


class Dialect:
    """The pure kNN builder of each engine, as the Engine offers it."""

    def __init__(self, flavor: str) -> None:
        from elasticsearch import Elasticsearch
        from opensearchpy import OpenSearch

        from es_rag.engine.elastic import ElasticsearchEngine
        from es_rag.engine.opensearch import OpenSearchEngine

        self.engine = (
            ElasticsearchEngine(Elasticsearch("http://x:1"))
            if flavor == "elasticsearch"
            else OpenSearchEngine(OpenSearch(hosts=["http://x:1"]))
        )


@pytest.mark.parametrize("flavor", ["elasticsearch", "opensearch"])
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_strategys_bodies_pass_the_guard(name: str, flavor: str) -> None:
    q = Query(
        text="refunds",
        terms="refund",
        vector=[0.1, 0.2],
        acl=ACL,
        filters=[{"term": {"metadata.product": "pay"}}],
        depth=5,
        window=50,
        settings=Settings(search_type="dfs_query_then_fetch"),
        highlight={"fields": {"content": {}}},
    )
    request = REGISTRY[name].bodies(q, Dialect(flavor).engine)  # type: ignore[arg-type]
    if request.searches is not None:
        check_msearch(request.searches, ACL)
        assert request.searches[0]["search_type"] == "dfs_query_then_fetch"
        if REGISTRY[name].fetches_rows:  # ids and scores only; the kept rows come after
            bodies = request.searches[1::2]
            assert all(b["_source"] is False and "highlight" not in b for b in bodies)
        else:
            assert all("highlight" in b for b in request.searches[1::2])
    else:
        assert request.body is not None
        check_body(request.body, ACL)
        assert "highlight" in request.body
    if name == "opensearch-hybrid":
        assert request.pipeline and request.params["search_pipeline"] == request.pipeline[0]
    if name == "bm25":
        assert request.params == {"search_type": "dfs_query_then_fetch"}


def test_the_query_cache_is_a_bounded_lru_shared_safely() -> None:
    import threading

    from es_rag.cache import LRU

    calls: list[str] = []

    def compute(key: str) -> list[float]:
        calls.append(key)
        return [float(len(calls))]

    cache: LRU[str, list[float]] = LRU(2)
    assert cache.get_or_compute("a", lambda: compute("a")) == [1.0]
    assert cache.get_or_compute("a", lambda: compute("a")) == [1.0]  # cached
    cache.get_or_compute("b", lambda: compute("b"))
    cache.get_or_compute("a", lambda: compute("a"))  # a is now the most recent
    cache.get_or_compute("c", lambda: compute("c"))  # evicts b
    assert len(cache) == 2
    cache.get_or_compute("b", lambda: compute("b"))
    assert calls == ["a", "b", "c", "b"]
    assert len(LRU(0)) == 0 and LRU(0).get_or_compute("x", lambda: [0.0]) == [0.0]

    shared: LRU[int, int] = LRU(None)
    threads = [
        threading.Thread(
            target=lambda i=i: [shared.get_or_compute(j, lambda j=j: j) for j in range(200)]
        )
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(shared) == 200


def test_client_zscore_fuses_standardised_scores_and_floors_the_missing() -> None:
    # bm25: a 10, b 0 -> z +1, -1; knn: b 0.9, c 0.6, a 0.3 -> z +1.22, 0, -1.22
    bm25 = response(raw("a", 10.0), raw("b", 0.0))
    knn = response(raw("b", 0.9), raw("c", 0.6), raw("a", 0.3))
    out = hits.client_fused(
        [bm25, knn], method="zscore", window=10, rank_constant=60, weights={"bm25": 1, "knn": 1}
    )
    z = 1.5**0.5  # each z is counted from its list's floor: bm25 -1, knn -z
    by_id = {h.chunk_id: h for h in out}
    assert by_id["a"].scores["zscore"] == pytest.approx((2 + 0) / 2)
    assert by_id["b"].scores["zscore"] == pytest.approx((0 + 2 * z) / 2)
    # c was not in BM25's list: it gets BM25's lowest z (-1, so 0), not the mean (0, so 1)
    assert by_id["c"].scores["zscore"] == pytest.approx((0 + z) / 2)
    assert min(h.scores["zscore"] for h in out) >= 0
    assert [h.chunk_id for h in out] == ["b", "a", "c"] and "zscore" in out[0].explain
    flat = hits.client_fused(
        [response(raw("a", 2.0), raw("b", 2.0)), response(raw("a", 0.5))],
        method="zscore",
        window=10,
        rank_constant=60,
        weights={"bm25": 1, "knn": 1},
    )
    assert [h.scores["zscore"] for h in flat] == [0.0, 0.0]  # flat lists carry no evidence


@pytest.mark.parametrize("flavor", ["elasticsearch", "opensearch"])
@pytest.mark.parametrize(
    "name", sorted(n for n, s in REGISTRY.items() if s.uses_terms and s.uses_vector)
)
def test_feedbacks_second_round_carries_the_expansion_under_the_acl(name: str, flavor: str) -> None:
    """Client-side fusion resends the expanded BM25 search alone and fuses it with the
    first round's kNN list; a server-side fusion sends everything again."""
    q = Query(
        text="refunds",
        terms="refund",
        vector=[0.1, 0.2],
        acl=ACL,
        filters=[],
        depth=5,
        window=50,
        settings=Settings(search_type="dfs_query_then_fetch"),
        expansion=(("card", 0.6), ("credit", 0.3)),
    )
    strategy = REGISTRY[name]
    first = [{"first": "bm25"}, {"first": "knn"}]
    request, join = strategy.again(q, Dialect(flavor).engine, first)  # type: ignore[arg-type]
    text = json.dumps(request.searches or request.body)
    assert '"value": "card", "boost": 0.6' in text and '"value": "credit"' in text
    if request.searches is not None:
        check_msearch(request.searches, ACL)
    else:
        assert request.body is not None
        check_body(request.body, ACL)
    if strategy.fuses_here:
        assert request.searches is not None and len(request.searches) == 2  # BM25 only
        assert request.searches[0]["search_type"] == "dfs_query_then_fetch"
        assert join([{"again": "bm25"}]) == [{"again": "bm25"}, {"first": "knn"}]
    else:
        assert request == strategy.bodies(q, Dialect(flavor).engine)  # type: ignore[arg-type]
        assert join([{"again": 1}]) == [{"again": 1}]


def test_fused_hits_take_their_rows_from_the_fetch_and_drop_an_unreadable_one() -> None:
    """Client-side fusion ranks ids and scores; the rows of the kept hits come from one
    fetch by id under the ACL, and a hit whose row did not come back (its ACL changed
    between the two requests) is not returned."""
    bare = response({"_id": "a", "_score": 3.0}, {"_id": "b", "_score": 2.0})
    knn = response({"_id": "b", "_score": 0.9}, {"_id": "c", "_score": 0.8})
    fused = hits.client_fused(
        [bare, knn], method="rrf", window=10, rank_constant=60, weights={"bm25": 1, "knn": 1}
    )
    assert [h.chunk_id for h in fused] == ["b", "a", "c"] and fused[0].text == ""
    rows = [
        {**raw("c", 1.0, doc_id="d3", content="gamma"), "highlight": {"content": ["<em>g</em>"]}},
        raw("b", 1.0, doc_id="d2", content="beta", title_path=["B"]),
    ]
    out = hits.with_rows(fused, rows)
    assert [(h.chunk_id, h.doc_id, h.text) for h in out] == [
        ("b", "d2", "beta"),
        ("c", "d3", "gamma"),
    ]
    assert out[0].title_path == ["B"] and out[1].highlights == ["<em>g</em>"]
    assert [h.score for h in out] == [fused[0].score, fused[2].score]
    assert out[0].ranks == {"bm25": 2, "knn": 1} and out[0].explain == fused[0].explain

    body = build.hits_rows_body(ACL, [{"term": {"metadata.product": "pay"}}], ["b", "c"], None)
    check_body(body, ACL)
    assert body["size"] == 2 and "highlight" not in body
    assert {"ids": {"values": ["b", "c"]}} in body["query"]["bool"]["filter"]
    lit = build.hits_rows_body(ACL, [], ["b"], build.highlight("gamma"))
    assert lit["highlight"]["highlight_query"] == {"match": {"content": {"query": "gamma"}}}
