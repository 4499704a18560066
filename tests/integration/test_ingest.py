"""Ingest lifecycle on a real Elasticsearch: idempotence, replacement, rejection, failures."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from es_rag import jobs
from es_rag.acl import make_acl
from es_rag.config import Settings
from es_rag.embedding import Embedder
from es_rag.engine.client import Engine
from es_rag.errors import BulkIndexingError, IndexContractError
from es_rag.parsing import ParsedFile, Parser
from es_rag.pipeline import Ingestor
from es_rag.types import AccessControl, Document, IngestResult

pytestmark = pytest.mark.integration

ACL = make_acl("acme", allow=["group:support"])
ACL_OPS = make_acl("acme", allow=["group:ops"])


def long_text(tag: str, sentences: int) -> str:
    return "\n\n".join(
        f"## Part {i}\n\nParagraph {i} of version {tag} talks about topic {i} in some detail. "
        f"It has a second sentence for {tag}."
        for i in range(sentences)
    )


def rows(engine: Engine, alias: str, doc_id: str) -> list[dict]:
    engine.refresh(alias)
    resp = engine.search(
        alias,
        {
            "query": {"term": {"doc_id": doc_id}},
            "size": 1000,
            "_source": {"excludes": ["embedding"]},
        },
    )
    return [h["_source"] | {"_id": h["_id"]} for h in resp["hits"]["hits"]]


def rejected_metadata() -> dict:
    """A metadata value over Lucene's 32766-byte term limit: every chunk is rejected.

    Both engines index metadata leaves as keywords (``flattened`` / ``flat_object``) and
    refuse an immense term per document, so the bulk item fails on the server itself.
    """
    return {"blob": "x" * 40000}


class CountingEmbedder(Embedder):
    """Wraps the real MiniLM embedder and counts calls (the subject is the pipeline)."""

    backend = "st"

    def __init__(self, inner: Embedder) -> None:
        super().__init__(model=inner.model, batch_size=inner.batch_size)
        self.inner = inner
        self.calls = 0

    def embed_batch(self, texts: list[str], *, kind) -> np.ndarray:  # type: ignore[no-untyped-def]
        self.calls += 1
        return self.inner.embed_batch(texts, kind=kind)

    @property
    def embedding_version(self) -> str:
        return self.inner.embedding_version


def test_reingest_unchanged_does_no_work(
    make_settings: Callable[..., Settings],
    engine: Engine,
    embedder,
    analyzer,  # type: ignore[no-untyped-def]
) -> None:
    settings = make_settings()
    counting = CountingEmbedder(embedder)
    ingestor = Ingestor(settings, client=engine, embedder=counting, analyzer=analyzer)
    doc = Document(doc_id="guide", title="Guide", text=long_text("a", 6), acl=ACL)
    first = ingestor.ingest(doc, refresh=True)
    assert first.status == "indexed" and first.chunks > 1
    before = {r["_id"]: r["indexed_at"] for r in rows(engine, settings.index, "guide")}
    calls = counting.calls
    second = ingestor.ingest(doc, refresh=True)
    assert second.status == "skipped"
    assert counting.calls == calls  # no embedding
    after = {r["_id"]: r["indexed_at"] for r in rows(engine, settings.index, "guide")}
    assert after == before  # nothing rewritten


def test_changed_document_replaces_without_gap(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    engine: Engine,
) -> None:
    settings = make_settings(chunk_size=40, chunk_overlap=5)
    ingestor = ingestor_for(settings)
    v1 = Document(doc_id="manual", title="Manual", text=long_text("one", 40), acl=ACL)
    v2 = Document(doc_id="manual", title="Manual", text=long_text("two", 25), acl=ACL)
    first = ingestor.ingest(v1, refresh=True)
    n1 = first.chunks + first.parents
    assert len(rows(engine, settings.index, "manual")) == n1

    counts: list[int] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            engine.refresh(settings.index)
            counts.append(engine.count(settings.index, {"term": {"doc_id": "manual"}}))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        result = ingestor.ingest(v2, refresh=True)
    finally:
        stop.set()
        thread.join()
    assert result.status == "indexed"
    assert result.deleted == n1  # every old chunk id was replaced (new version, new ids)
    assert len(counts) > 3 and min(counts) > 0, counts
    final = rows(engine, settings.index, "manual")
    assert len(final) == result.chunks + result.parents
    children = [r for r in final if r["chunk_type"] == "child"]
    parent_ids = {r["_id"] for r in final if r["chunk_type"] == "parent"}
    assert len(children) == result.chunks and len(parent_ids) == result.parents
    assert {r["parent_id"] for r in children} == parent_ids
    with_vectors = engine.count(
        settings.index,
        {"bool": {"filter": [{"term": {"doc_id": "manual"}}, {"exists": {"field": "embedding"}}]}},
    )
    assert with_vectors == result.chunks  # parents carry no vector
    assert all("version two" in r["content"] or "for two" in r["content"] for r in final)
    assert not any("version one" in r["content"] for r in final)
    assert {r["doc_version"] for r in final} == {final[0]["doc_version"]}


def unpublished(engine: Engine, ingestor: Ingestor) -> None:
    """No refresh of the index unless asked: what is written stays unsearchable until a
    reader publishes it (as within a second of a write on any cluster, and for as long
    as a bulk load with ``refresh_interval: -1`` runs)."""
    name, _ = ingestor.init_index()
    engine.client.indices.put_settings(index=name, body={"index.refresh_interval": "-1"})


def test_a_version_written_a_moment_ago_is_replaced_whole(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    engine: Engine,
) -> None:
    """The second version of a document, ingested before the first was published, finds
    and deletes every row of the first: no stale text and no old ACL stays behind."""
    settings = make_settings(chunk_size=40, chunk_overlap=5)
    ingestor = ingestor_for(settings)
    unpublished(engine, ingestor)
    first = ingestor.ingest(Document(doc_id="memo", text=long_text("one", 12), acl=ACL))
    second = ingestor.ingest(Document(doc_id="memo", text=long_text("two", 5), acl=ACL_OPS))
    assert first.status == second.status == "indexed"
    assert second.deleted == first.chunks + first.parents
    final = rows(engine, settings.index, "memo")
    assert len(final) == second.chunks + second.parents
    assert not any("version one" in r["content"] for r in final)
    assert {tuple(r["allowed_principals"]) for r in final} == {("group:ops",)}


def test_delete_and_acl_change_right_after_an_ingest_reach_every_row(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    engine: Engine,
) -> None:
    """A revocation issued right after an ingest (no refresh between) is not a no-op."""
    settings = make_settings(chunk_size=40, chunk_overlap=5)
    ingestor = ingestor_for(settings)
    unpublished(engine, ingestor)
    kept = ingestor.ingest(Document(doc_id="kept", text=long_text("k", 6), acl=ACL))
    gone = ingestor.ingest(Document(doc_id="gone", text=long_text("g", 6), acl=ACL))
    assert ingestor.update_acl("kept", ACL_OPS) == kept.chunks + kept.parents
    assert ingestor.delete_document("gone", tenant="acme") == gone.chunks + gone.parents
    assert rows(engine, settings.index, "gone") == []
    assert {tuple(r["allowed_principals"]) for r in rows(engine, settings.index, "kept")} == {
        ("group:ops",)
    }


def test_acl_change_rewrites_access_fields(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    engine: Engine,
) -> None:
    settings = make_settings()
    ingestor = ingestor_for(settings)
    text = "The rollout plan is documented here."
    ingestor.ingest(Document(doc_id="plan", text=text, acl=ACL), refresh=True)
    new_acl = make_acl("acme", allow=["group:ops"])
    assert (
        ingestor.ingest(Document(doc_id="plan", text=text, acl=new_acl), refresh=True).status
        == "indexed"
    )
    assert {tuple(r["allowed_principals"]) for r in rows(engine, settings.index, "plan")} == {
        ("group:ops",)
    }


def test_a_document_without_acl_never_reaches_the_index(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    engine: Engine,
    tmp_path: Path,
) -> None:
    """A queued file whose payload names nobody (neither --allow nor --public) is refused
    by the worker's ingest before anything is written, and recorded as such."""
    from es_rag import jobs

    settings = make_settings()
    ingestor = ingestor_for(settings)
    ingestor.init_index()
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nSecret.\n")
    payload = jobs.IngestPayload(path=str(note), tenant="acme")  # restricted, nobody allowed
    result = jobs.run_ingest(ingestor, payload)
    assert (result.status, result.error_type) == ("failed", "AccessControlError")
    assert "no ACL" in (result.error or "")
    row = ingestor.status.get("acme", str(note))
    assert row and row["status"] == "failed" and row["attempts"] == 1
    engine.refresh(settings.index)
    assert engine.count(settings.index, {"match_all": {}}) == 0
    engine.delete_index(ingestor.status.name)


