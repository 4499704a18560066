"""Small value types shared by the modules: inputs, chunks, hits and results."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

Visibility = Literal["public", "restricted"]
ChunkType = Literal["child", "parent"]
IngestStatus = Literal["indexed", "skipped", "failed"]
# What a piece of a parsed document is. header/footer/page_number are page furniture that
# cleaning removes when it repeats across pages; notes are a slide's speaker notes;
# contents is a table of contents or an index (stored, left out of search).
ElementKind = Literal[
    "title",
    "text",
    "list_item",
    "table",
    "code",
    "caption",
    "formula",
    "notes",
    "image",
    "header",
    "footer",
    "page_number",
    "contents",
]


@dataclass(frozen=True)
class Caller:
    """Who is asking: a tenant and the principals (``user:u1``, ``group:g``) they hold."""

    tenant: str
    principals: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        from es_rag.acl import check_caller

        if not isinstance(self.principals, frozenset) and not isinstance(self.principals, str):
            object.__setattr__(self, "principals", frozenset(self.principals))
        check_caller(self)


@dataclass(frozen=True)
class AccessControl:
    """Access fields written on every row of a document (DESIGN.md §5)."""

    tenant_id: str
    visibility: Visibility
    allowed_principals: tuple[str, ...] = ()
    denied_principals: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """An ACL refuses to exist in a form that cannot mean what it says (a restricted
        document nobody may read, a malformed principal), whoever builds it."""
        from es_rag.acl import check_acl

        for name in ("allowed_principals", "denied_principals"):
            value = getattr(self, name)
            if isinstance(value, list | set | frozenset):
                object.__setattr__(self, name, tuple(sorted(value)))
        check_acl(self)

    def as_fields(self) -> dict[str, Any]:
        return {
            "tenant_id": self.tenant_id,
            "visibility": self.visibility,
            "allowed_principals": list(self.allowed_principals),
            "denied_principals": list(self.denied_principals),
        }


@dataclass(frozen=True)
class Element:
    """One structural piece of a parsed document, in reading order."""

    kind: ElementKind
    text: str
    level: int | None = None  # heading depth for titles (1 = top); None: the format won't say
    page: int | None = None  # 1-based page, slide or sheet number
    html: str | None = None  # a table's structure (rows and header), as Unstructured gives it
    # Corner points as fractions of the page's width and height, (0, 0) top left.
    coordinates: tuple[tuple[float, float], ...] | None = None
    page_end: int | None = None  # the last page, for text that runs over a page break

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Element:
        coords = data.get("coordinates")
        return cls(
            kind=data["kind"],
            text=data["text"],
            level=data.get("level"),
            page=data.get("page"),
            html=data.get("html"),
            coordinates=tuple(tuple(p) for p in coords) if coords else None,
            page_end=data.get("page_end"),
        )


@dataclass(frozen=True)
class Chunk:
    """A unit of retrieval, before it gets its vector and access fields."""

    ordinal: int
    chunk_type: ChunkType
    content: str
    title_path: tuple[str, ...]
    context_header: str
    parent_ordinal: int | None = None
    page_start: int | None = None
    page_end: int | None = None
    element_types: tuple[str, ...] = ()


@dataclass
class Document:
    """What ingest takes: one document's text or parsed elements, plus provenance and ACL.

    ``elements`` (from a parsed file) take precedence; otherwise ``text`` is read as
    Markdown-flavoured plain text (headings, fenced code, paragraphs).
    """

    doc_id: str
    text: str
    acl: AccessControl
    title: str | None = None
    source_uri: str | None = None
    mime_type: str = "text/plain"
    metadata: dict[str, Any] = field(default_factory=dict)
    doc_version: str | None = None  # defaults to the content hash
    updated_at: str | None = None
    elements: tuple[Element, ...] = ()
    # A file's size, modification time and content hash (es_rag.files.file_stamp): lets
    # a re-ingest of the unchanged file skip its parse.
    source_stamp: str | None = None


@dataclass
class Hit:
    """One search result with its provenance and why it ranked where it did."""

    chunk_id: str
    doc_id: str
    source_uri: str | None
    title_path: list[str]
    page_start: int | None
    page_end: int | None
    text: str
    score: float
    ranks: dict[str, int | None]
    scores: dict[str, float | None] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    highlights: list[str] = field(default_factory=list)
    explain: dict[str, Any] = field(default_factory=dict)
    doc_version: str | None = None
    ordinal: int | None = None
    parent_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict: its deep copy of every value was a tenth of the service's
        # time per request. Containers are copied one level; what is below them (metadata
        # and explain objects) was made for this hit alone.
        out = {name: getattr(self, name) for name in _HIT_FIELDS}
        for name in ("title_path", "highlights"):
            out[name] = list(out[name])
        for name in ("ranks", "scores", "metadata", "explain"):
            out[name] = dict(out[name])
        return out


_HIT_FIELDS = tuple(f.name for f in fields(Hit))


@dataclass(frozen=True)
class ExpansionTerm:
    """A term pseudo-relevance feedback added to the BM25 side, and its boost."""

    term: str
    boost: float


@dataclass
class SearchResponse:
    strategy: str
    hits: list[Hit]
    timings_ms: dict[str, float]
    note: str | None = None  # e.g. why native RRF was not used
    reranked: bool | None = None  # None: no rerank asked; False: asked but fused order kept
    rerank_note: str | None = None  # why not reranked
    # Terms pseudo-relevance feedback added to the BM25 side, with their boosts
    expansion: tuple[ExpansionTerm, ...] = ()
    # The question's sentences also asked on the kNN side (es_rag.query.sentences)
    sentences: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "strategy": self.strategy,
            "hits": [h.to_dict() for h in self.hits],
            "timings_ms": {k: round(v, 3) for k, v in self.timings_ms.items()},
        }
        if self.note:
            out["note"] = self.note
        if self.reranked is not None:
            out["reranked"] = self.reranked
            if self.rerank_note:
                out["rerank_note"] = self.rerank_note
        if self.expansion:
            out["expansion"] = [
                {"term": e.term, "boost": round(e.boost, 4)} for e in self.expansion
            ]
        if self.sentences:
            out["sentences"] = list(self.sentences)
        return out


@dataclass
class IngestResult:
    doc_id: str
    status: IngestStatus
    chunks: int = 0  # searchable child chunks
    parents: int = 0  # context-only parent chunks
    deleted: int = 0  # rows of the previous version removed
    error: str | None = None
    error_type: str | None = None
    source: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    # why skipped ("unchanged", "stale-version"), or how indexed ("access-only": the ACL or
    # metadata changed and only those fields were rewritten)
    reason: str | None = None
    tenant: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict: its deep copy of every field took 6 ms of an unchanged
        # 600-file re-ingest (this takes 1 ms).
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["timings_ms"] = dict(self.timings_ms)
        return out
