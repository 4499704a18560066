"""What a worker does with a payload, and how every step is recorded on the status row.

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
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from es_rag.engine.status import now_iso
from es_rag.errors import EsRagError, TransientError
from es_rag.files import load_document
from es_rag.jobs.payloads import AclPayload, DocumentPayload, IngestPayload, tenant_of
from es_rag.pipeline import Ingestor, error_outcome
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
        result = error_outcome(
            payload.key,
            exc,
            tenant=tenant,
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


@dataclass
class BatchOutcome:
    results: list[IngestResult]
    retry: list[IngestPayload] = field(default_factory=list)  # transient: send again


def run_batch(
    ingestor: Ingestor,
    payloads: list[IngestPayload],
    *,
    attempt: int = 1,
    max_attempts: int = 1,
    task_id: str | None = None,
    retry_in: float | None = None,
) -> BatchOutcome:
    """Ingest files sent together: one bulk of ``running`` rows, one stamp check (files
    unchanged since they were indexed are skipped unparsed), each file parsed in turn,
    then every document embedded and written together (``Ingestor.ingest_each``: one
    embedding stream sorted by length, one state request, one bulk stream), and one bulk
    of outcomes.

    A document's own permanent failure fails it alone. A transient one (its own, or the
    whole batch's, such as the search server going away mid-write) is recorded ``queued``
    and the document returned in ``retry`` before the last attempt, ``failed`` on it.
    Nothing here is acknowledged: the caller's message is, after this returns, so a worker
    killed mid-batch leaves the whole batch to be delivered again, and what it had written
    is then skipped as unchanged.
    """
    n = len(payloads)
    tenants = [tenant_of(ingestor, p) for p in payloads]
    started = now_iso()
    bases = [{**_base_fields(p, attempt, task_id), "started_at": started} for p in payloads]
    previous = [
        _retry_error(ingestor, t, p.key) if attempt > 1 else None
        for t, p in zip(tenants, payloads, strict=True)
    ]
    ingestor.status.record_many(
        [
            (t, p.key, "running", {**b, "retry_error": e})
            for t, p, b, e in zip(tenants, payloads, bases, previous, strict=True)
        ]
    )
    t0 = time.perf_counter()
    outcomes: list[IngestResult | EsRagError | None] = [None] * n
    parse_ms: dict[int, float] = {}
    try:
        for i, result in _unchanged(ingestor, payloads).items():
            outcomes[i] = result
        docs, at = [], []
        for i, p in enumerate(payloads):
            if outcomes[i] is not None:
                continue
            try:
                doc = parse(ingestor, p)
            except EsRagError as exc:
                if hit_time_limit(exc):
                    raise SoftTimeLimitExceeded(str(exc)) from exc
                outcomes[i] = exc
            else:
                parse_ms[i] = doc.parse_ms
                docs.append(doc.document)
                at.append(i)
        if docs:
            for i, out in zip(at, ingestor.ingest_each(docs), strict=True):
                outcomes[i] = out
    except EsRagError as exc:
        if hit_time_limit(exc):
            raise SoftTimeLimitExceeded(str(exc)) from exc
        # The whole batch's failure (a server gone mid-write) is each unfinished document's.
        for j, o in enumerate(outcomes):
            if o is None:
                outcomes[j] = exc
    total_ms = (time.perf_counter() - t0) * 1000.0
    retry_at = None
    if retry_in is not None:
        retry_at = (datetime.now(timezone.utc) + timedelta(seconds=retry_in)).isoformat()
    rows: list[tuple[str, str, str, dict[str, Any]]] = []
    results: list[IngestResult] = []
    retry: list[IngestPayload] = []
    for i, (p, outcome) in enumerate(zip(payloads, outcomes, strict=True)):
        assert outcome is not None
        out = outcome
        if isinstance(out, EsRagError) and is_transient(out) and attempt < max_attempts:
            fields = {**bases[i], "retry_error": f"{type(out).__name__}: {out}"}
            fields.update(started_at=None, retry_at=retry_at)
            rows.append((tenants[i], p.key, "queued", fields))
            retry.append(p)
            continue
        if isinstance(out, EsRagError):
            out = error_outcome(
                p.key,
                out,
                tenant=tenants[i],
                reason="retries-exhausted" if is_transient(out) else None,
            )
        timings = dict(out.timings_ms)
        if i in parse_ms:
            timings["parse"] = parse_ms[i]
        timings["total"] = total_ms  # the batch's: every document in it ends together
        rows.append(
            (
                tenants[i],
                p.key,
                out.status,
                {
                    **bases[i],
                    "retry_error": previous[i],
                    "reason": out.reason,
                    "error": out.error,
                    "error_type": out.error_type,
                    "chunks": out.chunks,
                    "deleted": out.deleted,
                    "timings_ms": timings,
                    "finished_at": now_iso(),
                },
            )
        )
        results.append(out)
    if retry:
        log.warning(
            "%d of %d document(s) in batch %s will be retried (attempt %d of %d)",
            len(retry),
            n,
            task_id,
            attempt,
            max_attempts,
        )
    ingestor.status.record_many(rows)
    return BatchOutcome(results, retry)


def _unchanged(ingestor: Ingestor, payloads: list[IngestPayload]) -> dict[int, IngestResult]:
    """Positions of files needing no parse (``Ingestor.unchanged_files``): one check per
    access group (a batch from one sender shares its ACL and metadata)."""
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(payloads):
        if p.doc_version is None:  # a versioned payload goes through its fence instead
            access = [p.tenant, p.public, p.allow, p.deny, p.metadata]
            groups.setdefault(json.dumps(access, sort_keys=True, default=str), []).append(i)
    out: dict[int, IngestResult] = {}
    case_sensitive = ingestor.settings.principal_case_sensitive
    for positions in groups.values():
        first = payloads[positions[0]]
        try:
            acl = first.acl(case_sensitive=case_sensitive)
        except EsRagError:
            continue  # each document's own ingest reports the ACL's problem
        files = [(payloads[i].file, payloads[i].key) for i in positions]
        found = ingestor.unchanged_files(files, acl=acl, metadata=first.metadata)
        for i in positions:
            if payloads[i].key in found:
                out[i] = found[payloads[i].key]
    return out


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
) -> IngestResult:
    """A permanent failure found before ingest ran (a parse on the split queue, a time
    limit): recorded from the error itself, never by doing the work a second time (an
    image with no words is recorded as skipped, as ``error_outcome`` has it)."""
    outcome = error_outcome(
        payload.key, exc, reason="retries-exhausted" if is_transient(exc) else None
    )
    ingestor.status.record(
        tenant_of(ingestor, payload),
        payload.key,
        outcome.status,
        **_base_fields(payload, attempt, task_id),
        error_type=(error_type or outcome.error_type) if outcome.status == "failed" else None,
        error=outcome.error,
        reason=outcome.reason,
        finished_at=now_iso(),
    )
    return outcome


def run_delete(ingestor: Ingestor, doc_id: str, tenant: str) -> int:
    return ingestor.delete_document(doc_id, tenant=tenant)


def run_update_acl(ingestor: Ingestor, doc_id: str, acl: AclPayload) -> int:
    return ingestor.update_acl(
        doc_id, acl.acl(case_sensitive=ingestor.settings.principal_case_sensitive), refresh=True
    )