def test_item_failure_is_reported_and_rolled_back(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    engine: Engine,
) -> None:
    """A per-chunk rejection (metadata deeper than the flattened field allows) fails the
    document with the chunk named; the previous version stays whole, nothing new remains."""
    settings = make_settings()
    ingestor = ingestor_for(settings)
    good = Document(doc_id="doc", text=long_text("good", 3), acl=ACL)
    ok = ingestor.ingest(good, refresh=True)
    n_good = ok.chunks + ok.parents
    deep = rejected_metadata()
    bad = Document(doc_id="doc", text=long_text("bad", 3), acl=ACL, metadata=deep)
    with pytest.raises(BulkIndexingError) as info:
        ingestor.ingest(bad, refresh=True)
    assert info.value.failures and info.value.failures[0]["chunk_id"]
    assert "doc" in str(info.value)
    remaining = rows(engine, settings.index, "doc")
    assert len(remaining) == n_good
    assert all("good" in r["content"] for r in remaining)


def test_index_with_other_embedding_is_refused(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    engine: Engine,
    embedder,
    analyzer,  # type: ignore[no-untyped-def]
) -> None:
    settings = make_settings()
    ingestor_for(settings).init_index()
    _, created = ingestor_for(settings).init_index()  # idempotent
    assert created is False

    class Other(CountingEmbedder):
        @property
        def embedding_version(self) -> str:
            return "st:another-model@000000000000:384"

    other = Ingestor(settings, client=engine, embedder=Other(embedder), analyzer=analyzer)
    with pytest.raises(IndexContractError, match="embedding_version"):
        other.init_index()


