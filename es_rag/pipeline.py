"""Ingest one document end to end: chunk, analyse, embed, write, drop stale chunks.

Used inline by the CLI and, later, by the Celery worker. The write order is what keeps
readers safe: a changed document's new chunks are written first, then the chunks that are
not in the new set are deleted, so a reader never sees the document vanish; a failed write
rolls back what it added, so no document is left half-indexed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch

from es_rag.analysis import TextAnalyzer, detect_language
from es_rag.chunking import CHUNKER_VERSION, chunk_text, guess_title
from es_rag.config import Settings
from es_rag.embedding import Embedder, build_embedder
from es_rag.engine.client import make_client
from es_rag.engine.index import ChunkIndex
from es_rag.engine.mapping import IndexContract, build_index_body
from es_rag.errors import (
    DimensionMismatchError,
    EngineUnavailableError,
    EsRagError,
    InputError,
    UnsupportedFormatError,
)
from es_rag.types import AccessControl, Chunk, Document, IngestResult

log = logging.getLogger(__name__)

PARSER_VERSION = "plaintext-1"
SUPPORTED_SUFFIXES = {".txt": "text/plain", ".md": "text/markdown", ".markdown": "text/markdown"}
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


def embedding_text(chunk: Chunk) -> str:
    """The context header travels with the text into BM25 terms and the embedding."""
    return f"{chunk.context_header}\n{chunk.content}" if chunk.context_header else chunk.content


class Ingestor:
    """Writes documents into the chunk index. Construction does no I/O; parts load lazily."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: Elasticsearch | None = None,
        embedder: Embedder | None = None,
        analyzer: TextAnalyzer | None = None,
    ) -> None:
        self.settings = settings
        self._client = client
        self._embedder = embedder
        self._analyzer = analyzer
        self._index: ChunkIndex | None = None
        self._ready = False

    @property
    def client(self) -> Elasticsearch:
        if self._client is None:
            self._client = make_client(self.settings)
        return self._client

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = build_embedder(self.settings)
        return self._embedder

    @property
    def analyzer(self) -> TextAnalyzer:
        if self._analyzer is None:
            self._analyzer = TextAnalyzer(self.settings.analyzer_language)
        return self._analyzer

    @property
    def index(self) -> ChunkIndex:
        if self._index is None:
            self._index = ChunkIndex(self.client, self.settings.index)
        return self._index

    def contract(self) -> IndexContract:
        return IndexContract(
            embedding_model=self.embedder.model,
            embedding_version=self.embedder.embedding_version,
            dims=self.embedder.dims,
            similarity=self.settings.similarity,
            analyzer_version=self.analyzer.version,
            chunker_version=CHUNKER_VERSION,
            parser_version=PARSER_VERSION,
        )

    def init_index(self) -> tuple[str, bool]:
        """Create the index and alias if absent, else check the existing one's contract."""
        contract = self.contract()
        name, created = self.index.ensure(build_index_body(self.settings, contract), contract)
        self._ready = True
        return name, created

    # --- one document ----------------------------------------------------------------------
    def ingest(self, doc: Document, *, refresh: bool = False) -> IngestResult:
        if not self._ready:
            self.init_index()
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        title = doc.title or doc.doc_id
        chunks = chunk_text(
            doc.text,
            title=title,
            size=self.settings.chunk_size,
            overlap=self.settings.chunk_overlap,
        )
        if not chunks:
            raise InputError(f"{doc.doc_id}: no text to index")
        timings["chunk"] = _ms(t0)
        doc_hash = self.doc_hash(doc, title)
        version = doc.doc_version or doc_hash[:16]
        emb_version = self.embedder.embedding_version

        state = self.index.doc_state(doc.doc_id)
        if state.is_complete(doc_hash=doc_hash, embedding_version=emb_version):
            return IngestResult(
                doc_id=doc.doc_id,
                status="skipped",
                chunks=state.count,
                source=doc.source_uri,
                timings_ms=timings,
            )
        old = self.index.chunk_locations(doc.doc_id) if state.count else {}

        t0 = time.perf_counter()
        vectors = self.embedder.embed([embedding_text(c) for c in chunks], kind="passage")
        timings["embed"] = _ms(t0)
        expected = self.index_dims()
        if vectors.shape[1] != expected:
            raise DimensionMismatchError(expected=expected, got=int(vectors.shape[1]))

        t0 = time.perf_counter()
        rows = list(self._rows(doc, title, chunks, vectors.tolist(), doc_hash, version))
        timings["analyze"] = _ms(t0)
        new_ids = {row["_id"] for row in rows}

        t0 = time.perf_counter()
        outcome = self.index.bulk(
            rows,
            chunk_size=self.settings.bulk_chunk_size,
            max_retries=self.settings.bulk_max_retries,
            initial_backoff=self.settings.bulk_initial_backoff,
        )
        if outcome.failures:
            # Roll back what this attempt added; the previous version stays whole.
            added = {i: self.settings.index for i in new_ids - set(old)}
            self.index.delete_chunks(added)
            self.index.raise_on_failures(outcome, f"indexing {doc.doc_id}")
        stale = {cid: idx for cid, idx in old.items() if cid not in new_ids}
        if stale:
            self.index.raise_on_failures(
                self.index.delete_chunks(stale), f"deleting stale chunks of {doc.doc_id}"
            )
        if refresh:
            self.index.refresh()
        timings["index"] = _ms(t0)
        return IngestResult(
            doc_id=doc.doc_id,
            status="indexed",
            chunks=len(rows),
            deleted=len(stale),
            source=doc.source_uri,
            timings_ms=timings,
        )

    def index_dims(self) -> int:
        contract = self.index.contract()
        return contract.dims if contract else self.embedder.dims

    def doc_hash(self, doc: Document, title: str) -> str:
        """Everything that ends up in the rows, so any change re-indexes the document."""
        payload = {
            "text": doc.text,
            "title": title,
            "acl": doc.acl.as_fields(),
            "metadata": doc.metadata,
            "source_uri": doc.source_uri,
            "mime": doc.mime_type,
            "doc_version": doc.doc_version,
            "chunker": CHUNKER_VERSION,
            "chunking": [self.settings.chunk_size, self.settings.chunk_overlap],
            "analyzer": self.analyzer.version,
            "parser": PARSER_VERSION,
        }
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def _rows(
        self,
        doc: Document,
        title: str,
        chunks: Sequence[Chunk],
        vectors: list[list[float]],
        doc_hash: str,
        version: str,
    ) -> Iterator[dict[str, Any]]:
        now = datetime.now(timezone.utc).isoformat()
        default_lang = _LANG_CODES.get(
            self.settings.analyzer_language, self.settings.analyzer_language
        )
        for chunk, vector in zip(chunks, vectors, strict=True):
            cid = chunk_id(doc.doc_id, version, chunk.chunk_type, chunk.ordinal)
            source = {
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
                "content_terms": self.analyzer.analyze(embedding_text(chunk)),
                "title_terms": self.analyzer.analyze(" ".join(chunk.title_path)),
                "embedding": vector,
                "source_uri": doc.source_uri,
                "mime_type": doc.mime_type,
                "page_start": chunk.page_start,
                "page_end": chunk.page_end,
                "element_types": list(chunk.element_types),
                "language": detect_language(chunk.content, default=default_lang),
                "content_hash": hashlib.sha256(chunk.content.encode("utf-8")).hexdigest()[:32],
                "doc_hash": doc_hash,
                "parser_version": PARSER_VERSION,
                "chunker_version": CHUNKER_VERSION,
                "embedding_model": self.embedder.model,
                "embedding_version": self.embedder.embedding_version,
                "analyzer_version": self.analyzer.version,
                "updated_at": doc.updated_at or now,
                "indexed_at": now,
                **doc.acl.as_fields(),
                "metadata": doc.metadata,
            }
            yield {
                "_op_type": "index",
                "_index": self.settings.index,
                "_id": cid,
                "_source": source,
            }

    # --- files ---------------------------------------------------------------------------
    def ingest_paths(
        self,
        paths: Sequence[str | Path],
        *,
        acl: AccessControl,
        doc_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        on_result: Callable[[IngestResult], None] | None = None,
    ) -> list[IngestResult]:
        """Ingest files and folders; a bad file is reported and the others still ingest."""
        files = list(expand_paths(paths))
        if doc_id is not None and len(files) != 1:
            raise InputError("--doc-id names one document: give exactly one file")
        results: list[IngestResult] = []
        unavailable: str | None = None
        for path, listed_error in files:
            given = str(path)
            if unavailable or listed_error:
                reason = listed_error or f"not attempted: {unavailable}"
                result = IngestResult(
                    doc_id=doc_id or given,
                    status="failed",
                    error=reason,
                    error_type="UnsupportedFormatError"
                    if listed_error
                    else "EngineUnavailableError",
                )
            else:
                try:
                    doc = load_document(path, acl=acl, doc_id=doc_id, metadata=metadata)
                    result = self.ingest(doc)
                except EngineUnavailableError as exc:
                    unavailable = str(exc)
                    result = _failed(doc_id or given, exc)
                except EsRagError as exc:
                    result = _failed(doc_id or given, exc)
            results.append(result)
            if on_result:
                on_result(result)
        if self._ready and not unavailable:
            self.index.refresh()
        return results

    def delete_document(self, doc_id: str, *, refresh: bool = True) -> int:
        """Delete every row of ``doc_id`` (found by scan, removed by id)."""
        locations = self.index.chunk_locations(doc_id)
        self.index.raise_on_failures(self.index.delete_chunks(locations), f"deleting {doc_id}")
        if refresh:
            self.index.refresh()
        return len(locations)


