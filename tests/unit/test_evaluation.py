from __future__ import annotations

import math
import os
import random
from typing import Any

import pytest

from es_rag.evaluation import (
    average_precision,
    bootstrap_ci,
    dedupe,
    evaluate,
    hit_at_k,
    mrr_at_k,
    ndcg_at_k,
    paired_randomization_test,
    per_query,
    precision_at_k,
    recall_at_k,
)

pytestmark = pytest.mark.unit


def test_ndcg_hand_computed() -> None:
    # Linear gain (trec_eval's ndcg_cut): gain = grade, discount log2(rank + 1).
    qrels = {"a": 3, "b": 1, "c": 2}
    ranked = ["b", "x", "a"]
    got = ndcg_at_k(ranked, qrels, k=3)
    dcg = 1 / math.log2(2) + 0 + 3 / math.log2(4)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    assert got == pytest.approx(dcg / idcg)
    assert got == pytest.approx(0.5250049893849101)  # pytrec_eval ndcg_cut_3, same input
    assert ndcg_at_k(["a", "c", "b"], qrels, k=3) == pytest.approx(1.0)
    assert ndcg_at_k(["x"], {}, k=3) == 0.0


def test_ndcg_exponential_gain_opt_in() -> None:
    qrels = {"a": 3, "b": 1, "c": 2}
    got = ndcg_at_k(["b", "x", "a"], qrels, k=3, exponential=True)
    dcg = (2**1 - 1) / math.log2(2) + 0 + (2**3 - 1) / math.log2(4)
    idcg = (2**3 - 1) / math.log2(2) + (2**2 - 1) / math.log2(3) + (2**1 - 1) / math.log2(4)
    assert got == pytest.approx(dcg / idcg)
    # Binary judgments: both gains agree.
    binary = {"a": 1, "b": 1}
    assert ndcg_at_k(["x", "b"], binary, 10) == pytest.approx(
        ndcg_at_k(["x", "b"], binary, 10, exponential=True)
    )


def test_ndcg_negative_grades_have_zero_gain() -> None:
    # pytrec_eval ndcg_cut_3 for this input is 0.66967181649423 (negative grade clamped).
    assert ndcg_at_k(["b", "a", "c"], {"a": 2, "b": -1, "c": 1}, 3) == pytest.approx(
        0.66967181649423
    )


def test_recall_and_mrr() -> None:
    qrels = {"a": 1, "b": 2, "z": 0}
    assert recall_at_k(["a", "x", "z"], qrels, k=3) == pytest.approx(0.5)
    assert mrr_at_k(["x", "z", "b"], qrels, k=3) == pytest.approx(1 / 3)
    assert mrr_at_k(["x", "z", "b"], qrels, k=2) == 0.0


def test_hit_precision_and_average_precision() -> None:
    qrels = {"a": 1, "b": 2, "c": 3, "z": 0}
    ranked = ["x", "a", "z", "b"]
    assert hit_at_k(ranked, qrels, 1) == 0.0
    assert hit_at_k(ranked, qrels, 2) == 1.0
    assert precision_at_k(ranked, qrels, 10) == pytest.approx(2 / 10)
    # Relevant at ranks 2 and 4; c never retrieved still counts in the denominator.
    assert average_precision(ranked, qrels) == pytest.approx((1 / 2 + 2 / 4) / 3)
    assert average_precision(ranked, {"x": 0}) == 0.0


def test_dedupe_keeps_best_rank() -> None:
    assert dedupe(["d1", "d2", "d1", "d3", "d2"]) == ["d1", "d2", "d3"]


# --- evaluate / per_query -------------------------------------------------------------