def test_delete_document(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    engine: Engine,
) -> None:
    settings = make_settings()
    ingestor = ingestor_for(settings)
    done = ingestor.ingest(Document(doc_id="gone", text=long_text("x", 4), acl=ACL), refresh=True)
    n = done.chunks + done.parents
    assert ingestor.delete_document("gone", tenant="acme") == n
    assert rows(engine, settings.index, "gone") == []


def test_batch_isolates_a_failing_document(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    engine: Engine,
) -> None:
    """In one batch (shared embedding and bulk), only the bad document fails."""
    settings = make_settings()
    ingestor = ingestor_for(settings)
    deep = rejected_metadata()
    docs = [
        Document(doc_id="ok-1", text=long_text("first", 3), acl=ACL),
        Document(doc_id="bad", text=long_text("bad", 3), acl=ACL, metadata=deep),
        Document(doc_id="empty", text="   ", acl=ACL),
        Document(doc_id="ok-2", text=long_text("second", 2), acl=ACL),
    ]
    results = {r.doc_id: r for r in ingestor.ingest_many(docs, refresh=True)}
    assert results["ok-1"].status == "indexed" and results["ok-2"].status == "indexed"
    assert results["bad"].status == "failed" and results["bad"].error_type == "BulkIndexingError"
    assert results["empty"].status == "failed"
    assert results["empty"].error_type == "EmptyDocumentError"
    assert rows(engine, settings.index, "bad") == []
    ok1 = results["ok-1"]
    assert len(rows(engine, settings.index, "ok-1")) == ok1.chunks + ok1.parents


def test_search_refuses_other_analyzer_or_model(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    engine: Engine,
    embedder,  # type: ignore[no-untyped-def]
) -> None:
    from es_rag.analysis import TextAnalyzer
    from es_rag.errors import AnalyzerMismatchError
    from es_rag.query.search import Searcher

    settings = make_settings()
    ingestor_for(settings).ingest(Document(doc_id="d", text="hello world", acl=ACL), refresh=True)
    french = Searcher(settings, client=engine, embedder=embedder, analyzer=TextAnalyzer("french"))
    with pytest.raises(AnalyzerMismatchError):
        french.search("bonjour", tenant="acme", strategy="bm25")

    class Other(CountingEmbedder):
        @property
        def embedding_version(self) -> str:
            return "st:another-model@000000000000:384"

    other = Searcher(settings, client=engine, embedder=Other(embedder))
    with pytest.raises(IndexContractError, match="vectors"):
        other.search("hello", tenant="acme", strategy="knn")
    # BM25 needs no vectors: it still works with another embedding model configured.
    assert other.search("hello", tenant="acme", principals=["group:support"], strategy="bm25").hits


