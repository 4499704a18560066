"""Request and response bodies of the JSON API (v1): the CLI's ``--json`` objects.

Requests forbid unknown fields: a ``tenant`` or ``principals`` in a body is refused, not
ignored, so a client that believes it chooses its identity learns at once that it does not.
Caps that depend on the settings (question length, ``k``, budget) are checked by the
service and answered with 400.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from es_rag.query.strategies import NAMES

StrategyName = Literal[NAMES]  # type: ignore[valid-type]
Expand = Literal["parent", "neighbours", "none"]

_FILTER_HELP = (
    "metadata filters in the CLI's syntax: FIELD=V, FIELD=V1|V2, FIELD>=V, FIELD<V, FIELD?"
)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchRequest(_Request):
    query: str = Field(min_length=1, description="the question")
    k: int | None = Field(default=None, ge=1, description="number of hits")
    strategy: StrategyName | None = None
    filters: list[str] = Field(default_factory=list, max_length=32, description=_FILTER_HELP)
    rerank: bool | None = Field(default=None, description="default: on when configured")
    explain: bool = Field(default=False, description="each hit's explain object")


class ContextRequest(_Request):
    query: str = Field(min_length=1, description="the question")
    k: int | None = Field(default=None, ge=1, description="candidates searched")
    strategy: StrategyName | None = None
    filters: list[str] = Field(default_factory=list, max_length=32, description=_FILTER_HELP)
    rerank: bool | None = None
    expand: Expand | None = None
    budget_tokens: int | None = Field(default=None, ge=1, description="evidence token budget")


class AclIn(_Request):
    public: bool = False
    allow: list[str] = Field(default_factory=list, max_length=1000)
    deny: list[str] = Field(default_factory=list, max_length=1000)


class DocumentIn(_Request):
    path: str = Field(
        min_length=1,
        max_length=4096,
        description="a file (or file:// URI) under one of ES_RAG_SERVE_INGEST_ROOTS",
    )
    doc_id: str | None = Field(default=None, min_length=1, max_length=512)
    doc_version: str | None = Field(default=None, max_length=256)
    metadata: dict[str, Any] = Field(default_factory=dict)
    acl: AclIn = Field(default_factory=AclIn)


class DocumentsRequest(_Request):
    documents: list[DocumentIn] = Field(min_length=1, max_length=1000)


# --- responses -------------------------------------------------------------------------------
# Search and context answer with es-rag's own dataclasses (``types.SearchResponse``,
# ``query.context.ContextResult``): one definition for the CLI, Python and the API.
class QueuedOut(BaseModel):
    doc_id: str
    path: str


class DocumentsResponse(BaseModel):
    tenant: str
    queued: list[QueuedOut]


class DeletedResponse(BaseModel):
    doc_id: str
    tenant: str
    deleted: int


class StatusResponse(BaseModel):
    tenant: str
    counts: dict[str, int]
    failed: list[dict[str, Any]]
    orphaned: list[dict[str, Any]]
    queue_depth: int | None = Field(default=None, description="admin keys only: all tenants")
    workers: int | None = Field(default=None, description="admin keys only")
    awaiting_redelivery: int | None = Field(default=None, description="admin keys only")


class ErrorDetail(BaseModel):
    type: str
    reason: str


class ErrorResponse(BaseModel):
    error: ErrorDetail
    status: int


class Readiness(BaseModel):
    ready: bool
    checks: dict[str, str]
