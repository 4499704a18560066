"""Pseudo-relevance feedback's term selection and the BM25 clause it becomes."""

from __future__ import annotations

import pytest

from es_rag.acl import acl_filter, make_caller
from es_rag.query import build
from es_rag.query.feedback import agreement, expansion
from es_rag.query.guard import check_body

pytestmark = pytest.mark.unit

ACL = acl_filter(make_caller("acme", users=["u1"]))


def test_terms_are_pooled_over_chunks_by_their_share_of_each_chunk() -> None:
    chunks = ["heat flux heat wall", "heat conduct"]
    got = dict(expansion(chunks, question="heat", terms=10, weight=1.0))
    # heat: (2/4 + 1/2) / 2 = 0.5; flux, wall: 1/4 / 2; conduct: 1/2 / 2
    assert got["heat"] == pytest.approx(1.0)
    assert got["conduct"] == pytest.approx(0.5)
    assert got["flux"] == pytest.approx(0.25) and got["wall"] == pytest.approx(0.25)


def test_a_long_chunk_does_not_outvote_a_short_one() -> None:
    long = "heat " + " ".join(f"w{i}" for i in range(20)) + " flux flux flux flux"
    short = "heat conduct"
    got = expansion([long, short], question="heat", terms=3, weight=1.0)
    # flux is 4 of the long chunk's 25 words, conduct 1 of the short one's 2: counted raw,
    # flux would come first.
    assert [t for t, _ in got] == ["heat", "conduct", "flux"]


def test_strongest_term_gets_the_weight_and_the_list_is_cut_at_terms() -> None:
    got = expansion(["a a a b b c d"], question="a", terms=2, weight=0.6)
    assert [t for t, _ in got] == ["a", "b"]
    assert got[0][1] == pytest.approx(0.6)
    assert got[1][1] == pytest.approx(0.4)


def test_ties_keep_the_first_seen_order() -> None:
    got = expansion(["q z y x"], question="q", terms=4, weight=1.0)
    assert [t for t, _ in got] == ["q", "z", "y", "x"]
    assert expansion(["q z y x"], question="q", terms=4, weight=1.0) == got


def test_only_chunks_sharing_a_question_term_take_part() -> None:
    # The second chunk is a dense-only hit about something else: its words must not pull
    # BM25 away from the question's own vocabulary.
    got = dict(
        expansion(["zk4471qx payroll", "holiday rota"], question="zk4471qx", terms=10, weight=1.0)
    )
    assert set(got) == {"zk4471qx", "payroll"}
    assert expansion(["holiday rota"], question="zk4471qx", terms=10, weight=1.0) == ()


def test_nothing_to_add() -> None:
    assert expansion([], question="a", terms=5, weight=1.0) == ()
    assert expansion([""], question="a", terms=5, weight=1.0) == ()
    assert expansion(["a b"], question="a", terms=5, weight=0.0) == ()


def _r(bm25: int | None, knn: int | None) -> dict[str, int | None]:
    return {"bm25": bm25, "knn": knn}


def test_agreement_is_the_share_of_the_fused_top_both_retrievers_ranked_in_their_top() -> None:
    fused = [_r(1, 3), _r(2, None), _r(None, 1), _r(4, 11), _r(10, 10)]
    fused += [_r(None, i) for i in range(2, 7)] + [_r(2, 2)]  # the 11th is past the top 10
    # in both top 10s among the first 10: (1, 3) and (10, 10); (4, 11) misses kNN's top 10
    assert agreement(fused) == pytest.approx(0.2)
    assert agreement(fused, top=3) == pytest.approx(1 / 3)  # only (1, 3) is in both top 3s


def test_agreement_over_fewer_hits_than_the_top_counts_what_was_found() -> None:
    assert agreement([_r(1, 1), _r(2, 2)]) == pytest.approx(1.0)
    assert agreement([_r(1, None), _r(None, 1)]) == 0.0


def test_agreement_is_unknown_without_ranks() -> None:
    assert agreement([_r(None, None)] * 3) is None
    assert agreement([]) is None


def test_expanded_bm25_keeps_the_acl_around_every_clause() -> None:
    plain = build.bm25_query("heat flux", acl=ACL)
    assert plain["bool"]["must"][0]["multi_match"]["query"] == "heat flux"
    q = build.bm25_query("heat flux", acl=ACL, expansion=[("conduct", 0.6), ("wall", 0.3)])
    b = q["bool"]
    assert b["minimum_should_match"] == 1 and "must" not in b
    assert b["should"][0] == plain["bool"]["must"][0]
    assert b["should"][1:] == [
        {"term": {"content_terms": {"value": "conduct", "boost": 0.6}}},
        {"term": {"content_terms": {"value": "wall", "boost": 0.3}}},
    ]
    assert b["filter"] == plain["bool"]["filter"]
    check_body({"query": q, "size": 5}, ACL)
    for body in (
        build.hits_body(5, query=build.bm25_query("x", acl=ACL, expansion=[("y", 1.0)])),
        build.native_rrf_body(
            build.bm25_query("x", acl=ACL, expansion=[("y", 1.0)]),
            [0.1, 0.2],
            acl=ACL,
            size=5,
            rank_window_size=5,
            rank_constant=60,
            num_candidates=10,
        ),
    ):
        check_body(body, ACL)


def test_feedback_fetch_reads_only_under_the_acl() -> None:
    body = build.feedback_body(ACL, ["c1", "c2"])
    check_body(body, ACL)
    assert body["query"]["bool"]["filter"][0] == ACL
    assert body["size"] == 2 and body["_source"] == ["content_terms"]