def test_an_index_analysed_before_folding_is_still_written_and_queried_as_it_was_made(
    make_settings: Callable[..., Settings],
    engine: Engine,
    embedder,  # type: ignore[no-untyped-def]
) -> None:
    """Indices made before Traditional-to-Simplified folding keep their analysis: writers
    and searchers of the new code adopt it from the index's contract instead of refusing
    it or writing terms its queries would not match."""
    from es_rag.analysis import TextAnalyzer
    from es_rag.query.search import Searcher

    settings = make_settings()
    plain = TextAnalyzer(settings.analyzer_language, han_fold=False)
    old = Ingestor(settings, client=engine, embedder=embedder, analyzer=plain)
    old.ingest(Document(doc_id="old", text="臺灣大學的圖書館藏書豐富", acl=ACL), refresh=True)

    today = Ingestor(settings, client=engine, embedder=embedder)
    assert today.analyzer.han_fold
    new = Document(doc_id="new", text="國立圖書館的開放時間", acl=ACL)
    result = today.ingest(new, refresh=True)
    assert result.status == "indexed"
    assert today.analyzer.version == plain.version
    terms = {
        hit["_source"]["doc_id"]: hit["_source"]["content_terms"]
        for hit in engine.search(
            settings.index,
            {"query": {"term": {"chunk_type": "child"}}, "_source": ["doc_id", "content_terms"]},
        )["hits"]["hits"]
    }
    # The title (the doc id here) leads the terms as the context header.
    assert terms["new"] == plain.analyze("new\n國立圖書館的開放時間")
    assert "图书馆" not in terms["new"].split()  # what folding would have written

    searcher = Searcher(settings, client=engine, embedder=embedder)
    who = ["group:support"]
    hits = searcher.search("圖書館藏書", tenant="acme", principals=who, strategy="bm25")
    assert [h.doc_id for h in hits.hits][:1] == ["old"]
    assert searcher.generation().analyzer.version == plain.version


def test_dimension_mismatch_indexes_nothing(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    engine: Engine,
    embedder,  # type: ignore[no-untyped-def]
    analyzer,  # type: ignore[no-untyped-def]
) -> None:
    """A model server that silently switched models (same name, other width) is caught."""
    from es_rag.errors import DimensionMismatchError, EmbeddingError

    settings = make_settings()
    ingestor_for(settings).init_index()

    class Truncating(CountingEmbedder):
        def embed_batch(self, texts: list[str], *, kind) -> np.ndarray:  # type: ignore[no-untyped-def]
            return super().embed_batch(texts, kind=kind)[:, :100]

    truncating = Truncating(embedder)
    truncating._dims = 384  # what it claimed when the index was created
    ingestor = Ingestor(settings, client=engine, embedder=truncating, analyzer=analyzer)
    with pytest.raises((DimensionMismatchError, EmbeddingError)) as info:
        ingestor.ingest(Document(doc_id="d", text="some text to embed", acl=ACL), refresh=True)
    assert "100" in str(info.value) and "384" in str(info.value), info.value
    assert rows(engine, settings.index, "d") == []


