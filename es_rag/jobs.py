"""Queue jobs: typed payloads, and what a worker does with one (status rows included).

``workers/tasks.py`` only wires Celery to these functions (DESIGN.md §3): a task body
validates its payload, calls one function here and asks ``is_transient`` whether a failure
deserves a retry. Everything an operator sees — the status row with error class, attempts,
per-stage timings and worker, the payload kept for ``es-rag requeue`` — is written here.

Transient failures (search server unreachable or busy, Redis hiccups) raise for a retry and
leave the row ``running``→``queued`` with the attempt count; permanent ones (unsupported or
corrupt input, missing ACL, dimension mismatch, a blocked index) are recorded ``failed`` and
not retried.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from pydantic import BaseModel, Field

from es_rag.acl import make_acl
from es_rag.engine.status import now_iso
from es_rag.errors import EmbeddingError, EngineUnavailableError, EsRagError, InputError
from es_rag.pipeline import Ingestor, expand_paths, load_document
from es_rag.types import AccessControl, Document, Element, IngestResult

INGEST_TASK = "es_rag.ingest"


def worker_id() -> str:
    """host:pid of this process (read at call time: prefork children have their own pid)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class AclPayload(BaseModel):
    tenant: str
    public: bool = False
    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)

    def acl(self) -> AccessControl:
        return make_acl(self.tenant, allow=self.allow, deny=self.deny, public=self.public)


class IngestPayload(AclPayload):
    """One document to ingest: a path (or file:// URI) the worker can read, never bytes."""

    path: str
    doc_id: str | None = None
    doc_version: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def file(self) -> Path:
        return Path(self.path.removeprefix("file://"))

    @property
    def key(self) -> str:
        return self.doc_id or self.path


class DocumentPayload(BaseModel):
    """A parsed document on its way from the parse queue to the embed queue (JSON)."""

    doc_id: str
    text: str
    acl: AclPayload
    title: str | None = None
    source_uri: str | None = None
    mime_type: str = "text/plain"
    metadata: dict[str, Any] = Field(default_factory=dict)
    doc_version: str | None = None
    updated_at: str | None = None
    elements: list[dict[str, Any]] = Field(default_factory=list)
    parse_ms: float = 0.0

    @classmethod
    def of(cls, doc: Document, acl: AclPayload, *, parse_ms: float) -> DocumentPayload:
        fields = {k: getattr(doc, k) for k in cls.model_fields if k not in _NOT_COPIED}
        elements = [e.to_dict() for e in doc.elements]
        return cls(**fields, acl=acl, elements=elements, parse_ms=parse_ms)

    def document(self) -> Document:
        fields = {k: getattr(self, k) for k in type(self).model_fields if k not in _NOT_COPIED}
        elements = tuple(Element.from_dict(e) for e in self.elements)
        return Document(**fields, acl=self.acl.acl(), elements=elements)


_NOT_COPIED = frozenset({"acl", "elements", "parse_ms"})


def is_transient(exc: BaseException) -> bool:
    """Worth a retry: the server or broker may be back soon. Everything else is permanent."""
    if isinstance(exc, EngineUnavailableError):
        return True
    if isinstance(exc, EmbeddingError):
        return "unreachable" in str(exc) or "timed out" in str(exc)
    try:
        import redis

        return isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError)
    except ImportError:  # pragma: no cover - redis is a dependency
        return False


