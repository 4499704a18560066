"""Pure row building: what one document becomes in the index, and how it is recognised.

Chunk ids, the three-part document hash, the rows themselves and the partial updates of the
access-only path are all functions of their inputs: the ``Ingestor`` decides what to write
and when, this module decides what it looks like. Field names are the index contract
(``mappings/``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from es_rag import detect
from es_rag.analysis import TextAnalyzer, detect_language
from es_rag.chunking import CHUNKER_VERSION, TEXT_PARSER_VERSION
from es_rag.config import Settings
from es_rag.parsing import parser_version
from es_rag.types import AccessControl, Chunk, Document

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


def chunk_id(tenant: str, doc_id: str, doc_version: str, chunk_type: str, ordinal: int) -> str:
    """Deterministic: a retried or redelivered ingest writes the very same ids.

    The tenant is part of the key (id version 2): two tenants' documents with the same id
    are two documents and can never overwrite each other's rows.
    """
    key = json.dumps([tenant, doc_id, doc_version, chunk_type, ordinal], ensure_ascii=False)
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def embedding_text(chunk: Chunk, *, prefix: bool = True) -> str:
    """The context header travels with the text into BM25 terms and the embedding."""
    if prefix and chunk.context_header:
        return f"{chunk.context_header}\n{chunk.content}"
    return chunk.content


@dataclass(frozen=True)
class RowMaker:
    """How this ingestor writes rows: the settings, analyzer and model they record."""

    settings: Settings
    analyzer: TextAnalyzer
    embedding_model: str
    embedding_version: str

    def doc_hash(self, doc: Document, title: str) -> str:
        """Everything that ends up in the rows, so any change is seen; 96 hex characters.

        Three parts: the content (text, chunking, models… everything that needs parsing
        or embedding), the ACL and the metadata. A change in the last two alone takes the
        access-only path (no embedding); ``update_acl`` rewrites the ACL part, so a later
        re-ingest of the same text with that ACL finds nothing to do.
        """
        payload = {
            "text": doc.text,
            "elements": [e.to_dict() for e in doc.elements],
            "title": title,
            "source_uri": doc.source_uri,
            "mime": doc.mime_type,
            "doc_version": doc.doc_version,
            **self._recipe(),
            # A parsed file's elements are in the payload already: a new parser that reads
            # it alike finds it unchanged (and only restamps its rows). Text is parsed
            # later, by the chunker's reader, so its version counts.
            "parser": None if doc.elements else parser_of(doc),
        }
        return hash_of(payload) + access_hash(doc.acl, doc.metadata)

    def _recipe(self) -> dict[str, Any]:
        """What turns a document's text into rows, besides the document itself."""
        s = self.settings
        return {
            "chunker": CHUNKER_VERSION,
            "chunking": [
                s.chunk_size,
                s.chunk_overlap,
                s.parent_chunk_size,
                s.context_header_prefix,
            ],
            "analyzer": self.analyzer.version,
        }

    def file_key(self, source_uri: str) -> str:
        """The part of a file's stamp that is not the file: where it is and how its rows
        are made. A file whose bytes and key are unchanged needs no parse (es_rag.files)."""
        recipe = {**self._recipe(), "parsers": [parser_version(), TEXT_PARSER_VERSION]}
        return hash_of({"source_uri": source_uri, **recipe})[:16]

    def stamp(self, doc: Document) -> str | None:
        """The ``source_stamp`` of a document read from a file: its bytes' stamp and the
        key of how its rows are made (es_rag.files)."""
        if doc.source_stamp is None or doc.source_uri is None:
            return None
        return f"{doc.source_stamp}:{self.file_key(doc.source_uri)}"

    def rows(
        self,
        doc: Document,
        title: str,
        chunks: Sequence[Chunk],
        vectors: Sequence[Any],
        doc_hash: str,
        version: str,
    ) -> Iterator[dict[str, Any]]:
        """Index actions for every chunk; children get the vectors (in order: lists of
        floats or numpy rows, which the client serialises as they are) and terms."""
        s = self.settings
        now = datetime.now(timezone.utc).isoformat()
        default_lang = _LANG_CODES.get(s.analyzer_language, s.analyzer_language)
        child_vectors = iter(vectors)
        tenant = doc.acl.tenant_id
        for chunk in chunks:
            cid = chunk_id(tenant, doc.doc_id, version, chunk.chunk_type, chunk.ordinal)
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
                "parser_version": parser_of(doc),
                "chunker_version": CHUNKER_VERSION,
                "embedding_model": self.embedding_model,
                "embedding_version": self.embedding_version,
                "analyzer_version": self.analyzer.version,
                "updated_at": doc.updated_at or now,
                "indexed_at": now,
                **doc.acl.as_fields(),
                "metadata": doc.metadata,
            }
            stamp = self.stamp(doc)
            if stamp is not None:
                source["source_stamp"] = stamp
            if chunk.chunk_type == "child":
                # Parents are context only: no vector, no terms, never matched by a search.
                source["embedding"] = next(child_vectors)
                source["content_terms"] = self.analyzer.analyze(
                    embedding_text(chunk, prefix=s.context_header_prefix)
                )
                source["title_terms"] = self.analyzer.analyze(" ".join(chunk.title_path))
                if chunk.parent_ordinal is not None:
                    source["parent_id"] = chunk_id(
                        tenant, doc.doc_id, version, "parent", chunk.parent_ordinal
                    )
            yield {"_op_type": "index", "_index": s.index, "_id": cid, "_source": source}
        if next(child_vectors, None) is not None:
            raise ValueError("more vectors than child chunks")  # a bug in the caller