class CountingParser(Parser):
    """The real sandboxed parser, counting the files it is asked to parse."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.calls = 0

    def parse(self, path: str | Path) -> ParsedFile:
        self.calls += 1
        return super().parse(path)


def test_reingest_of_unchanged_files_parses_nothing(
    make_settings: Callable[..., Settings],
    engine: Engine,
    embedder,  # type: ignore[no-untyped-def]
    analyzer,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    settings = make_settings()
    ingestor = Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer)
    parser = ingestor._parser = CountingParser(settings)
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(3):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nValves of kind {i} need grease.\n")

    def ingest(acl: AccessControl = ACL, by: Ingestor = ingestor) -> dict[str, IngestResult]:
        return {Path(r.doc_id).name: r for r in by.ingest_paths([folder], acl=acl)}

    first = ingest()
    assert {r.status for r in first.values()} == {"indexed"} and parser.calls == 3
    second = ingest()
    assert {r.reason for r in second.values()} == {"unchanged"} and parser.calls == 3
    assert [(r.chunks, r.parents) for r in second.values()] == [
        (r.chunks, r.parents) for r in first.values()
    ]

    # The same bytes with a new time (a checkout, a touch): hashed, not parsed.
    stat = (folder / "n0.md").stat()
    os.utime(folder / "n0.md", ns=(stat.st_atime_ns, stat.st_mtime_ns + 5 * 10**9))
    assert {r.reason for r in ingest().values()} == {"unchanged"} and parser.calls == 3

    # Other bytes of the same size and a new time: that file alone is parsed and written.
    text = (folder / "n1.md").read_text()
    (folder / "n1.md").write_text(text.replace("grease", "butter"))
    os.utime(folder / "n1.md", ns=(stat.st_atime_ns, stat.st_mtime_ns + 9 * 10**9))
    fourth = ingest()
    assert parser.calls == 4
    assert fourth["n1.md"].status == "indexed" and fourth["n1.md"].reason is None
    assert {fourth[n].reason for n in ("n0.md", "n2.md")} == {"unchanged"}
    hits = rows(engine, settings.index, str(folder / "n1.md"))
    assert all("butter" in h["content"] for h in hits if h["chunk_type"] == "child")

    # Other access fields: every file is parsed to take the access-only path.
    other = make_acl("acme", allow=["group:support", "user:ann"])
    assert {r.reason for r in ingest(other).values()} == {"access-only"} and parser.calls == 7
    assert {r.reason for r in ingest(other).values()} == {"unchanged"} and parser.calls == 7

    # Another recipe (chunk size) makes other rows from the same bytes: parsed again.
    resized = Ingestor(
        settings.model_copy(update={"chunk_size": settings.chunk_size + 16}),
        client=engine,
        embedder=embedder,
        analyzer=analyzer,
    )
    resized._parser = parser
    assert {r.status for r in ingest(other, resized).values()} == {"indexed"}
    assert parser.calls == 10


def test_a_new_parser_that_reads_a_file_alike_costs_one_parse_and_no_embedding(
    make_settings: Callable[..., Settings],
    engine: Engine,
    embedder,  # type: ignore[no-untyped-def]
    analyzer,  # type: ignore[no-untyped-def]
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An upgrade that bumps the parser's version parses every file again (its stamp
    names the old parser), but a file read alike keeps its rows and vectors: they are
    restamped, not rewritten, and the next ingest skips the file without a parse."""
    import es_rag.parsing

    settings = make_settings()
    ingestor = Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer)
    parser = ingestor._parser = CountingParser(settings)
    folder = tmp_path / "pages"
    folder.mkdir()
    (folder / "valves.md").write_text("# Valves\n\nValves need grease every spring.\n")
    (folder / "pumps.html").write_text(
        "<html><head><title>Pumps</title></head><body><h1>Pumps</h1>"
        "<p>Pumps are flushed after every season.</p></body></html>"
    )
    docs = {p.name: str(p) for p in folder.iterdir()}
    assert {r.status for r in ingestor.ingest_paths([folder], acl=ACL)} == {"indexed"}
    before = {name: rows(engine, settings.index, doc) for name, doc in docs.items()}

    monkeypatch.setattr(es_rag.parsing, "ES_RAG_PARSING", "next")
    es_rag.parsing.parser_version.cache_clear()
    try:
        again = ingestor.ingest_paths([folder], acl=ACL)
        assert {(r.status, r.reason) for r in again} == {("skipped", "unchanged")}
        assert parser.calls == 4  # both files parsed again: their stamps named the old parser
        for name, doc in docs.items():
            after = {r["_id"]: r for r in rows(engine, settings.index, doc)}
            for old in before[name]:
                new = after[old["_id"]]  # the same rows, not rewritten
                assert new["indexed_at"] == old["indexed_at"]
                assert new["source_stamp"] != old["source_stamp"]
        html = rows(engine, settings.index, docs["pumps.html"])
        assert {r["parser_version"] for r in html} == {es_rag.parsing.parser_version()}
        assert {r.reason for r in ingestor.ingest_paths([folder], acl=ACL)} == {"unchanged"}
        assert parser.calls == 4  # restamped: skipped without a parse
    finally:
        monkeypatch.undo()
        es_rag.parsing.parser_version.cache_clear()


class CountingBatches(Ingestor):
    """Records how many documents each batch of ``ingest_paths`` hands to ``ingest_many``."""

    def __init__(self, settings: Settings, **parts: Any) -> None:
        super().__init__(settings, **parts)
        self.sizes: list[int] = []

    def ingest_many(self, docs, *, refresh=False):  # type: ignore[no-untyped-def]
        self.sizes.append(len(docs))
        return super().ingest_many(docs, refresh=refresh)


