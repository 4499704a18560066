"""Ingest one document end to end: parse, chunk, analyse, embed, write, drop stale chunks.

Used inline by the CLI and by the Celery worker. The write order is what keeps
readers safe: a changed document's new chunks are written first, then the chunks that are
not in the new set are deleted, so a reader never sees the document vanish; a failed write
rolls back what it added, so no document is left half-indexed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from es_rag.analysis import TextAnalyzer, detect_language
from es_rag.chunking import (
    CHUNKER_VERSION,
    TEXT_PARSER_VERSION,
    Counter,
    chunk_elements,
    text_elements,
)
from es_rag.config import Settings
from es_rag.embedding import Embedder
from es_rag.engine.index import ChunkIndex, bulk_error
from es_rag.engine.mapping import IndexContract
from es_rag.engine.status import StatusIndex
from es_rag.errors import (
    DimensionMismatchError,
    EmptyDocumentError,
    EngineUnavailableError,
    EsRagError,
    IndexBlockedError,
    InputError,
)
from es_rag.parsing import Parser, file_problem, parser_version
from es_rag.parts import Parts
from es_rag.types import AccessControl, Chunk, Document, IngestResult, IngestStatus

log = logging.getLogger(__name__)

_LANG_CODES = {
    "english": "en",
    "french": "fr",
    "german": "de",
    "spanish": "es",
    "italian": "it",
    "portuguese": "pt",
    "dutch": "nl",
    "russian": "ru",
    "swedish": "sv",
}


def chunk_id(doc_id: str, doc_version: str, chunk_type: str, ordinal: int) -> str:
    """Deterministic: a retried or redelivered ingest writes the very same ids."""
    key = f"{doc_id}\x00{doc_version}\x00{chunk_type}\x00{ordinal}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def embedding_text(chunk: Chunk, *, prefix: bool = True) -> str:
    """The context header travels with the text into BM25 terms and the embedding."""
    if prefix and chunk.context_header:
        return f"{chunk.context_header}\n{chunk.content}"
    return chunk.content


class Ingestor(Parts):
    """Writes documents into the chunk index. Construction does no I/O; parts load lazily."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: Any = None,
        embedder: Embedder | None = None,
        analyzer: TextAnalyzer | None = None,
    ) -> None:
        super().__init__(settings, client=client, embedder=embedder, analyzer=analyzer)
        self._index: ChunkIndex | None = None
        self._status: StatusIndex | None = None
        self._unblocked_at: float | None = None
        self._ready = False
        self._dims = 0
        self._parser: Parser | None = None
        self._tokens: tuple[Counter, int | None] | None = None

    @property
    def parser(self) -> Parser:
        """Unstructured in a sandboxed child; its server starts with the first file."""
        if self._parser is None:
            self._parser = Parser(self.settings)
        return self._parser

    @property
    def tokens(self) -> tuple[Counter, int | None]:
        """How chunk sizes are counted (the embedding model's tokenizer) and the room a
        chunk has in the model's input (its limit less the passage prefix)."""
        if self._tokens is None:
            count, limit = self.embedder.token_counter()
            if limit is not None and self.settings.passage_prefix:
                limit -= count(self.settings.passage_prefix)
            self._tokens = (count, limit)
        return self._tokens

    @property
    def index(self) -> ChunkIndex:
        if self._index is None:
            self._index = ChunkIndex(self.engine, self.settings.index)
        return self._index

    @property
    def status(self) -> StatusIndex:
        """Ingest outcomes and version fences (``<alias>-status``), created on first use."""
        if self._status is None:
            self._status = StatusIndex(self.engine, self.settings.index)
        return self._status

    def contract(self) -> IndexContract:
        return IndexContract(
            embedding_model=self.embedder.model,
            embedding_version=self.embedder.embedding_version,
            dims=self.embedder.dims,
            similarity=self.settings.similarity,
            analyzer_version=self.analyzer.version,
            chunker_version=CHUNKER_VERSION,
            parser_version=parser_version(),
        )

    def init_index(self) -> tuple[str, bool]:
        """Create the index and alias if absent, else check the existing one's contract."""
        contract = self.contract()
        name, created = self.index.ensure(self.engine.index_body(self.settings, contract), contract)
        # ensure() checked that the index's dims equal the contract's; a remote embedding
        # server that later changes model is still caught per batch against this number.
        self._dims = contract.dims
        self._ready = True
        return name, created

    # --- one document ----------------------------------------------------------------------
    def ingest(self, doc: Document, *, refresh: bool = False) -> IngestResult:
        """Ingest one document; its failure is raised (see ``ingest_many`` for reports)."""
        outcome = self._ingest_batch([doc], refresh=refresh)[0]
        if isinstance(outcome, EsRagError):
            raise outcome
        return outcome

    def ingest_many(self, docs: Sequence[Document], *, refresh: bool = False) -> list[IngestResult]:
        """Ingest documents together (one embedding stream, one bulk stream).

        A document that fails is reported in its result and loses nothing that was indexed
        before; the others still ingest. A dead server raises ``EngineUnavailableError``.
        """
        return [
            _failed(doc.doc_id, out) if isinstance(out, EsRagError) else out
            for doc, out in zip(docs, self._ingest_batch(docs, refresh=refresh), strict=True)
        ]

    def _ingest_batch(
        self, docs: Sequence[Document], *, refresh: bool
    ) -> list[IngestResult | EsRagError]:
        if not self._ready:
            self.init_index()
        out: list[IngestResult | EsRagError | None] = [None] * len(docs)
        plans: list[_Plan] = []
        emb_version = self.embedder.embedding_version
        for i, doc in enumerate(docs):
            try:
                plan = self._plan(i, doc)
            except EsRagError as exc:
                out[i] = exc
                continue
            if plan.fence is not None and not self.status.fence(doc.doc_id, plan.fence):
                newest = self.status.newest_version(doc.doc_id)
                out[i] = plan.result("skipped", reason="stale-version")
                out[i].error = f"version {plan.fence} is older than {newest}, already accepted"  # type: ignore[union-attr]
                continue
            state = self.index.doc_state(doc.doc_id)
            if state.is_complete(doc_hash=plan.doc_hash, embedding_version=emb_version):
                out[i] = plan.result("skipped", reason="unchanged")
                continue
            plan.old = self.index.chunk_locations(doc.doc_id) if state.count else {}
            plans.append(plan)

        if plans:
            self._write(plans, out)
        if refresh:
            self.index.refresh()
        return [o for o in out if o is not None]

    def _plan(self, position: int, doc: Document) -> _Plan:
        t0 = time.perf_counter()
        title = doc.title or doc.doc_id
        count, limit = self.tokens
        chunks = chunk_elements(
            doc.elements or text_elements(doc.text),
            title=title,
            size=self.settings.chunk_size,
            overlap=self.settings.chunk_overlap,
            parent_size=self.settings.parent_chunk_size,
            count_tokens=count,
            max_tokens=limit,
        )
        if not chunks:
            raise EmptyDocumentError(f"{doc.doc_id}: no text to index")
        doc_hash = self.doc_hash(doc, title)
        plan = _Plan(position, doc, title, chunks, doc_hash, doc.doc_version or doc_hash[:16])
        plan.fence = fence_version(doc.doc_version)
        plan.timings["chunk"] = _ms(t0)
        return plan

    def _write(self, plans: list[_Plan], out: list[IngestResult | EsRagError | None]) -> None:
        """Embed every planned chunk, write all rows, then roll back or clean up per doc."""
        t0 = time.perf_counter()
        blocks = self._write_blocks()
        if blocks:
            blocked = IndexBlockedError(
                f"the index refuses writes ({', '.join(blocks)}); free disk space or lift the "
                "block, then requeue: nothing was written"
            )
            for p in plans:
                out[p.position] = blocked
            return
        prefix = self.settings.context_header_prefix
        texts = [embedding_text(c, prefix=prefix) for p in plans for c in p.children]
        try:
            vectors = self.embedder.embed(texts, kind="passage")
            expected = self._dims
            if vectors.shape[1] != expected:
                raise DimensionMismatchError(expected=expected, got=int(vectors.shape[1]))
        except EsRagError as exc:
            for p in plans:
                out[p.position] = exc
            return
        embed_ms = _ms(t0)
        rows: list[dict[str, Any]] = []
        owner: dict[str, _Plan] = {}
        start = 0
        for p in plans:
            part = vectors[start : start + len(p.children)].tolist()
            start += len(p.children)
            for row in self._rows(p.doc, p.title, p.chunks, part, p.doc_hash, p.version):
                rows.append(row)
                owner[row["_id"]] = p
                p.new_ids.add(row["_id"])
            p.timings["embed"] = embed_ms * len(p.children) / max(len(texts), 1)

        t0 = time.perf_counter()
        outcome = self.index.bulk(
            rows,
            chunk_size=self.settings.bulk_chunk_size,
            max_retries=self.settings.bulk_max_retries,
            initial_backoff=self.settings.bulk_initial_backoff,
        )
        for failure in outcome.failures:
            owner[failure["chunk_id"]].failures.append(failure)
        for p in plans:
            # A newer version accepted while this one was being written wins: this attempt
            # removes what it added and leaves the newer rows alone.
            if p.fence is not None and not p.failures:
                newest = self.status.newest_version(p.doc.doc_id)
                if newest is not None and newest > p.fence:
                    p.superseded = newest
        rollback: dict[str, str] = {}
        stale: dict[str, str] = {}
        for p in plans:
            if p.failures or p.superseded is not None:
                # Roll back what this attempt added; the previous version stays whole.
                rollback.update({i: self.settings.index for i in p.new_ids - set(p.old)})
            else:
                stale.update({c: idx for c, idx in p.old.items() if c not in p.new_ids})
        if rollback:
            self.index.delete_chunks(rollback)
        cleanup = self.index.delete_chunks(stale) if stale else None
        stale_failures = {f["chunk_id"] for f in cleanup.failures} if cleanup else set()
        index_ms = _ms(t0)
        for p in plans:
            p.timings["index"] = index_ms * len(p.children) / max(len(texts), 1)
            leftover = [c for c in p.old if c not in p.new_ids and c in stale_failures]
            if p.superseded is not None:
                res = p.result("skipped", reason="stale-version")
                res.error = f"version {p.fence} was superseded by {p.superseded} while writing"
                out[p.position] = res
            elif p.failures:
                out[p.position] = bulk_error(f"indexing {p.doc.doc_id}", p.failures)
            elif leftover:
                failures = [f for f in cleanup.failures if f["chunk_id"] in leftover]  # type: ignore[union-attr]
                out[p.position] = bulk_error(f"deleting stale chunks of {p.doc.doc_id}", failures)
            else:
                deleted = sum(1 for c in p.old if c not in p.new_ids)
                out[p.position] = p.result("indexed", deleted=deleted)

    def _write_blocks(self) -> list[str]:
        """The index's write blocks; a clear answer is trusted for 10 s (one request per
        batch is a noticeable share of a one-document queue task), a block never."""
        now = time.monotonic()
        if self._unblocked_at is not None and now - self._unblocked_at < 10.0:
            return []
        blocks = self.engine.write_blocks(self.settings.index)
        self._unblocked_at = None if blocks else now
        return blocks

    def doc_hash(self, doc: Document, title: str) -> str:
        """Everything that ends up in the rows, so any change re-indexes the document.

        Two halves: the body (text, metadata, chunking, models…) and the ACL, so that
        ``update_acl`` can rewrite the ACL half without the text and an unchanged re-ingest
        with the new ACL still finds nothing to do.
        """
        s = self.settings
        payload = {
            "text": doc.text,
            "elements": [e.to_dict() for e in doc.elements],
            "title": title,
            "metadata": doc.metadata,
            "source_uri": doc.source_uri,
            "mime": doc.mime_type,
            "doc_version": doc.doc_version,
            "chunker": CHUNKER_VERSION,
            "chunking": [
                s.chunk_size,
                s.chunk_overlap,
                s.parent_chunk_size,
                s.context_header_prefix,
            ],
            "analyzer": self.analyzer.version,
            "parser": _parser_of(doc),
        }
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32] + acl_hash(doc.acl)

    def _rows(
        self,
        doc: Document,
        title: str,
        chunks: Sequence[Chunk],
        vectors: list[list[float]],
        doc_hash: str,
        version: str,
    ) -> Iterator[dict[str, Any]]:
        """Index actions for every chunk; children get the vectors (in order) and terms."""
        now = datetime.now(timezone.utc).isoformat()
        default_lang = _LANG_CODES.get(
            self.settings.analyzer_language, self.settings.analyzer_language
        )
        child_vectors = iter(vectors)
        for chunk in chunks:
            cid = chunk_id(doc.doc_id, version, chunk.chunk_type, chunk.ordinal)
            source: dict[str, Any] = {
                "chunk_id": cid,
                "doc_id": doc.doc_id,
                "doc_version": version,
                "chunk_type": chunk.chunk_type,
                "parent_id": None,
                "ordinal": chunk.ordinal,
                "chunk_count": len(chunks),
                "title": title,
                "title_path": list(chunk.title_path),
                "context_header": chunk.context_header,
                "content": chunk.content,
                "source_uri": doc.source_uri,
                "mime_type": doc.mime_type,
                "page_start": chunk.page_start,
                "page_end": chunk.page_end,
                "element_types": list(chunk.element_types),
                "language": detect_language(chunk.content, default=default_lang),
                "content_hash": hashlib.sha256(chunk.content.encode("utf-8")).hexdigest()[:32],
                "doc_hash": doc_hash,
                "parser_version": _parser_of(doc),
                "chunker_version": CHUNKER_VERSION,
                "embedding_model": self.embedder.model,
                "embedding_version": self.embedder.embedding_version,
                "analyzer_version": self.analyzer.version,
                "updated_at": doc.updated_at or now,
                "indexed_at": now,
                **doc.acl.as_fields(),
                "metadata": doc.metadata,
            }
            if chunk.chunk_type == "child":
                # Parents are context only: no vector, no terms, never matched by a search.
                source["embedding"] = next(child_vectors)
                source["content_terms"] = self.analyzer.analyze(
                    embedding_text(chunk, prefix=self.settings.context_header_prefix)
                )
                source["title_terms"] = self.analyzer.analyze(" ".join(chunk.title_path))
                if chunk.parent_ordinal is not None:
                    source["parent_id"] = chunk_id(
                        doc.doc_id, version, "parent", chunk.parent_ordinal
                    )
            yield {
                "_op_type": "index",
                "_index": self.settings.index,
                "_id": cid,
                "_source": source,
            }
        if next(child_vectors, None) is not None:
            raise ValueError("more vectors than child chunks")  # a bug in the caller

    # --- files ---------------------------------------------------------------------------
    def ingest_paths(
        self,
        paths: Sequence[str | Path],
        *,
        acl: AccessControl,
        doc_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        on_result: Callable[[IngestResult], None] | None = None,
        batch_docs: int = 32,
    ) -> list[IngestResult]:
        """Ingest files and folders; a bad file is reported and the others still ingest.

        Files are read and ingested in batches of ``batch_docs`` so that many small files
        share embedding batches and bulk requests.
        """
        files = list(expand_paths(paths))
        if doc_id is not None and len(files) != 1:
            raise InputError("--doc-id names one document: give exactly one file")
        results: list[IngestResult] = []
        unavailable: str | None = None

        def report(result: IngestResult) -> None:
            results.append(result)
            if on_result:
                on_result(result)

        batch: list[Document] = []

        def flush() -> None:
            nonlocal unavailable
            if not batch:
                return
            try:
                done = self.ingest_many(batch)
            except EngineUnavailableError as exc:
                unavailable = str(exc)
                done = [_failed(d.doc_id, exc) for d in batch]
            for result in done:
                report(result)
            batch.clear()

        for path, listed_error in files:
            given = doc_id or str(path)
            if unavailable:
                report(
                    IngestResult(
                        doc_id=given,
                        status="failed",
                        error_type="EngineUnavailableError",
                        error=f"not attempted: {unavailable}",
                    )
                )
                continue
            if listed_error:
                report(
                    IngestResult(
                        doc_id=given, status="failed", error=listed_error, error_type="InputError"
                    )
                )
                continue
            try:
                batch.append(
                    load_document(
                        path, parser=self.parser, acl=acl, doc_id=doc_id, metadata=metadata
                    )
                )
            except EsRagError as exc:
                report(_failed(given, exc))
            if len(batch) >= batch_docs:
                flush()
        flush()
        if self._ready and not unavailable:
            self.index.refresh()
        return results

    def update_acl(self, doc_id: str, acl: AccessControl, *, refresh: bool = False) -> int:
        """Rewrite the access fields of every row of ``doc_id``: no parsing, no embedding.

        The ACL half of ``doc_hash`` is rewritten with them, so a later re-ingest of the
        same text with this ACL is recognised as unchanged. Returns the rows updated.
        """
        state = self.index.doc_state(doc_id)
        if state.count == 0:
            raise InputError(f"{doc_id}: not in the index, no ACL to update")
        if len(state.doc_hashes) != 1:
            raise InputError(f"{doc_id}: rows of several versions; re-ingest it first")
        new_hash = state.doc_hashes[0][:32] + acl_hash(acl)
        fields = {**acl.as_fields(), "doc_hash": new_hash}
        locations = self.index.chunk_locations(doc_id)
        actions = (
            {"_op_type": "update", "_index": idx, "_id": cid, "doc": fields}
            for cid, idx in sorted(locations.items())
        )
        outcome = self.index.bulk(actions, chunk_size=self.settings.bulk_chunk_size)
        self.index.raise_on_failures(outcome, f"updating the ACL of {doc_id}")
        if refresh:
            self.index.refresh()
        return outcome.ok

    def delete_document(self, doc_id: str, *, refresh: bool = True) -> int:
        """Delete every row of ``doc_id`` (found by scan, removed by id)."""
        locations = self.index.chunk_locations(doc_id)
        self.index.raise_on_failures(self.index.delete_chunks(locations), f"deleting {doc_id}")
        if refresh:
            self.index.refresh()
        return len(locations)


