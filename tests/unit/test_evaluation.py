from __future__ import annotations

import math

import pytest

from es_rag.evaluation import dedupe, mrr_at_k, ndcg_at_k, recall_at_k

pytestmark = pytest.mark.unit


def test_ndcg_hand_computed() -> None:
    qrels = {"a": 3, "b": 1, "c": 2}
    ranked = ["b", "x", "a"]
    got = ndcg_at_k(ranked, qrels, k=3)
    dcg = (2**1 - 1) / math.log2(2) + 0 + (2**3 - 1) / math.log2(4)
    idcg = (2**3 - 1) / math.log2(2) + (2**2 - 1) / math.log2(3) + (2**1 - 1) / math.log2(4)
    assert got == pytest.approx(dcg / idcg)
    assert ndcg_at_k(["a", "c", "b"], qrels, k=3) == pytest.approx(1.0)
    assert ndcg_at_k(["x"], {}, k=3) == 0.0


def test_recall_and_mrr() -> None:
    qrels = {"a": 1, "b": 2, "z": 0}
    assert recall_at_k(["a", "x", "z"], qrels, k=3) == pytest.approx(0.5)
    assert mrr_at_k(["x", "z", "b"], qrels, k=3) == pytest.approx(1 / 3)
    assert mrr_at_k(["x", "z", "b"], qrels, k=2) == 0.0


def test_dedupe_keeps_best_rank() -> None:
    assert dedupe(["d1", "d2", "d1", "d3", "d2"]) == ["d1", "d2", "d3"]