def hit_time_limit(exc: BaseException) -> bool:
    """A time-limit signal that a library wrapped in its own error on the way up."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, SoftTimeLimitExceeded):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def enqueue(ingestor: Ingestor, app: Any, payload: IngestPayload, *, retry: bool = True) -> None:
    """A ``queued`` status row first, then the task.

    In this order a fast worker's outcome is never overwritten by "queued". The sender
    does not subscribe to the result (``ignore_result``): outcomes are read from the
    status index, and a dead Redis then fails the send at once.
    """
    ingestor.status.record(
        payload.key, "queued", payload=payload.model_dump(), attempts=0, queued_at=now_iso()
    )
    app.send_task(INGEST_TASK, args=[payload.model_dump()], ignore_result=True, retry=retry)


def expire_stuck(ingestor: Ingestor) -> list[str]:
    """Rows ``running`` past the hard time limit (plus a minute) become failed: timeout."""
    return ingestor.status.expire(running_for_s=ingestor.settings.task_time_limit + 60)


def parse(ingestor: Ingestor, payload: IngestPayload) -> DocumentPayload:
    """Parse the file into a document (the CPU half of a split ingest)."""
    t0 = time.perf_counter()
    doc = load_document(
        payload.file,
        parser=ingestor.parser,
        acl=payload.acl(),
        doc_id=payload.key,
        metadata=payload.metadata,
    )
    doc.doc_version = payload.doc_version
    acl = AclPayload(**payload.model_dump(include={"tenant", "public", "allow", "deny"}))
    return DocumentPayload.of(doc, acl, parse_ms=(time.perf_counter() - t0) * 1000.0)


def run_ingest(
    ingestor: Ingestor,
    payload: IngestPayload,
    *,
    attempt: int = 1,
    task_id: str | None = None,
    doc: DocumentPayload | None = None,
) -> IngestResult:
    """Ingest one payload and record every step; raise only for a transient failure."""
    started = now_iso()
    base = {
        "payload": payload.model_dump(),
        "attempts": attempt,
        "worker": worker_id(),
        "task_id": task_id,
        "doc_version": payload.doc_version,
        "started_at": started,
    }
    ingestor.status.record(payload.key, "running", **base)
    t0 = time.perf_counter()
    document: DocumentPayload | None = doc
    try:
        if document is None:
            document = parse(ingestor, payload)
        result = ingestor.ingest(document.document())
    except EsRagError as exc:
        if hit_time_limit(exc):
            raise SoftTimeLimitExceeded(str(exc)) from exc  # not the model's fault
        if is_transient(exc):
            raise  # the caller retries; the row stays "running" with its attempt count
        result = IngestResult(
            doc_id=payload.key, status="failed", error=str(exc), error_type=type(exc).__name__
        )
    timings = dict(result.timings_ms)
    if document is not None:
        timings["parse"] = document.parse_ms
    timings["total"] = (time.perf_counter() - t0) * 1000.0
    ingestor.status.record(
        payload.key,
        result.status,
        **base,
        reason=result.reason,
        error=result.error,
        error_type=result.error_type,
        chunks=result.chunks,
        deleted=result.deleted,
        timings_ms=timings,
        finished_at=now_iso(),
    )
    return result


def run_delete(ingestor: Ingestor, doc_id: str) -> int:
    return ingestor.delete_document(doc_id)


def run_update_acl(ingestor: Ingestor, doc_id: str, acl: AclPayload) -> int:
    return ingestor.update_acl(doc_id, acl.acl(), refresh=True)


def plan_sync(
    ingestor: Ingestor, folder: str, acl: AclPayload, metadata: dict[str, Any] | None = None
) -> tuple[list[IngestPayload], list[str]]:
    """(files to enqueue, doc ids to delete) to make the index mirror ``folder``.

    Every supported file under ``folder`` is enqueued (an unchanged one costs one state
    check in the worker and is skipped); documents whose ids are paths under ``folder``
    but whose files are gone are deleted.
    """
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"{folder}: not a directory")
    payloads = [
        IngestPayload(path=str(path), metadata=dict(metadata or {}), **acl.model_dump())
        for path, problem in expand_paths([root])
        if problem is None
    ]
    present = {p.key for p in payloads}
    prefix = str(root).rstrip("/") + "/"
    if ingestor.index.exists():
        ingestor.index.refresh()  # documents indexed a moment ago must count as present
    indexed = ingestor.index.doc_ids(prefix=prefix)
    return payloads, sorted(d for d in indexed if d not in present)
