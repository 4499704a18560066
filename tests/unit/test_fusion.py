"""RRF arithmetic against hand-computed values."""

from __future__ import annotations

import pytest

from es_rag.query.fusion import rrf

pytestmark = pytest.mark.unit


def test_two_retrievers_hand_computed() -> None:
    fused = rrf({"bm25": ["a", "b", "c"], "knn": ["b", "d"]}, rank_constant=60)
    scores = {f.doc_id: f.score for f in fused}
    assert scores["a"] == pytest.approx(1 / 61)
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["c"] == pytest.approx(1 / 63)
    assert scores["d"] == pytest.approx(1 / 62)
    assert [f.doc_id for f in fused] == ["b", "a", "d", "c"]
    b = fused[0]
    assert b.ranks == {"bm25": 2, "knn": 1}
    assert b.contributions == {"bm25": pytest.approx(1 / 62), "knn": pytest.approx(1 / 61)}


def test_document_seen_by_one_retriever_only_has_null_rank() -> None:
    fused = rrf({"bm25": ["a"], "knn": ["z"]}, rank_constant=10)
    by_id = {f.doc_id: f for f in fused}
    assert by_id["a"].ranks == {"bm25": 1, "knn": None}
    assert by_id["z"].ranks == {"bm25": None, "knn": 1}
    assert by_id["a"].score == pytest.approx(1 / 11)


def test_window_cuts_each_retriever() -> None:
    fused = rrf(
        {"bm25": ["a", "b", "c", "d"], "knn": ["d", "c"]}, rank_constant=1, rank_window_size=2
    )
    scores = {f.doc_id: f.score for f in fused}
    # bm25 contributes only a (1/2) and b (1/3); c and d only through knn.
    assert scores == pytest.approx({"a": 1 / 2, "b": 1 / 3, "d": 1 / 2, "c": 1 / 3})
    assert {f.doc_id: f.ranks["bm25"] for f in fused}["d"] is None


def test_weights_scale_contributions() -> None:
    fused = rrf({"bm25": ["a", "b"], "knn": ["b", "a"]}, rank_constant=60, weights={"bm25": 3.0})
    scores = {f.doc_id: f.score for f in fused}
    assert scores["a"] == pytest.approx(3 / 61 + 1 / 62)
    assert scores["b"] == pytest.approx(3 / 62 + 1 / 61)
    assert [f.doc_id for f in fused] == ["a", "b"]


def test_ties_break_by_best_rank_then_retriever_order() -> None:
    """Three documents with exactly the same RRF score (binary fractions, no rounding):
    the one with the better best rank comes first; between equal best ranks, the one
    ranked by the earlier retriever."""
    # rank_constant 2: rank 2 scores 1/4, rank 6 scores 1/8.
    r1 = ["p1", "x", "p3", "p4", "p5", "y"]  # x: rank 2 here; y: rank 6 here...
    r2 = ["q1", "w", "q3", "q4", "q5", "y"]  # ...and rank 6 here; w: rank 2 here only
    fused = {f.doc_id: f for f in rrf({"bm25": r1, "knn": r2}, rank_constant=2)}
    assert fused["x"].score == fused["w"].score == fused["y"].score == 0.25
    order = [f.doc_id for f in rrf({"bm25": r1, "knn": r2}, rank_constant=2)]
    assert [d for d in order if d in ("x", "w", "y")] == ["x", "w", "y"]
    # (best rank 2 from bm25, best rank 2 from knn, best rank 6); the same every time:
    assert order == [f.doc_id for f in rrf({"bm25": r1, "knn": r2}, rank_constant=2)]


def test_better_best_rank_wins_a_tie() -> None:
    # x: ranks 1 and 3 ; y: ranks 2 and 2 with rank_constant chosen so scores tie:
    # 1/(c+1) + 1/(c+3) == 2/(c+2) never holds exactly, so build the tie with weights.
    fused = rrf({"r1": ["x", "y"], "r2": ["y", "x"]}, rank_constant=5)
    assert fused[0].score == pytest.approx(fused[1].score)
    assert [f.doc_id for f in fused] == ["x", "y"]  # x is first in the first retriever


