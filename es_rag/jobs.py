"""Queue jobs: typed payloads, and what a worker does with one (status rows included).

``workers/tasks.py`` only wires Celery to these functions (DESIGN.md §3): a task body
validates its payload, calls one function here and retries what raised a
``TransientError``. Everything an operator sees — the status row with error class,
attempts, retries, per-stage timings and worker, the payload kept for ``es-rag requeue`` —
is written here.

Transient failures (a ``TransientError``: search server, embedding server or broker down
or busy) leave the row ``queued`` with the retry counted and its cause, and raise for a
retry; on the last attempt they are recorded ``failed`` (``reason: retries-exhausted``,
requeue-able). Permanent ones (unsupported or corrupt input, missing ACL, dimension
mismatch, a blocked index) are recorded ``failed`` once and not retried.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from pydantic import BaseModel, Field

from es_rag.acl import make_acl, normalize_tenant
from es_rag.engine.status import now_iso
from es_rag.errors import (
    EsRagError,
    InputError,
    QueueUnavailableError,
    TransientError,
)
from es_rag.pipeline import Ingestor, expand_paths, load_document
from es_rag.types import AccessControl, Document, Element, IngestResult

INGEST_TASK = "es_rag.ingest"
log = logging.getLogger(__name__)


def worker_id() -> str:
    """host:pid of this process (read at call time: prefork children have their own pid)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class AclPayload(BaseModel):
    tenant: str
    public: bool = False
    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)

    def acl(self, *, case_sensitive: bool = False) -> AccessControl:
        return make_acl(
            self.tenant,
            allow=self.allow,
            deny=self.deny,
            public=self.public,
            case_sensitive=case_sensitive,
        )


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
        """The document id (the tenant is the other half of a document's identity)."""
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

    def document(self, *, case_sensitive: bool = False) -> Document:
        fields = {k: getattr(self, k) for k in type(self).model_fields if k not in _NOT_COPIED}
        elements = tuple(Element.from_dict(e) for e in self.elements)
        return Document(
            **fields, acl=self.acl.acl(case_sensitive=case_sensitive), elements=elements
        )


_NOT_COPIED = frozenset({"acl", "elements", "parse_ms"})


def is_transient(exc: BaseException) -> bool:
    """Worth a retry: decided by type, at the boundary where the fault happened.

    es-rag's clients raise ``TransientError`` subclasses; Celery itself may surface the
    broker's own connection errors, which are transient by nature.
    """
    if isinstance(exc, TransientError):
        return True
    try:
        import kombu.exceptions
        import redis

        broker = (
            redis.exceptions.ConnectionError,
            redis.exceptions.TimeoutError,
            kombu.exceptions.OperationalError,
        )
        return isinstance(exc, broker)
    except ImportError:  # pragma: no cover - both are dependencies
        return False