def test_evaluate_shape_skips_and_types() -> None:
    qrels = {
        "q1": {"a": 2, "b": 0},
        "q2": {"c": 1},
        "q3": {"d": 0},  # no relevant judgment: skipped
        "q4": {"e": 3},  # judged but absent from the run: scores 0
    }
    run = {"q1": ["a", "b", "a"], "q2": ["x", "c"], "q3": ["d"], "q5": ["y"]}
    types = {"q1": "lookup", "q2": "lookup", "q4": "multi-hop"}
    got = evaluate(run, qrels, k=5, types=types)
    assert set(got) == {
        "ndcg@5",
        "recall@5",
        "recall@100",
        "hit@5",
        "mrr@5",
        "map",
        "ndcg@5_exp",
        "queries",
        "skipped",
        "by_type",
    }
    assert got["queries"] == 3
    assert got["skipped"] == 2  # q3 (no relevant doc) and q5 (no judgments at all)
    assert got["hit@5"] == pytest.approx(2 / 3)
    assert got["mrr@5"] == pytest.approx((1 + 1 / 2 + 0) / 3)
    assert got["ndcg@5"] == pytest.approx((1 + 1 / math.log2(3) + 0) / 3)
    # q1 has a single relevant document (grade 2) at rank 1: 1 either way; the gains
    # differ only when grades mix, as below.
    assert got["ndcg@5_exp"] == pytest.approx((1 + 1 / math.log2(3) + 0) / 3)
    mixed = evaluate({"q": ["b", "x", "a"]}, {"q": {"a": 3, "b": 1}}, k=3)
    linear = (1 + 3 / 2) / (3 + 1 / math.log2(3))
    exponential = (1 + 7 / 2) / (7 + 1 / math.log2(3))
    assert mixed["ndcg@3"] == pytest.approx(linear)
    assert mixed["ndcg@3_exp"] == pytest.approx(exponential)
    assert got["by_type"]["lookup"]["queries"] == 2
    assert got["by_type"]["lookup"]["mrr@5"] == pytest.approx(0.75)
    assert got["by_type"]["multi-hop"] == {
        "ndcg@5": 0.0,
        "recall@5": 0.0,
        "recall@100": 0.0,
        "hit@5": 0.0,
        "mrr@5": 0.0,
        "map": 0.0,
        "ndcg@5_exp": 0.0,
        "queries": 1,
    }
    assert evaluate(run, qrels)["by_type"] == {}
    assert "ndcg@10" in evaluate(run, qrels)
    empty = evaluate({}, {})
    assert empty["queries"] == 0 and empty["ndcg@10"] == 0.0


def test_per_query_matches_evaluate() -> None:
    qrels = {"q1": {"a": 2}, "q2": {"c": 1}, "q3": {"d": 0}}
    run = {"q1": ["a"], "q2": ["x", "x", "c"]}
    assert per_query(run, qrels, "mrr", 10) == {"q1": 1.0, "q2": 0.5}  # duplicate collapsed
    assert per_query(run, qrels, "hit@1") == {"q1": 1.0, "q2": 0.0}
    assert per_query(run, qrels, "map") == {"q1": 1.0, "q2": 0.5}
    with pytest.raises(ValueError):
        per_query(run, qrels, "bleu")


# --- validation against trec_eval (pytrec_eval) ---------------------------------------


@pytest.fixture(scope="module")
def pytrec_eval() -> Any:
    try:
        import pytrec_eval as module
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("pytrec-eval-terrier (dev extra) is required in CI")
        pytest.skip("pytrec-eval-terrier not installed (pip install -e '.[dev]')")
    return module


