"""The query stage on a real Elasticsearch: filters, highlights, explanations, rerank,
context construction, weak evidence, selective filters, the query cache and the ACL guard."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pytest

from es_rag.acl import make_acl, make_caller
from es_rag.config import Settings
from es_rag.engine.client import Engine
from es_rag.errors import AclGuardError, FilterError
from es_rag.pipeline import Ingestor
from es_rag.query.context import ContextBuilder
from es_rag.query.rerank import Reranker
from es_rag.query.search import Searcher
from es_rag.types import Document
from tests.conftest import unique_index
from tests.integration.conftest import drop_alias

pytestmark = pytest.mark.integration

STRATEGIES = ("bm25", "knn", "client-rrf")
CALLER = make_caller("acme", users=["user:ann"], groups=["group:staff"])
OUTSIDER = make_caller("acme", users=["user:zed"])
STAFF = make_acl("acme", allow=["group:staff"])

HANDBOOK = """# Handbook

## Leave

Employees receive twenty-eight days of paid annual leave. Unused leave can be carried over
into the first quarter of the next year. Requests go through the HR portal.

Sick leave needs a doctor's note after three days. Parental leave is sixteen weeks.

## Expenses

Expense claims are paid with the monthly salary. Receipts must be uploaded within thirty days.
Taxis are reimbursed only after ten in the evening.
"""

SECURITY = """# Security rules

## Passwords

Passwords must have at least sixteen characters and are rotated every year.
Password managers approved by IT may be used.

## Laptops

Laptops are encrypted with full-disk encryption. A lost laptop must be reported within one hour.
"""

SECRET = """# Board notes

## Merger