def hit_time_limit(exc: BaseException) -> bool:
    """A time-limit signal that a library wrapped in its own error on the way up."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, SoftTimeLimitExceeded):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def tenant_of(ingestor: Ingestor, payload: AclPayload) -> str:
    """The tenant as rows store it; a malformed one is kept as given so that its failure
    can still be recorded (the ACL check reports what is wrong with it)."""
    try:
        return normalize_tenant(
            payload.tenant, case_sensitive=ingestor.settings.principal_case_sensitive
        )
    except EsRagError:
        return payload.tenant


def send(app: Any, name: str, args: list[Any], **options: Any) -> None:
    """Send a task; a broker that cannot be reached is a ``QueueUnavailableError``."""
    import kombu.exceptions
    import redis

    try:
        app.send_task(name, args=args, **options)
    except (kombu.exceptions.OperationalError, redis.exceptions.RedisError, OSError) as exc:
        url = getattr(app.conf, "broker_url", "the broker")
        raise QueueUnavailableError(
            f"cannot enqueue {name}: Redis at {url} is unreachable ({type(exc).__name__}: {exc})"
        ) from exc


def enqueue(ingestor: Ingestor, app: Any, payload: IngestPayload, *, retry: bool = True) -> None:
    """A ``queued`` status row first, then the task.

    In this order a fast worker's outcome is never overwritten by "queued". The sender
    does not subscribe to the result (``ignore_result``): outcomes are read from the
    status index, and a dead Redis then fails the send at once.
    """
    ingestor.status.record(
        tenant_of(ingestor, payload),
        payload.key,
        "queued",
        payload=payload.model_dump(),
        attempts=0,
        queued_at=now_iso(),
    )
    send(app, INGEST_TASK, [payload.model_dump()], ignore_result=True, retry=retry)


def requeue_lost(
    ingestor: Ingestor, app: Any, client: Any, *, older_than_s: float, cap: int = 10_000
) -> int:
    """Send again the documents whose queue message was lost; returns how many.

    Redis's queue is at-most-once in one place: a worker pops a message and only then
    records it as taken, so a worker killed (or a Redis shut down) between the two loses
    it. The status index still says ``queued`` (or ``running`` on a worker that is gone)
    and keeps the payload. A document whose row has said so for ``older_than_s`` and whose
    message is nowhere in Redis (no queue, no worker's unacknowledged set) on two passes in
    a row, its row unchanged in between, is lost: it is enqueued again. Two passes, a
    lease apart, leave no room for a message in flight between a pop and its record.
    Skipped while more than ``cap`` messages wait (the backlog explains the waiting).
    """
    from es_rag.leases import Leases, _text, broker_payloads, live_processes

    payloads = broker_payloads(client, ingestor.settings.queues, cap=cap)
    if payloads is None:
        return 0
    present = set()
    for p in payloads:
        try:
            present.add(_key(ingestor, IngestPayload.model_validate(p)))
        except ValueError:
            continue
    status = ingestor.status
    status.refresh()
    before = (datetime.now(timezone.utc) - timedelta(seconds=older_than_s)).isoformat()
    alive = live_processes(Leases(client, lease_s=1).live())
    rows = status.rows(status="queued", before=before)
    rows += [
        r for r in status.rows(status="running", before=before) if r.get("worker") not in alive
    ]
    memory = f"es-rag:lost-suspects:{status.name}"  # Redis may serve several deployments
    suspects = {_text(k): _text(v) for k, v in client.hgetall(memory).items()}
    sent, seen = 0, set()
    for row in rows:
        raw = row.get("payload")
        if not raw:
            continue
        payload = IngestPayload.model_validate(raw)
        key = _key(ingestor, payload)
        if key in present:
            continue
        field = json.dumps(key)
        seen.add(field)
        if suspects.get(field) == row.get("updated_at"):
            enqueue(ingestor, app, payload)
            client.hdel(memory, field)
            sent += 1
        else:
            client.hset(memory, field, row.get("updated_at") or "")
    stale = [f for f in suspects if f not in seen]
    if stale:
        client.hdel(memory, *stale)
    return sent


def _key(ingestor: Ingestor, payload: IngestPayload) -> tuple[str, str]:
    return (tenant_of(ingestor, payload), payload.key)


def expire_stuck(ingestor: Ingestor) -> list[str]:
    """Rows ``running`` past the hard time limit (plus a minute) become failed: timeout."""
    return ingestor.status.expire(running_for_s=ingestor.settings.task_time_limit + 60)


def parse(ingestor: Ingestor, payload: IngestPayload) -> DocumentPayload:
    """Parse the file into a document (the CPU half of a split ingest)."""
    t0 = time.perf_counter()
    doc = load_document(
        payload.file,
        parser=ingestor.parser,
        acl=payload.acl(case_sensitive=ingestor.settings.principal_case_sensitive),
        doc_id=payload.key,
        metadata=payload.metadata,
    )
    doc.doc_version = payload.doc_version
    acl = AclPayload(**payload.model_dump(include={"tenant", "public", "allow", "deny"}))
    return DocumentPayload.of(doc, acl, parse_ms=(time.perf_counter() - t0) * 1000.0)


def _base_fields(payload: IngestPayload, attempt: int, task_id: str | None) -> dict[str, Any]:
    return {
        "payload": payload.model_dump(),
        "attempts": attempt,
        "retries": attempt - 1,
        "worker": worker_id(),
        "task_id": task_id,
        "doc_version": payload.doc_version,
    }


def run_ingest(
    ingestor: Ingestor,
    payload: IngestPayload,
    *,
    attempt: int = 1,
    max_attempts: int = 1,
    task_id: str | None = None,
    doc: DocumentPayload | None = None,
    retry_in: float | None = None,
) -> IngestResult:
    """Ingest one payload and record every step.

    Raises only a ``TransientError`` before the last attempt (the caller retries, in
    ``retry_in`` seconds if it says so); on the last attempt a transient failure is
    recorded as failed like any other.
    """
    tenant = tenant_of(ingestor, payload)
    base = {**_base_fields(payload, attempt, task_id), "started_at": now_iso()}
    previous = _retry_error(ingestor, tenant, payload.key) if attempt > 1 else None
    ingestor.status.record(tenant, payload.key, "running", retry_error=previous, **base)
    t0 = time.perf_counter()
    document: DocumentPayload | None = doc
    case_sensitive = ingestor.settings.principal_case_sensitive
    try:
        if document is None:
            document = parse(ingestor, payload)
        result = ingestor.ingest(document.document(case_sensitive=case_sensitive))
    except EsRagError as exc:
        if hit_time_limit(exc):
            raise SoftTimeLimitExceeded(str(exc)) from exc  # not the model's fault
        if is_transient(exc) and attempt < max_attempts:
            record_retry(ingestor, payload, exc, attempt=attempt, task_id=task_id, delay=retry_in)
            raise
        result = IngestResult(
            doc_id=payload.key,
            tenant=tenant,
            status="failed",
            error=str(exc),
            error_type=type(exc).__name__,
            reason="retries-exhausted" if is_transient(exc) else None,
        )
    timings = dict(result.timings_ms)
    if document is not None:
        timings["parse"] = document.parse_ms
    timings["total"] = (time.perf_counter() - t0) * 1000.0
    ingestor.status.record(
        tenant,
        payload.key,
        result.status,
        **base,
        retry_error=previous,
        reason=result.reason,
        error=result.error,
        error_type=result.error_type,
        chunks=result.chunks,
        deleted=result.deleted,
        timings_ms=timings,
        finished_at=now_iso(),
    )
    return result


def _retry_error(ingestor: Ingestor, tenant: str, doc_id: str) -> str | None:
    """The transient error that caused this retry, kept on the row once it succeeds."""
    try:
        row = ingestor.status.get(tenant, doc_id)
    except EsRagError:
        return None
    return row.get("retry_error") if row else None


def record_retry(
    ingestor: Ingestor,
    payload: IngestPayload,
    exc: BaseException,
    *,
    attempt: int,
    task_id: str | None,
    delay: float | None = None,
) -> None:
    """Back to ``queued`` with the retry counted and its cause; best effort, because the
    fault being retried may be the search server that holds the status index."""
    retry_at = None
    if delay is not None:
        retry_at = (datetime.now(timezone.utc) + timedelta(seconds=delay)).isoformat()
    try:
        ingestor.status.record(
            tenant_of(ingestor, payload),
            payload.key,
            "queued",
            **_base_fields(payload, attempt, task_id),
            retry_error=f"{type(exc).__name__}: {exc}",
            retry_at=retry_at,
        )
    except EsRagError as err:
        log.warning("could not record the retry of %s: %s", payload.key, err)


def record_failure(
    ingestor: Ingestor,
    payload: IngestPayload,
    exc: BaseException,
    *,
    attempt: int,
    task_id: str | None,
    error_type: str | None = None,
) -> None:
    """A permanent failure found before ingest ran (a parse on the split queue, a time
    limit): recorded from the error itself, never by doing the work a second time."""
    ingestor.status.record(
        tenant_of(ingestor, payload),
        payload.key,
        "failed",
        **_base_fields(payload, attempt, task_id),
        error_type=error_type or type(exc).__name__,
        error=str(exc),
        reason="retries-exhausted" if is_transient(exc) else None,
        finished_at=now_iso(),
    )


def run_delete(ingestor: Ingestor, doc_id: str, tenant: str) -> int:
    return ingestor.delete_document(doc_id, tenant=tenant)


def run_update_acl(ingestor: Ingestor, doc_id: str, acl: AclPayload) -> int:
    return ingestor.update_acl(
        doc_id, acl.acl(case_sensitive=ingestor.settings.principal_case_sensitive), refresh=True
    )


def plan_sync(
    ingestor: Ingestor, folder: str, acl: AclPayload, metadata: dict[str, Any] | None = None
) -> tuple[list[IngestPayload], list[str]]:
    """(files to enqueue, doc ids to delete) to make the tenant's index mirror ``folder``.

    Every supported file under ``folder`` is enqueued (an unchanged one costs one state
    check in the worker and is skipped); the tenant's documents whose ids are paths under
    ``folder`` but whose files are gone are deleted. Other tenants' documents are never
    listed, whatever their ids.
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
    indexed = ingestor.index.doc_ids(tenant=tenant_of(ingestor, acl), prefix=prefix)
    return payloads, sorted(d for d in indexed if d not in present)