@dataclass
class _Plan:
    """One document on its way into the index."""

    position: int
    doc: Document
    title: str
    chunks: list[Chunk]
    doc_hash: str
    version: str
    old: dict[str, str] = field(default_factory=dict)
    new_ids: set[str] = field(default_factory=set)
    failures: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    fence: int | None = None  # numeric doc_version: fenced against older versions
    superseded: int | None = None  # a newer version accepted while this one was written

    @property
    def children(self) -> list[Chunk]:
        return [c for c in self.chunks if c.chunk_type == "child"]

    def result(
        self, status: IngestStatus, *, deleted: int = 0, reason: str | None = None
    ) -> IngestResult:
        return IngestResult(
            reason=reason,
            doc_id=self.doc.doc_id,
            status=status,
            chunks=len(self.children),
            parents=len(self.chunks) - len(self.children),
            deleted=deleted,
            source=self.doc.source_uri,
            timings_ms=self.timings,
        )


def _parser_of(doc: Document) -> str:
    """Unstructured (a parsed file) or es-rag's own reader of Markdown-flavoured text."""
    return parser_version() if doc.elements else TEXT_PARSER_VERSION


def acl_hash(acl: AccessControl) -> str:
    blob = json.dumps(acl.as_fields(), sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def fence_version(version: str | None) -> int | None:
    """Versions that are non-negative integers are ordered and fenced; others are labels."""
    if version is not None and version.isdigit() and len(version) < 19:
        return int(version)
    return None


def _failed(doc_id: str, exc: Exception) -> IngestResult:
    return IngestResult(
        doc_id=doc_id, status="failed", error=str(exc), error_type=type(exc).__name__
    )


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


def expand_paths(paths: Iterable[str | Path]) -> Iterator[tuple[Path, str | None]]:
    """Files to ingest, with a reason for those that cannot be (reported, not dropped).

    Inside a folder, links to folders are reported, not followed (a link loop cannot trap
    the walk); dotfiles and dot-folders are skipped. Which files are documents is
    decided by their content when they are parsed, not by their names.
    """
    for raw in paths:
        path = Path(raw)
        if path.is_dir():  # a folder named on the command line is walked, link or not
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                # os.walk lists links to folders among the folders (and does not enter
                # them): report them like files, so that nothing is dropped silently.
                links = [d for d in dirs if (Path(folder) / d).is_symlink()]
                dirs[:] = [d for d in dirs if d not in links]
                for name in sorted([*names, *links]):
                    if not name.startswith("."):
                        child = Path(folder) / name
                        yield child, file_problem(child)
        else:
            yield path, file_problem(path)


def load_document(
    path: Path,
    *,
    parser: Parser,
    acl: AccessControl,
    doc_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Document:
    """A file parsed into a Document; ``doc_id`` defaults to the path as given.

    Raises an ``InputError`` subclass naming the file and the reason (unsupported type,
    encrypted, corrupt, empty or needing OCR, too large, a parse limit hit).
    """
    parsed = parser.parse(path)
    stat = path.stat()
    return Document(
        doc_id=doc_id or str(path),
        text=parsed.text,
        elements=tuple(parsed.elements),
        acl=acl,
        title=parsed.title,
        source_uri=path.resolve().as_uri(),
        mime_type=parsed.mime,
        metadata=dict(metadata or {}),
        updated_at=datetime.fromtimestamp(stat.st_mtime, timezone.utc).isoformat(),
    )