def _failed(doc_id: str, exc: Exception) -> IngestResult:
    return IngestResult(
        doc_id=doc_id, status="failed", error=str(exc), error_type=type(exc).__name__
    )


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


def expand_paths(paths: Iterable[str | Path]) -> Iterator[tuple[Path, str | None]]:
    """Files to ingest, with a reason for those that cannot be (reported, not dropped)."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and not any(
                    p.startswith(".") for p in child.relative_to(path).parts
                ):
                    yield child, _unsupported(child)
        elif path.is_file():
            yield path, _unsupported(path)
        else:
            yield path, f"{path}: no such file or directory"


def _unsupported(path: Path) -> str | None:
    if path.suffix.lower() in SUPPORTED_SUFFIXES:
        return None
    supported = ", ".join(sorted(SUPPORTED_SUFFIXES))
    suffix = path.suffix or "(no extension)"
    return f"{path}: unsupported format {suffix!r} (supported: {supported})"


def load_document(
    path: Path,
    *,
    acl: AccessControl,
    doc_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Document:
    """A text or Markdown file as a Document; ``doc_id`` defaults to the path as given."""
    mime = SUPPORTED_SUFFIXES.get(path.suffix.lower())
    if mime is None:
        raise UnsupportedFormatError(_unsupported(path) or str(path))
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from exc
    if b"\x00" in raw[:8192]:
        raise UnsupportedFormatError(f"{path}: binary content in a {path.suffix} file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not valid UTF-8 text (byte {exc.start})") from exc
    if not text.strip():
        raise InputError(f"{path}: empty document, no text to index")
    stat = path.stat()
    return Document(
        doc_id=doc_id or str(path),
        text=text,
        acl=acl,
        title=guess_title(text, path.stem),
        source_uri=path.resolve().as_uri(),
        mime_type=mime,
        metadata=dict(metadata or {}),
        updated_at=datetime.fromtimestamp(stat.st_mtime, timezone.utc).isoformat(),
    )
