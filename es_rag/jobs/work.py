"""What a worker does with a payload, and how every step is recorded on the status row.

Transient failures (a ``TransientError``: search server, embedding server or broker down
or busy) leave the row ``queued`` with the retry counted and its cause, and raise for a
retry; on the last attempt they are recorded ``failed`` (``reason: retries-exhausted``,
requeue-able). Permanent ones (unsupported or corrupt input, missing ACL, dimension
mismatch, a blocked index) are recorded ``failed`` once and not retried.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from es_rag.engine.status import now_iso
from es_rag.errors import EsRagError, TransientError
from es_rag.files import load_document
from es_rag.jobs.payloads import AclPayload, DocumentPayload, IngestPayload, tenant_of
from es_rag.pipeline import Ingestor
from es_rag.types import IngestResult

log = logging.getLogger(__name__)


def worker_id() -> str:
    """host:pid of this process (read at call time: prefork children have their own pid)."""
    return f"{socket.gethostname()}:{os.getpid()}"


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
    return DocumentPayload(document=doc, parse_ms=(time.perf_counter() - t0) * 1000.0)


def unchanged_file(ingestor: Ingestor, payload: IngestPayload) -> IngestResult | None:
    """The skipped result of a file that needs no parse (``Ingestor.unchanged_files``);
    a versioned payload always goes through its version fence instead."""
    if payload.doc_version is not None:
        return None
    acl = payload.acl(case_sensitive=ingestor.settings.principal_case_sensitive)
    files = [(payload.file, payload.key)]
    return ingestor.unchanged_files(files, acl=acl, metadata=payload.metadata).get(payload.key)


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
    try:
        result = None if document is not None else unchanged_file(ingestor, payload)
        if result is None:
            if document is None:
                document = parse(ingestor, payload)
            result = ingestor.ingest(document.document)
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
