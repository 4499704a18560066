"""Hybrid search and access control on a real Elasticsearch, corpus ingested for real."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from es_rag.acl import make_caller
from es_rag.config import Settings
from es_rag.errors import ConfigurationError, StrategyUnavailableError
from es_rag.pipeline import Ingestor
from es_rag.query.feedback import agreement
from es_rag.query.fusion import rrf
from es_rag.query.search import Searcher
from tests.integration import corpus

pytestmark = pytest.mark.integration

STRATEGIES = ("bm25", "knn", "client-rrf", "client-linear", "client-zscore")


@pytest.fixture(scope="module")
def indexed(
    es_url: str,
    minilm_path: str,
    engine,
    embedder,
    analyzer,  # type: ignore[no-untyped-def]
) -> Iterator[Searcher]:
    from tests.conftest import unique_index
    from tests.integration.conftest import drop_alias

    settings = Settings(es_url=es_url, index=unique_index("search"), embedding_model=minilm_path)
    ingestor = Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer)
    for doc in corpus.documents():
        assert ingestor.ingest(doc).status == "indexed"
    ingestor.index.refresh()
    yield Searcher(settings, client=engine, embedder=embedder, analyzer=analyzer)
    drop_alias(engine, settings.index)


def variant(searcher: Searcher, **update: object) -> Searcher:
    """The same index and models under other settings."""
    return Searcher(
        searcher.settings.model_copy(update=update),
        client=searcher.client,
        embedder=searcher.embedder,
        analyzer=searcher.analyzer,
    )


def ids(
    searcher: Searcher, query: str, strategy: str, *, k: int = 10, **caller: list[str]
) -> list[str]:
    who = make_caller(
        corpus.TENANT, users=caller.get("users", ["user:bob"]), groups=caller.get("groups", [])
    )
    return [h.doc_id for h in searcher.search(query, caller=who, k=k, strategy=strategy).hits]


def test_paraphrase_found_by_knn_not_bm25(indexed: Searcher) -> None:
    assert corpus.PARAPHRASE_ANSWER not in ids(indexed, corpus.PARAPHRASE_QUERY, "bm25")
    assert ids(indexed, corpus.PARAPHRASE_QUERY, "knn")[0] == corpus.PARAPHRASE_ANSWER


def test_identifier_found_by_bm25_not_by_knn_top3(indexed: Searcher) -> None:
    assert ids(indexed, corpus.IDENTIFIER_QUERY, "bm25")[0] == corpus.IDENTIFIER_ANSWER
    assert corpus.IDENTIFIER_ANSWER not in ids(indexed, corpus.IDENTIFIER_QUERY, "knn", k=3)


def test_hybrid_has_both_answers_in_top3(indexed: Searcher) -> None:
    assert corpus.PARAPHRASE_ANSWER in ids(indexed, corpus.PARAPHRASE_QUERY, "client-rrf", k=3)
    assert corpus.IDENTIFIER_ANSWER in ids(indexed, corpus.IDENTIFIER_QUERY, "client-rrf", k=3)


def test_client_rrf_equals_fusion_of_the_single_retrievers(indexed: Searcher) -> None:
    """One _msearch fused in Python ranks exactly as fusing the two separate searches."""
    indexed = variant(indexed, feedback_chunks=0)  # fusion alone, no second round
    who = make_caller(corpus.TENANT, users=["user:bob"])
    window = indexed.settings.rank_window_size
    query = "refund card payment error"
    bm25 = indexed.search(query, caller=who, k=window, strategy="bm25").hits
    knn = indexed.search(query, caller=who, k=window, strategy="knn").hits
    expected = rrf(
        {"bm25": [h.chunk_id for h in bm25], "knn": [h.chunk_id for h in knn]},
        rank_constant=indexed.settings.rank_constant,
        rank_window_size=window,
    )
    got = indexed.search(query, caller=who, k=5, strategy="client-rrf")
    assert [h.chunk_id for h in got.hits] == [f.doc_id for f in expected[:5]]
    for hit, fused in zip(got.hits, expected, strict=False):
        assert hit.score == pytest.approx(fused.score)
        assert hit.ranks == fused.ranks


def test_hit_shape_and_timings(indexed: Searcher) -> None:
    who = make_caller(corpus.TENANT, users=["user:bob"])
    response = indexed.search("refund", caller=who, k=3, strategy="client-rrf")
    assert response.strategy == "client-rrf"
    assert {"embed", "search", "fuse", "total"} <= set(response.timings_ms)
    hit = response.hits[0]
    assert hit.doc_id.startswith("refund")
    assert hit.title_path and hit.title_path[0].startswith("Refund")
    assert set(hit.ranks) == {"bm25", "knn"}
    assert hit.scores["rrf"] == pytest.approx(hit.score)
    assert hit.text and len(hit.chunk_id) == 32


def test_auto_is_client_zscore_by_default(indexed: Searcher) -> None:
    who = make_caller(corpus.TENANT, users=["user:bob"])
    response = indexed.search("refund", caller=who, k=3)
    assert response.strategy == "client-zscore" and response.note is None
    assert response.hits[0].doc_id.startswith("refund")
    assert all(h.score >= 0 for h in response.hits)  # as Elasticsearch's scores are


def test_auto_with_rrf_falls_back_to_client_rrf_and_says_why(indexed: Searcher) -> None:
    who = make_caller(corpus.TENANT, users=["user:bob"])
    rrf = variant(indexed, fusion="rrf")
    response = rrf.search("refund", caller=who, k=3, strategy="auto")
    info = indexed.cluster()
    if info.native_rrf:  # a full cluster with an Enterprise/trial license
        assert response.strategy == "native-rrf"
    elif info.hybrid:  # OpenSearch with the neural-search plugin
        assert response.strategy == "opensearch-hybrid"
    else:
        assert response.strategy == "client-rrf"
        expected = {
            "elasticsearch": "native RRF unavailable",
            "opensearch": "opensearch-hybrid unavailable: the opensearch-neural-search plugin",
        }[info.flavor]
        assert response.note and expected in response.note
    if not info.native_rrf:
        with pytest.raises(StrategyUnavailableError, match="native-rrf cannot run"):
            indexed.search("refund", caller=who, strategy="native-rrf")
    if not info.hybrid:
        with pytest.raises(StrategyUnavailableError, match="opensearch-hybrid cannot run"):
            indexed.search("refund", caller=who, strategy="opensearch-hybrid")


def test_unknown_strategy_is_an_error(indexed: Searcher) -> None:
    with pytest.raises(ConfigurationError):
        indexed.search("x", tenant=corpus.TENANT, strategy="magic")


# --- ACL canaries ---------------------------------------------------------------------------
CANARIES = {
    "canary-finance": corpus.CANARY_FINANCE,
    "canary-denied": corpus.CANARY_DENIED,
    "canary-globex": corpus.CANARY_OTHER_TENANT,
}


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("canary", sorted(CANARIES))
def test_canaries_never_reach_outsiders(indexed: Searcher, strategy: str, canary: str) -> None:
    """Exact canary text as the query, k far above the visible count: still invisible."""
    outsiders: list[dict[str, list[str]]] = [
        {"users": ["user:bob"], "groups": []},
        {"users": ["user:mallory"], "groups": ["group:support"]},  # denied beats allowed
    ]
    for caller in outsiders:
        found = ids(indexed, CANARIES[canary], strategy, k=100, **caller)
        leaked = [d for d in found if d.startswith("canary")]
        assert canary not in leaked, f"{canary} leaked to {caller} via {strategy}"
        assert not {"canary-finance", "canary-globex"} & set(leaked)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_canaries_visible_to_their_readers(indexed: Searcher, strategy: str) -> None:
    """The filter is not simply hiding everything: allowed readers do get them."""
    assert "canary-finance" in ids(
        indexed,
        corpus.CANARY_FINANCE,
        strategy,
        k=100,
        users=["user:carol"],
        groups=["group:finance"],
    )
    assert "canary-denied" in ids(
        indexed,
        corpus.CANARY_DENIED,
        strategy,
        k=100,
        users=["user:dave"],
        groups=["group:support"],
    )


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_k_above_visible_count_returns_only_visible(indexed: Searcher, strategy: str) -> None:
    found = ids(indexed, "policy", strategy, k=500)
    assert len(found) <= len(corpus.PUBLIC_DOCS)
    assert set(found) <= set(corpus.PUBLIC_DOCS)
    if strategy != "bm25":  # kNN pre-filtering: k hits are k visible hits
        assert len(found) == len(corpus.PUBLIC_DOCS)


def test_other_tenant_sees_only_its_own(indexed: Searcher) -> None:
    who = make_caller("globex", users=["user:homer"])
    for strategy in STRATEGIES:
        hits = indexed.search(corpus.CANARY_FINANCE, caller=who, k=50, strategy=strategy).hits
        assert {h.doc_id for h in hits} <= {"canary-globex"}


def test_search_requires_tenant(indexed: Searcher) -> None:
    with pytest.raises(ConfigurationError):
        indexed.search("x")


@pytest.mark.parametrize("method", ["linear", "zscore"])
def test_score_fusion_equals_offline_fusion(indexed: Searcher, method: str) -> None:
    """Score fusion fuses the same two searches exactly as the pure function does (z-score
    fusion reading BM25's scores as log(1 + score))."""
    from es_rag.query import fusion

    indexed = variant(indexed, feedback_chunks=0)  # fusion alone, no second round
    who = make_caller(corpus.TENANT, users=["user:bob"])
    window = indexed.settings.rank_window_size
    query = "refund card payment error"
    bm25 = indexed.search(query, caller=who, k=window, strategy="bm25").hits
    knn = indexed.search(query, caller=who, k=window, strategy="knn").hits
    expected = getattr(fusion, method)(
        {
            "bm25": [(h.chunk_id, h.score) for h in bm25],
            "knn": [(h.chunk_id, h.score) for h in knn],
        },
        rank_window_size=window,
        **({"log_scores": {"bm25"}} if method == "zscore" else {}),
    )
    got = indexed.search(query, caller=who, k=5, strategy=f"client-{method}")
    assert got.strategy == f"client-{method}"
    assert [h.chunk_id for h in got.hits] == [f.doc_id for f in expected[:5]]
    assert [h.score for h in got.hits] == pytest.approx([f.score for f in expected[:5]])
    auto = variant(indexed, fusion=method)
    assert auto.search(query, caller=who, k=5).strategy == f"client-{method}"


# --- pseudo-relevance feedback --------------------------------------------------------------
def test_feedback_lets_bm25_reach_words_the_question_did_not_use(indexed: Searcher) -> None:
    """The expansion comes from the first ranking's top chunks, and a row that shares only
    expansion terms with them gets a BM25 rank it has no chance of without feedback."""
    who = make_caller(corpus.TENANT, users=["user:bob"])
    query = "refund"
    on = variant(indexed, feedback_chunks=3).search(
        query, caller=who, k=10, strategy="client-zscore"
    )
    off = variant(indexed, feedback_chunks=0).search(
        query, caller=who, k=10, strategy="client-zscore"
    )
    assert off.expansion == () and "feedback" not in off.timings_ms
    assert on.expansion and "feedback" in on.timings_ms
    assert on.to_dict()["expansion"][0]["term"] == on.expansion[0].term
    # content_terms holds the title path (context header) and the text
    top = {
        t for h in off.hits[:3] for t in indexed.analyzer.terms(" ".join([*h.title_path, h.text]))
    }
    assert {e.term for e in on.expansion} <= top
    # the strongest term's boost is the weight, scaled by how far the retrievers agree
    agreed = agreement([h.ranks for h in off.hits])
    assert agreed is not None and 0 < agreed <= 1
    strongest = max(e.boost for e in on.expansion)
    assert strongest == pytest.approx(indexed.settings.feedback_weight * agreed, abs=1e-4)
    lexical_off = {h.doc_id for h in off.hits if h.ranks.get("bm25")}
    lexical_on = {h.doc_id for h in on.hits if h.ranks.get("bm25")}
    assert lexical_off <= {"refund-errors", "refund-timing"}  # only they say "refund"
    assert lexical_on - lexical_off, "no row was reached through the expansion"
    # the feedback chunks are the first ranking's top 3 however few hits were asked for
    one = variant(indexed, feedback_chunks=3).search(
        query, caller=who, k=1, strategy="client-zscore"
    )
    assert one.expansion == on.expansion and [h.chunk_id for h in one.hits] == [on.hits[0].chunk_id]
    # only BM25 ran again: the first round's kNN list is fused as it was
    knn_off = {h.chunk_id: h.ranks.get("knn") for h in off.hits}
    assert all(knn_off[h.chunk_id] == h.ranks.get("knn") for h in on.hits if h.chunk_id in knn_off)


def test_feedback_never_uses_words_of_rows_the_caller_cannot_read(indexed: Searcher) -> None:
    """The finance canary's own words shape a finance reader's expansion, never an
    outsider's: the outsider's feedback only reads rows that outsider just retrieved."""
    fb = variant(indexed, feedback_chunks=3, feedback_terms=50)  # every term of the top 3
    public = {
        t
        for title, text in corpus.PUBLIC_DOCS.values()
        for t in indexed.analyzer.terms(f"{title} {text}")
    }
    secret = set(indexed.analyzer.terms(corpus.CANARY_FINANCE)) - public
    # the parking row shares words with it, so the outsider's feedback has a chunk to read
    query = corpus.CANARY_FINANCE + " parking garage"
    reader = make_caller(corpus.TENANT, users=["user:carol"], groups=["group:finance"])
    outsider = make_caller(corpus.TENANT, users=["user:bob"])
    for strategy in ("client-rrf", "client-zscore"):
        mine = fb.search(query, caller=reader, k=5, strategy=strategy)
        theirs = fb.search(query, caller=outsider, k=5, strategy=strategy)
        assert secret & {e.term for e in mine.expansion}  # the check can fail
        assert theirs.expansion, "the outsider's feedback did not run"
        assert not secret & {e.term for e in theirs.expansion}
        assert "canary-finance" not in {h.doc_id for h in theirs.hits}


def test_a_question_of_several_sentences_ranks_chunks_at_their_best_sentence(
    indexed: Searcher,
) -> None:
    """Each sentence is a kNN search of its own in the same _msearch, under the caller's
    ACL; a chunk's kNN score is its best over the question and its sentences, and z-score
    fusion of that list with BM25 is what the searcher returns."""
    from es_rag.query.fusion import zscore

    indexed = variant(indexed, feedback_chunks=0)  # fusion alone, no second round
    who = make_caller(corpus.TENANT, users=["user:bob"])
    window = indexed.settings.rank_window_size
    parts = ["When can I get a midday meal?", "Who signs off the Initech acquisition?"]
    question = " ".join(parts)
    best: dict[str, float] = {}
    for text in (question, *parts):
        for h in indexed.search(text, caller=who, k=window, strategy="knn").hits:
            best[h.chunk_id] = max(best.get(h.chunk_id, 0.0), float(h.scores["knn"] or 0.0))
    knn = sorted(best.items(), key=lambda kv: -kv[1])[:window]
    bm25 = indexed.search(question, caller=who, k=window, strategy="bm25").hits
    expected = zscore(
        {"bm25": [(h.chunk_id, float(h.scores["bm25"] or 0.0)) for h in bm25], "knn": knn},
        rank_window_size=window,
        log_scores={"bm25"},
    )
    response = indexed.search(question, caller=who, k=5, strategy="client-zscore")
    assert response.sentences == tuple(parts)
    assert response.to_dict()["sentences"] == parts
    got = response.hits
    assert [h.chunk_id for h in got] == [f.doc_id for f in expected[:5]]
    assert got[0].doc_id == corpus.PARAPHRASE_ANSWER  # the first sentence's answer leads
    for hit in got:
        # (the sentences are embedded in one batch, the single searches one at a time)
        assert hit.scores["knn"] is None or hit.scores["knn"] == pytest.approx(
            best[hit.chunk_id], abs=1e-4
        )
    # bob may not read the board minutes the second sentence points at
    assert "canary-finance" not in {h.doc_id for h in got}
    one = indexed.search(parts[0], caller=who, k=5, strategy="client-zscore")
    assert one.sentences == () and "sentences" not in one.to_dict()  # one sentence: as before
    finance = make_caller(corpus.TENANT, users=["user:ann"], groups=["group:finance"])
    theirs = indexed.search(question, caller=finance, k=5, strategy="client-zscore").hits
    assert "canary-finance" in {h.doc_id for h in theirs}  # the ACL, not the ranking, hid it