The board approved the merger with Initech on the fourteenth of March. Annual leave for the
integration team is frozen until June.
"""


@pytest.fixture(scope="module")
def stage(
    es_url: str,
    minilm_path: str,
    engine: Engine,
    embedder,
    analyzer,  # type: ignore[no-untyped-def]
) -> Iterator[Settings]:
    settings = Settings(
        es_url=es_url,
        index=unique_index("stage"),
        embedding_model=minilm_path,
        chunk_size=25,
        chunk_overlap=5,
        parent_chunk_size=400,
    )
    ingestor = Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer)
    docs = [
        Document(
            doc_id="handbook",
            title="Handbook",
            text=HANDBOOK,
            acl=STAFF,
            metadata={"product": "hr", "version": "2"},
        ),
        Document(
            doc_id="security",
            title="Security rules",
            text=SECURITY,
            acl=STAFF,
            metadata={"product": "it", "version": "5"},
        ),
        Document(
            doc_id="board",
            title="Board notes",
            text=SECRET,
            acl=make_acl("acme", allow=["group:board"]),
            metadata={"product": "hr"},
        ),
    ]
    assert all(r.status == "indexed" for r in ingestor.ingest_many(docs, refresh=True))
    yield settings
    drop_alias(engine, settings.index)


def searcher(settings: Settings, engine, embedder, analyzer, **kw) -> Searcher:  # type: ignore[no-untyped-def]
    return Searcher(settings, client=engine, embedder=embedder, analyzer=analyzer, **kw)


@pytest.fixture
def s(stage: Settings, engine, embedder, analyzer) -> Searcher:  # type: ignore[no-untyped-def]
    return searcher(stage, engine, embedder, analyzer)


# --- filters --------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_metadata_filter_applies_inside_every_retriever(s: Searcher, strategy: str) -> None:
    hits = s.search(
        "leave passwords laptops expenses",
        caller=CALLER,
        k=50,
        strategy=strategy,
        filters=["metadata.product=it"],
    ).hits
    assert hits and {h.doc_id for h in hits} == {"security"}
    both = s.search(
        "leave passwords",
        caller=CALLER,
        k=50,
        strategy=strategy,
        filters=["metadata.product=hr|it"],
    ).hits
    assert {h.doc_id for h in both} == {"handbook", "security"}  # never the board's notes


def test_bad_filters_are_errors_not_empty_results(s: Searcher) -> None:
    for bad, message in [
        ("content=leave", "text"),
        ("no_such_field=1", "unknown|not in the mapping|no field"),
        ("tenant_id=other", "access control"),
        ("ordinal>=abc", "number"),
    ]:
        with pytest.raises(FilterError, match=message):
            s.search("leave", caller=CALLER, filters=[bad])


# --- highlights and explanations -------------------------------------------------------------
def test_highlights_come_from_the_filtered_search(s: Searcher) -> None:
    hits = s.search("annual leave", caller=CALLER, k=5, strategy="client-rrf").hits
    assert any("<em>" in frag for h in hits for frag in h.highlights)
    assert all(h.doc_id != "board" for h in hits)
    assert not s.search("Initech merger", caller=OUTSIDER, k=5, strategy="bm25").hits


@pytest.mark.parametrize(("strategy", "method"), [("client-rrf", "rrf"), ("auto", "zscore")])
def test_explanation_adds_up(s: Searcher, strategy: str, method: str) -> None:
    hits = s.search("annual leave carried over", caller=CALLER, k=5, strategy=strategy).hits
    for h in hits:
        # a retriever that missed the chunk adds nothing (RRF) or its last place, 0 (z-score)
        parts = [h.explain[r][method] or 0.0 for r in ("bm25", "knn")]
        assert sum(parts) == pytest.approx(h.explain[method]) == pytest.approx(h.score)
        assert all(p >= 0 for p in parts)
        for r in ("bm25", "knn"):
            assert h.explain[r]["rank"] == h.ranks[r]


# --- rerank ---------------------------------------------------------------------------------
class Scripted(Reranker):
    """A reranker whose scores the test decides (the subject is the search stage)."""

    def __init__(
        self, scores: dict[str, float] | None = None, fail: bool = False, delay: float = 0.0
    ) -> None:
        super().__init__(model="scripted")
        self.scores, self.fail, self.delay, self.calls = scores or {}, fail, delay, 0

    def score_batch(self, pairs: list[tuple[str, str]]) -> list[float]:
        self.calls += 1
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("model exploded")
        return [float(len(p)) if not self.scores else self.scores.get(p, 0.0) for _, p in pairs]


def test_rerank_with_a_real_model_reorders_by_its_scores(
    stage: Settings,
    engine,
    embedder,
    analyzer,
    tiny_reranker_path: str,  # type: ignore[no-untyped-def]
) -> None:
    settings = stage.model_copy(
        update={
            "rerank_model": tiny_reranker_path,
            "rerank_backend": "cross-encoder",
            "rerank_window": 6,
        }
    )
    rs = searcher(settings, engine, embedder, analyzer)
    base = rs.search("annual leave", caller=CALLER, k=6, strategy="client-rrf", rerank=False)
    out = rs.search("annual leave", caller=CALLER, k=6, strategy="client-rrf", rerank=True)
    assert out.reranked is True and "rerank" in out.timings_ms
    assert {h.chunk_id for h in out.hits} == {h.chunk_id for h in base.hits}
    direct = rs.reranker.score(  # type: ignore[union-attr]
        "annual leave", [f"{' > '.join(h.title_path)}\n{h.text}" for h in base.hits]
    )
    expected = [
        h.chunk_id for _, h in sorted(zip(direct, base.hits, strict=True), key=lambda p: -p[0])
    ]
    assert [h.chunk_id for h in out.hits] == expected
    assert [h.scores["rerank"] for h in out.hits] == pytest.approx(sorted(direct, reverse=True))


def test_rerank_window_and_k(stage: Settings, engine, embedder, analyzer) -> None:  # type: ignore[no-untyped-def]
    settings = stage.model_copy(update={"rerank_window": 3, "rerank_k": 2})
    scripted = Scripted()
    rs = searcher(settings, engine, embedder, analyzer, reranker=scripted)
    base = rs.search("leave expenses", caller=CALLER, k=8, strategy="client-rrf", rerank=False)
    out = rs.search("leave expenses", caller=CALLER, k=8, strategy="client-rrf")
    assert out.reranked is True and len(out.hits) == 2
    top3 = sorted(base.hits[:3], key=lambda h: -len(f"{' > '.join(h.title_path)}\n{h.text}"))
    assert [h.chunk_id for h in out.hits] == [h.chunk_id for h in top3[:2]]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_failing_or_slow_reranker_keeps_fused_order(
    stage: Settings,
    engine,
    embedder,
    analyzer,
    strategy: str,  # type: ignore[no-untyped-def]
) -> None:
    base = searcher(stage, engine, embedder, analyzer).search(
        "leave", caller=CALLER, k=4, strategy=strategy, rerank=False
    )
    failing = searcher(stage, engine, embedder, analyzer, reranker=Scripted(fail=True))
    out = failing.search("leave", caller=CALLER, k=4, strategy=strategy)
    assert out.reranked is False and "model exploded" in (out.rerank_note or "")
    assert [h.chunk_id for h in out.hits] == [h.chunk_id for h in base.hits]
    slow_settings = stage.model_copy(update={"rerank_timeout": 0.2})
    slow = searcher(slow_settings, engine, embedder, analyzer, reranker=Scripted(delay=2.0))
    out = slow.search("leave", caller=CALLER, k=4, strategy=strategy)
    assert out.reranked is False and "budget" in (out.rerank_note or "")
    assert [h.chunk_id for h in out.hits] == [h.chunk_id for h in base.hits]


def test_rerank_without_model_is_a_clear_error(s: Searcher) -> None:
    from es_rag.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="RERANK_MODEL"):
        s.search("leave", caller=CALLER, rerank=True)


# --- context --------------------------------------------------------------------------------
def test_parent_expansion_dedupes_and_cites(s: Searcher) -> None:
    result = ContextBuilder(s).build(
        "how many days of annual leave", caller=CALLER, expand="parent", strategy="client-rrf"
    )
    assert result.sufficient
    top = result.evidence[0]
    assert top.doc_id == "handbook" and top.title_path == ["Handbook", "Leave"]
    assert "twenty-eight days" in top.text and "Parental leave" in top.text  # the whole section
    texts = [e.text for e in result.evidence]
    assert len(texts) == len(set(texts))  # siblings collapsed into their parent
    assert [e.n for e in result.evidence] == list(range(1, len(result.evidence) + 1))
    assert "[1] Handbook > Leave (handbook)" in result.prompt
    assert "only the numbered sources" in result.prompt
    assert all(e.doc_id != "board" for e in result.evidence)


def test_neighbour_expansion_merges_overlap(s: Searcher) -> None:
    result = ContextBuilder(s).build(
        "doctor's note sick leave",
        caller=CALLER,
        expand="neighbours",
        neighbours=1,
        strategy="bm25",
    )
    top = result.evidence[0]
    assert "doctor's note" in top.text and len(top.chunk_ids) >= 2
    assert top.text.count("Sick leave needs a doctor's note") == 1


def test_cap_per_document_and_budget(s: Searcher) -> None:
    b = ContextBuilder(s)
    capped = b.build(
        "leave passwords laptops expenses",
        caller=CALLER,
        expand="none",
        max_per_doc=1,
        strategy="client-rrf",
    )
    docs = [e.doc_id for e in capped.evidence]
    assert len(docs) == len(set(docs)) == 2
    small = b.build(
        "leave passwords laptops expenses",
        caller=CALLER,
        expand="none",
        budget_tokens=60,
        strategy="client-rrf",
    )
    # the budget is counted with the embedding model's own tokenizer (MiniLM's here)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(s.settings.embedding_model)
    used = sum(len(tok.encode(e.text, add_special_tokens=False)) for e in small.evidence)
    assert small.evidence and used <= 60
    full = b.build(
        "leave passwords laptops expenses", caller=CALLER, expand="none", strategy="client-rrf"
    )
    full_used = sum(len(tok.encode(e.text, add_special_tokens=False)) for e in full.evidence)
    assert full_used > 60 and len(small.evidence) < len(full.evidence)  # the budget bit
    assert small.evidence[0].score == max(e.score for e in small.evidence)


def test_weak_evidence_is_reported(stage: Settings, engine, embedder, analyzer) -> None:  # type: ignore[no-untyped-def]
    strict = searcher(stage.model_copy(update={"min_knn_score": 0.99}), engine, embedder, analyzer)
    result = ContextBuilder(strict).build(
        "how many days of annual leave", caller=CALLER, strategy="client-rrf"
    )
    assert result.sufficient is False and result.evidence == []
    assert "below 0.99" in result.reason and result.signals["best_knn_score"]
    assert "(no sources)" in result.prompt
    lax = searcher(stage.model_copy(update={"min_knn_score": 0.5}), engine, embedder, analyzer)
    assert ContextBuilder(lax).build("annual leave", caller=CALLER).sufficient


def test_context_fetches_are_acl_filtered(s: Searcher, engine: Engine) -> None:
    board_ids = [
        h["_id"]
        for h in engine.search(
            s.settings.index, {"query": {"term": {"doc_id": "board"}}, "size": 50}
        )["hits"]["hits"]
    ]
    assert board_ids
    assert s.fetch_rows(OUTSIDER, ids=board_ids) == []
    assert s.fetch_rows(CALLER, ids=board_ids) == []
    board = make_caller("acme", groups=["group:board"])
    assert len(s.fetch_rows(board, ids=board_ids)) == len(board_ids)
    assert s.fetch_rows(CALLER, neighbours=[("board", "x", 0, 10)]) == []


# --- guard and cache --------------------------------------------------------------------------
def test_guard_refuses_a_broken_body_before_sending(
    s: Searcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    from es_rag.query import build

    real_es, real_os = build.knn_clause, build.opensearch_knn_query

    def broken_es(*args, **kwargs):  # type: ignore[no-untyped-def]
        clause = real_es(*args, **kwargs)
        clause.pop("filter")
        return clause

    def broken_os(*args, **kwargs):  # type: ignore[no-untyped-def]
        query = real_os(*args, **kwargs)
        query["knn"]["embedding"].pop("filter")
        return query

    monkeypatch.setattr(build, "knn_clause", broken_es)
    monkeypatch.setattr(build, "opensearch_knn_query", broken_os)
    sent: list[str] = []
    monkeypatch.setattr(s.client, "search", lambda **kw: sent.append("search"))
    monkeypatch.setattr(s.client, "msearch", lambda **kw: sent.append("msearch"))
    for strategy in ("knn", "client-rrf"):
        with pytest.raises(AclGuardError):
            s.search("leave", caller=CALLER, strategy=strategy)
    assert sent == []


def test_query_vectors_are_cached(stage: Settings, engine, analyzer, embedder) -> None:  # type: ignore[no-untyped-def]
    calls: list[Sequence[str]] = []
    real = embedder.embed_query

    class Counting:
        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(embedder, name)

        def embed_query(self, text: str) -> list[float]:
            calls.append(text)
            return real(text)

    cs = Searcher(stage, client=engine, embedder=Counting(), analyzer=analyzer)  # type: ignore[arg-type]
    first = cs.search("parental leave weeks", caller=CALLER, strategy="knn")
    second = cs.search("parental leave weeks", caller=CALLER, strategy="knn")
    assert calls == ["parental leave weeks"]
    assert [h.chunk_id for h in first.hits] == [h.chunk_id for h in second.hits]