def test_duplicates_in_one_ranking_are_counted_once() -> None:
    fused = rrf({"bm25": ["a", "a", "b"]}, rank_constant=60)
    assert {f.doc_id: f.ranks["bm25"] for f in fused} == {"a": 1, "b": 2}


def test_empty_and_invalid() -> None:
    assert rrf({"bm25": [], "knn": []}) == []
    with pytest.raises(ValueError):
        rrf({"bm25": ["a"]}, rank_constant=0)


def test_confidence_measures_how_the_top_hit_stands_out() -> None:
    from es_rag.query.fusion import confidence, confidence_weights

    assert confidence([]) == 0.0
    assert confidence([3.0]) == 1.0
    assert confidence([5.0, 5.0, 5.0]) == 0.0  # flat: no clear answer
    # s1=10, rest mean=(2+1)/2=1.5, s_top=1 -> (10-1.5)/(10-1)
    assert confidence([10.0, 2.0, 1.0]) == pytest.approx(8.5 / 9)
    assert confidence([0.9, 0.88, 0.87, 0.86]) < confidence([9.0, 3.0, 2.9, 2.8])
    assert confidence(list(range(20, 0, -1)), top=3) == pytest.approx((20 - 18.5) / 2)
    weights = confidence_weights({"bm25": [10.0, 2.0, 1.0], "knn": [0.9, 0.88, 0.8]})
    assert sum(weights.values()) == pytest.approx(2.0)
    assert weights["bm25"] > 1.0 > weights["knn"]
    assert confidence_weights({"bm25": [], "knn": []}) == {"bm25": 1.0, "knn": 1.0}


def test_linear_fusion_hand_computed() -> None:
    from es_rag.query.fusion import linear

    scored = {"bm25": [("a", 10.0), ("b", 6.0), ("c", 2.0)], "knn": [("b", 0.9), ("d", 0.7)]}
    fused = linear(scored)
    s = {f.doc_id: f.score for f in fused}
    # bm25 norm: a 1, b .5, c 0; knn norm: b 1, d 0; equal weights -> halves
    assert s == pytest.approx({"a": 0.5, "b": 0.75, "c": 0.0, "d": 0.0})
    assert [f.doc_id for f in fused][:2] == ["b", "a"]
    assert fused[0].ranks == {"bm25": 2, "knn": 1}
    weighted = {f.doc_id: f.score for f in linear(scored, weights={"bm25": 3.0, "knn": 1.0})}
    assert weighted["a"] == pytest.approx(0.75) and weighted["b"] == pytest.approx(0.625)
    single = linear({"bm25": [("x", 4.0)], "knn": []})
    assert single[0].score == pytest.approx(0.5)  # one hit normalises to 1, half the weight
    window = {f.doc_id for f in linear(scored, rank_window_size=1)}
    assert window == {"a", "b"}


def test_zscore_reads_the_named_retrievers_scores_as_their_logarithm() -> None:
    """``log_scores`` z-normalises log(1 + score): the same fusion as of pre-logged lists,
    and on a BM25 list whose top stretches far above the rest, the logarithm shortens that
    stretch, so kNN's clear first (c) is no longer outvoted by BM25's first (a)."""
    import math

    from es_rag.query.fusion import zscore

    bm25 = [("a", 20.0), ("b", 16.0), ("c", 12.0), ("d", 9.0)]
    knn = [("c", 0.74), ("d", 0.67), ("a", 0.65), ("b", 0.61)]
    plain = zscore({"bm25": bm25, "knn": knn}, rank_window_size=10)
    logged = zscore({"bm25": bm25, "knn": knn}, rank_window_size=10, log_scores={"bm25"})
    by_hand = zscore(
        {"bm25": [(d, math.log1p(v)) for d, v in bm25], "knn": knn}, rank_window_size=10
    )
    assert [f.doc_id for f in plain][:2] == ["a", "c"]
    assert [f.doc_id for f in logged][:2] == ["c", "a"]
    assert [(f.doc_id, f.score) for f in logged] == [
        (f.doc_id, pytest.approx(f.score)) for f in by_hand
    ]
    assert min(f.score for f in logged) >= 0  # still counted from each list's floor