def parser_of(doc: Document) -> str:
    """Unstructured (a parsed file) or es-rag's own reader of Markdown-flavoured text
    (in-memory text, and Markdown files: es_rag.parsing.child)."""
    if doc.elements and doc.mime_type != detect.MARKDOWN:
        return parser_version()
    return TEXT_PARSER_VERSION


def acl_hash(acl: AccessControl) -> str:
    return hash_of(acl.as_fields())


def access_hash(acl: AccessControl, metadata: dict[str, Any]) -> str:
    """The part of ``doc_hash`` after the content: what the access-only path rewrites."""
    return acl_hash(acl) + hash_of(metadata)


def hash_of(value: Any) -> str:
    blob = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def access_actions(
    locations: dict[str, str], fields: dict[str, Any], *, reset_metadata: bool = False
) -> Iterator[dict[str, Any]]:
    """Partial updates of access fields (and metadata) for every row, by id.

    A partial update merges objects into ``_source``, so a metadata key that was removed
    would survive; ``reset_metadata`` first sets ``metadata`` to null, then the second
    update writes the new object whole (both in one bulk request, applied in order).
    """
    for cid, idx in sorted(locations.items()):
        if reset_metadata:
            yield {"_op_type": "update", "_index": idx, "_id": cid, "doc": {"metadata": None}}
        yield {"_op_type": "update", "_index": idx, "_id": cid, "doc": fields}


def fence_version(version: str | None) -> int | None:
    """Versions that are non-negative integers are ordered and fenced; others are labels."""
    if version is not None and version.isdigit() and len(version) < 19:
        return int(version)
    return None


def row_embedding_text(source: dict[str, Any], *, prefix: bool = True) -> str:
    """``embedding_text`` of a stored child row: its context header and content."""
    header = source.get("context_header") or ""
    content = source.get("content") or ""
    return f"{header}\n{content}" if prefix and header else content


@dataclass(frozen=True)
class Retarget:
    """Rows of one index generation rewritten for another (es_rag.generations).

    Everything a row says about its document (ids, hashes, ACL, metadata, text, pages) is
    kept as written; what the generation computes from the text is remade: the child's
    vector with the generation's model and, when its analyzer differs, the BM25 terms.
    The document hash is kept too, so a re-ingest of an unchanged document is recognised
    in both generations.
    """

    index: str
    analyzer: TextAnalyzer
    embedding_model: str
    embedding_version: str
    context_header_prefix: bool

    def texts(self, sources: Sequence[dict[str, Any]]) -> list[str]:
        """What to embed, one text per child row, in order."""
        prefix = self.context_header_prefix
        return [row_embedding_text(s, prefix=prefix) for s in sources if s["chunk_type"] == "child"]

    def actions(
        self, rows: Sequence[tuple[str, dict[str, Any]]], vectors: Sequence[Any]
    ) -> Iterator[dict[str, Any]]:
        """Index actions for ``(chunk id, source)`` rows; ``vectors`` are the children's
        (lists of floats or numpy rows)."""
        child_vectors = iter(vectors)
        for cid, source in rows:
            new = {
                **source,
                "embedding_model": self.embedding_model,
                "embedding_version": self.embedding_version,
            }
            if source["chunk_type"] == "child":
                new["embedding"] = next(child_vectors)
                if source.get("analyzer_version") != self.analyzer.version:
                    text = row_embedding_text(source, prefix=self.context_header_prefix)
                    new["content_terms"] = self.analyzer.analyze(text)
                    new["title_terms"] = self.analyzer.analyze(
                        " ".join(source.get("title_path") or [])
                    )
            new["analyzer_version"] = self.analyzer.version
            yield {"_op_type": "index", "_index": self.index, "_id": cid, "_source": new}
        if next(child_vectors, None) is not None:
            raise ValueError("more vectors than child rows")  # a bug in the caller