def test_files_are_ingested_in_batches_capped_by_count_and_by_text(
    make_settings: Callable[..., Settings],
    engine: Engine,
    embedder,  # type: ignore[no-untyped-def]
    analyzer,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    """Many small files share a call (and its embedding streams); a batch closes at its
    file count or its text, whichever comes first, and a bad file fails alone."""
    settings = make_settings()
    ingestor = CountingBatches(settings, client=engine, embedder=embedder, analyzer=analyzer)
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(6):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\n" + f"Pump {i} seals leak. " * 20)
    (folder / "n3x.pdf").write_bytes(b"%PDF-1.7\n" + b"\x00broken" * 50)  # corrupt: fails alone
    results = ingestor.ingest_paths([folder], acl=ACL, batch_docs=4)
    assert sorted(r.status for r in results) == ["failed"] + ["indexed"] * 6
    assert ingestor.sizes == [4, 2]  # the PDF failed before it joined a batch
    # a fresh index, so that nothing is skipped as unchanged
    by_text = CountingBatches(make_settings(), client=engine, embedder=embedder, analyzer=analyzer)
    one = len((folder / "n0.md").read_text())
    results = by_text.ingest_paths([folder], acl=ACL, batch_chars=2 * one)
    assert sorted(r.status for r in results) == ["failed"] + ["indexed"] * 6
    assert sum(by_text.sizes) == 6 and max(by_text.sizes) <= 2 and len(by_text.sizes) >= 3


def test_an_index_made_before_file_stamps_gains_the_field(
    make_settings: Callable[..., Settings],
    engine: Engine,
    embedder,  # type: ignore[no-untyped-def]
    analyzer,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    """Its strict mapping would refuse rows with ``source_stamp``: the field is added."""
    settings = make_settings()
    ingestor = Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer)
    body = engine.index_body(settings, ingestor.contract())
    del body["mappings"]["properties"]["source_stamp"]
    body["aliases"] = {settings.index: {"is_write_index": True}}
    engine.create_index(f"{settings.index}-1", body)
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nGaskets wear out.\n")
    assert [r.status for r in ingestor.ingest_paths([note], acl=ACL)] == ["indexed"]
    assert "source_stamp" in engine.mapping(f"{settings.index}-1")["properties"]
    assert [r.reason for r in ingestor.ingest_paths([note], acl=ACL)] == ["unchanged"]


def test_a_queued_unchanged_file_is_not_parsed(
    make_settings: Callable[..., Settings],
    engine: Engine,
    embedder,  # type: ignore[no-untyped-def]
    analyzer,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    """The worker's step (es_rag.jobs.run_ingest) skips the parse like the CLI does."""
    settings = make_settings()
    ingestor = Ingestor(settings, client=engine, embedder=embedder, analyzer=analyzer)
    parser = ingestor._parser = CountingParser(settings)
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nPumps need priming.\n")
    payload = jobs.IngestPayload(path=str(note), tenant="acme", allow=["group:support"])
    assert jobs.run_ingest(ingestor, payload).status == "indexed" and parser.calls == 1
    ingestor.index.refresh()
    again = jobs.run_ingest(ingestor, payload)
    assert (again.status, again.reason, parser.calls) == ("skipped", "unchanged", 1)
    ingestor.status.refresh()
    assert ingestor.status.get("acme", str(note))["reason"] == "unchanged"
    versioned = payload.model_copy(update={"doc_version": "7"})
    assert jobs.run_ingest(ingestor, versioned).status == "indexed" and parser.calls == 2


def test_a_writer_that_loses_the_race_to_create_the_index_uses_the_winners(
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    engine: Engine,
) -> None:
    """Two writers start together (a prefork worker's processes): the second looks for
    the alias's indices before the first creates them and finds the name taken after. It
    is the alias, not a concrete index of that name: the second writes into it."""
    from es_rag.engine.index import ChunkIndex

    settings = make_settings()
    first, second = ingestor_for(settings), ingestor_for(settings)
    looks = {"n": 0}
    real = ChunkIndex.concrete_indices

    def racing(self: ChunkIndex) -> list[str]:
        looks["n"] += 1
        if looks["n"] == 1:  # the second writer's first look: nothing yet ...
            found = real(self)
            first.init_index()  # ... and the first writer creates it right after
            return found
        return real(self)

    second._index = ChunkIndex(engine, settings.index)
    second._index.concrete_indices = racing.__get__(second._index)  # type: ignore[method-assign]
    name, created = second.init_index()
    assert created is False and name == real(first.index)[-1]
    doc = Document(doc_id="after-race", text="Written by the writer that lost.", acl=ACL)
    assert second.ingest(doc, refresh=True).status == "indexed"

    # A concrete index that holds the name is still refused, whoever looks.
    taken = make_settings()
    engine.create_index(taken.index, {})
    with pytest.raises(IndexContractError, match="concrete index, not an alias"):
        ingestor_for(taken).init_index()
    engine.delete_index(taken.index)