def _random_collection(
    seed: int, n_queries: int = 400
) -> tuple[dict[str, list[str]], dict[str, dict[str, int]]]:
    """Seeded runs and graded qrels covering the awkward cases.

    Grades 0..3 with a few -1 (trec_eval's "judged non-relevant, negative"); unjudged
    documents in the runs; runs of length 0..150 (so recall@100 differs from recall@10);
    queries with relevant docs none of which are retrieved; queries whose judgments are
    all non-relevant; queries with more relevant docs than k.
    """
    rng = random.Random(seed)
    docs = [f"d{i:04d}" for i in range(300)]
    run: dict[str, list[str]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for i in range(n_queries):
        qid = f"q{i:04d}"
        judged = rng.sample(docs, rng.randint(1, 40))
        grades = {d: rng.choices([-1, 0, 1, 2, 3], weights=[1, 10, 4, 2, 1])[0] for d in judged}
        if i % 7 == 0:  # all judged non-relevant
            grades = dict.fromkeys(grades, 0)
        qrels[qid] = grades
        length = rng.choice([0, 1, 3, 10, 25, 100, 150, rng.randint(0, 150)])
        # Every fifth query retrieves nothing relevant.
        pool = [d for d in docs if grades.get(d, 0) <= 0] if i % 5 == 0 else docs
        run[qid] = rng.sample(pool, min(length, len(pool)))
    return run, qrels


def _trec_run(run: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    # trec_eval re-sorts by score (ties broken by docno, descending), so hand it strictly
    # decreasing scores in our rank order; it then keeps our order exactly.
    return {q: {d: float(len(ids) - r) for r, d in enumerate(ids)} for q, ids in run.items() if ids}


MEASURES = {
    "ndcg_cut_10",
    "ndcg_cut_100",
    "recall_10",
    "recall_100",
    "P_10",
    "success_10",
    "recip_rank",
    "map",
}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_per_query_metrics_match_trec_eval(pytrec_eval: Any, seed: int) -> None:
    run, qrels = _random_collection(seed)
    ref = pytrec_eval.RelevanceEvaluator(qrels, MEASURES).evaluate(_trec_run(run))
    cut10 = {q: ids[:10] for q, ids in run.items()}
    ref_rr10 = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(_trec_run(cut10))
    compared = 0
    for qid, ranked in run.items():
        rel = qrels[qid]
        if not ranked or not any(g > 0 for g in rel.values()):
            continue
        compared += 1
        r = ref[qid]
        tol = 1e-6
        assert ndcg_at_k(ranked, rel, 10) == pytest.approx(r["ndcg_cut_10"], abs=tol), qid
        assert ndcg_at_k(ranked, rel, 100) == pytest.approx(r["ndcg_cut_100"], abs=tol), qid
        assert recall_at_k(ranked, rel, 10) == pytest.approx(r["recall_10"], abs=tol), qid
        assert recall_at_k(ranked, rel, 100) == pytest.approx(r["recall_100"], abs=tol), qid
        assert precision_at_k(ranked, rel, 10) == pytest.approx(r["P_10"], abs=tol), qid
        assert hit_at_k(ranked, rel, 10) == pytest.approx(r["success_10"], abs=tol), qid
        assert average_precision(ranked, rel) == pytest.approx(r["map"], abs=tol), qid
        # recip_rank is uncut: equal to ours at k = len(run), and to mrr@10 on the top 10.
        assert mrr_at_k(ranked, rel, len(ranked)) == pytest.approx(r["recip_rank"], abs=tol)
        assert mrr_at_k(ranked, rel, 10) == pytest.approx(ref_rr10[qid]["recip_rank"], abs=tol)
    assert compared > 200


def test_exponential_gain_is_not_trec_eval(pytrec_eval: Any) -> None:
    """Guards the documented choice: the 2^rel - 1 gain disagrees with ndcg_cut."""
    run, qrels = _random_collection(3)
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(_trec_run(run))
    differ = sum(
        abs(ndcg_at_k(ids, qrels[q], 10, exponential=True) - ref[q]["ndcg_cut_10"]) > 1e-6
        for q, ids in run.items()
        if q in ref
    )
    assert differ > 30


def test_evaluate_means_match_trec_eval(pytrec_eval: Any) -> None:
    run, qrels = _random_collection(4)
    # Compare on queries present in both (pytrec_eval has no -c for absent queries).
    run = {q: ids for q, ids in run.items() if ids}
    qrels = {q: qrels[q] for q in run}
    ref = pytrec_eval.RelevanceEvaluator(qrels, MEASURES).evaluate(_trec_run(run))
    judged = [q for q in run if any(g > 0 for g in qrels[q].values())]
    got = evaluate(run, qrels, k=10)
    assert got["queries"] == len(judged)
    assert got["skipped"] == len(run) - len(judged)

    def mean(measure: str) -> float:
        return math.fsum(ref[q][measure] for q in judged) / len(judged)

    for ours, theirs in [
        ("ndcg@10", "ndcg_cut_10"),
        ("recall@10", "recall_10"),
        ("recall@100", "recall_100"),
        ("hit@10", "success_10"),
        ("map", "map"),
    ]:
        assert got[ours] == pytest.approx(mean(theirs), abs=1e-6), ours
    per = per_query(run, qrels, "ndcg@10")
    assert set(per) == set(judged)
    assert all(per[q] == pytest.approx(ref[q]["ndcg_cut_10"], abs=1e-6) for q in judged)


# --- significance ---------------------------------------------------------------------


def _scores(seed: int, n: int = 200, shift: float = 0.0) -> dict[str, float]:
    rng = random.Random(seed)
    return {f"q{i}": min(1.0, max(0.0, rng.random() * 0.8 + shift)) for i in range(n)}


def test_identical_runs_are_not_different() -> None:
    a = _scores(0)
    assert paired_randomization_test(a, dict(a)) == pytest.approx(1.0)
    low, high = bootstrap_ci(a, dict(a))
    assert low <= 0.0 <= high
    small = {"q1": 0.5, "q2": 0.25}  # exact enumeration path
    assert paired_randomization_test(small, dict(small)) == pytest.approx(1.0)


def test_large_consistent_difference_is_significant() -> None:
    b = _scores(1)
    a = {q: v + 0.1 for q, v in b.items()}
    assert paired_randomization_test(a, b) < 0.01
    low, high = bootstrap_ci(a, b)
    assert 0.0 < low <= 0.1 <= high
    assert bootstrap_ci(b, a)[1] < 0.0


def test_noise_is_not_significant() -> None:
    a, b = _scores(2), _scores(3)  # independent draws, same distribution
    assert paired_randomization_test(a, b) > 0.05
    low, high = bootstrap_ci(a, b)
    assert low < 0.0 < high


def test_exact_randomization_on_few_queries() -> None:
    # 4 queries all favouring a: 2 of 16 sign patterns reach |mean| = observed.
    a = {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 1.0}
    b = dict.fromkeys(a, 0.0)
    assert paired_randomization_test(a, b) == pytest.approx(2 / 16)


def test_significance_is_deterministic_and_checks_pairing() -> None:
    a, b = _scores(4), _scores(5, shift=0.03)
    assert paired_randomization_test(a, b, seed=7) == paired_randomization_test(a, b, seed=7)
    assert bootstrap_ci(a, b, seed=7) == bootstrap_ci(a, b, seed=7)
    assert bootstrap_ci(a, b, seed=7) != bootstrap_ci(a, b, seed=8)
    with pytest.raises(ValueError):
        paired_randomization_test(a, {"other": 0.0})
    with pytest.raises(ValueError):
        bootstrap_ci({}, {})


def test_trec_runs_round_trip_and_rank_by_score() -> None:
    """``es-rag eval --runs`` writes what trec_eval reads: one ``qid Q0 doc rank score tag``
    line per document, best first, duplicates collapsed."""
    from es_rag.evaluation import format_trec_run, parse_trec_run

    run = {"q2": ["d3", "d1", "d3"], "q1": ["d9"]}
    text = format_trec_run(run, tag="es-rag:bm25")
    assert text.splitlines() == [
        "q1 Q0 d9 1 1 es-rag:bm25",
        "q2 Q0 d3 1 2 es-rag:bm25",
        "q2 Q0 d1 2 1 es-rag:bm25",
    ]
    assert parse_trec_run(text) == {"q1": ["d9"], "q2": ["d3", "d1"]}
    # Another system's file: lines in any order, ranked by score (ties by rank).
    other = "q1 Q0 b 2 0.5 x\nq1 Q0 a 1 0.9 x\nq1 Q0 c 3 0.5 x\n"
    assert parse_trec_run(other) == {"q1": ["a", "b", "c"]}
    with pytest.raises(ValueError, match="line 1"):
        parse_trec_run("q1 d 1\n")


def test_the_sampled_p_value_agrees_with_exact_enumeration_within_monte_carlo_error() -> None:
    """scipy's permutation test, sampled, against every one of 2^16 sign assignments."""
    import itertools

    import numpy as np

    rng = np.random.default_rng(3)
    d = rng.normal(0.02, 0.1, 16)
    a = {f"q{i}": float(v) for i, v in enumerate(d)}
    b = dict.fromkeys(a, 0.0)
    observed = abs(d.mean())
    flips = np.array(list(itertools.product((1.0, -1.0), repeat=16)))
    exact = float(np.mean(np.abs(flips @ d) / 16 >= observed - 1e-12))
    sampled = paired_randomization_test(a, b, trials=5000)  # 5000 < 2^16: sampled
    # The two-sided p is twice a one-sided estimate: its standard error doubles too.
    one_sided = exact / 2
    standard_error = 2 * (one_sided * (1 - one_sided) / 5000) ** 0.5
    assert abs(sampled - exact) < 4 * standard_error + 2 / 5000
    assert paired_randomization_test(a, b, trials=2**16) == pytest.approx(exact, abs=1e-9)
