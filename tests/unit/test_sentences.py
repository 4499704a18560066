"""A question of several sentences: which sentences are asked, and how their kNN lists
become one before fusion."""

from __future__ import annotations

from typing import Any

import pytest

from es_rag.acl import acl_filter, make_caller
from es_rag.config import Settings
from es_rag.query import sentences
from es_rag.query.guard import check_msearch
from es_rag.query.strategies import REGISTRY, Query

pytestmark = pytest.mark.unit

ACL = acl_filter(make_caller("acme", users=["u1"]))


def test_one_sentence_is_asked_whole_and_only_whole() -> None:
    assert sentences.split("how long does a refund take?", 4) == []
    assert sentences.split("Refunds. Give details.", 4) == []  # two words each: nothing alone
    assert sentences.split("", 4) == []


def test_each_sentence_of_three_words_or_more_is_kept_in_order_up_to_the_limit() -> None:
    q = (
        "I AM INTERESTED IN ASSOCIATIVE MEMORIES. Give definitions. "
        "I WOULD ALSO LIKE PARALLEL MACHINES! What about SIMD hardware?\nvector processors only"
    )
    got = sentences.split(q, 4)
    assert got == [
        "I AM INTERESTED IN ASSOCIATIVE MEMORIES.",
        "I WOULD ALSO LIKE PARALLEL MACHINES!",
        "What about SIMD hardware?",
        "vector processors only",
    ]
    assert sentences.split(q, 2) == got[:2]
    assert sentences.split(q, 0) == []


def test_a_semicolon_an_abbreviation_or_an_open_parenthesis_does_not_end_a_sentence() -> None:
    # List items after a semicolon have lost their topic ("relation with enzyme systems").
    items = "nickel in nutrition: methods for analysis; relation with enzyme systems; toxicity"
    assert sentences.split(items, 4) == []
    assert sentences.split("退款需要多长时间；差旅补贴怎么申请？", 4) == []
    # "i.e." and an open parenthesis: both halves would be fragments.
    assert sentences.split("a method for the mixing problem (i.e. the blasius problem) .", 4) == []
    got = sentences.split(
        "the related diptera, i. e., culicoides and mosquitos. the work of Smith et al. on "
        "vectors. a review by J. Brown of the vectors.",
        4,
    )
    assert got == [
        "the related diptera, i. e., culicoides and mosquitos.",
        "the work of Smith et al. on vectors.",
        "a review by J. Brown of the vectors.",
    ]


def test_han_sentences_count_characters() -> None:
    assert sentences.split("退款需要多长时间？差旅补贴怎么申请？", 4) == [
        "退款需要多长时间？",
        "差旅补贴怎么申请？",
    ]
    assert sentences.split("退款？差旅补贴怎么申请？", 4) == []  # 退款 alone is too short


def _resp(*pairs: tuple[str, float]) -> dict[str, Any]:
    return {"hits": {"hits": [{"_id": i, "_score": s} for i, s in pairs]}}


def test_best_of_ranks_each_row_at_its_best_score_and_cuts_at_size() -> None:
    whole = _resp(("a", 0.9), ("b", 0.8), ("c", 0.7))
    first = _resp(("c", 0.95), ("d", 0.6))
    second = _resp(("b", 0.5), ("e", 0.85))
    got = sentences.best_of([whole, first, second], 4)["hits"]["hits"]
    assert [(h["_id"], h["_score"]) for h in got] == [
        ("c", 0.95),
        ("a", 0.9),
        ("e", 0.85),
        ("b", 0.8),
    ]


def _query(sentence_vectors: tuple[list[float], ...]) -> Query:
    return Query(
        text="q",
        terms="q",
        vector=[0.1, 0.2],
        acl=ACL,
        filters=[],
        depth=5,
        window=50,
        settings=Settings(),
        sentence_vectors=sentence_vectors,
    )


@pytest.mark.parametrize("flavor", ["elasticsearch", "opensearch"])
def test_client_fusion_asks_each_sentence_under_the_acl_and_fuses_one_knn_list(
    flavor: str,
) -> None:
    from tests.unit.test_hits import Dialect

    strategy = REGISTRY["client-zscore"]
    engine = Dialect(flavor).engine
    plain = strategy.bodies(_query(()), engine).searches  # type: ignore[arg-type]
    asked = strategy.bodies(_query(([0.3, 0.4], [0.5, 0.6])), engine).searches  # type: ignore[arg-type]
    assert plain is not None and asked is not None
    assert len(plain) == 4 and len(asked) == 8
    assert asked[:4] == plain  # BM25 and the whole question's kNN, as before
    check_msearch(asked, ACL)  # every sentence's search carries the caller's ACL
    assert "0.3" in str(asked[5]) and "0.5" in str(asked[7])

    bm25 = _resp(("x", 5.0), ("y", 4.0), ("z", 1.0))
    whole = _resp(("y", 0.6), ("x", 0.5), ("w", 0.4))
    one = _resp(("w", 0.9), ("y", 0.3))
    two = _resp(("z", 0.55))
    q = _query(([0.3, 0.4], [0.5, 0.6]))
    fused = strategy.hits([bm25, whole, one, two], q)
    merged = strategy.hits([bm25, sentences.best_of([whole, one, two], q.window)], q)
    assert [h.chunk_id for h in fused] == [h.chunk_id for h in merged]
    w = next(h for h in fused if h.chunk_id == "w")
    assert w.scores["knn"] == pytest.approx(0.9) and w.ranks["knn"] == 1


def test_the_cache_computes_only_the_missing_keys_in_one_call() -> None:
    from es_rag.cache import LRU

    calls: list[list[str]] = []

    def compute(keys: list[str]) -> list[int]:
        calls.append(keys)
        return [len(k) for k in keys]

    cache: LRU[str, int] = LRU(3)
    assert cache.get_or_compute("a", lambda: 10) == 10
    assert cache.get_many_or_compute(["a", "bb", "ccc"], compute) == [10, 2, 3]
    assert calls == [["bb", "ccc"]]  # one call, for the two it did not hold
    assert cache.get_many_or_compute(["ccc", "bb"], compute) == [3, 2]
    assert len(calls) == 1
    assert cache.get_many_or_compute(["dddd"], compute) == [4]
    assert len(cache) == 3  # the least recently used ("a") went
    assert cache.get_many_or_compute(["a"], compute) == [1] and calls[-1] == ["a"]
    off: LRU[str, int] = LRU(0)
    assert off.get_many_or_compute(["x", "x"], compute) == [1, 1] and len(off) == 0
