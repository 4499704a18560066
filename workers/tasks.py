"""Thin Celery tasks: validate a typed payload, call es_rag.jobs, retry what is transient.

The Ingestor (search client, embedding model, analyzer) is created once per worker process,
on its first task, never at import: a prefork pool forks before any model is loaded.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

from celery import Task, current_app, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_process_init

from es_rag import jobs
from es_rag.config import Settings
from es_rag.engine.status import now_iso
from es_rag.pipeline import Ingestor

_ingestor: Ingestor | None = None


def settings_of(task: Task) -> Settings:
    """The settings of the app running the task (``es-rag worker`` flags included)."""
    settings: Settings = getattr(task.app.conf, "es_rag_settings", None) or Settings()
    return settings


def ingestor(task: Task) -> Ingestor:
    global _ingestor
    if _ingestor is None:
        _ingestor = Ingestor(settings_of(task))
    return _ingestor


@worker_process_init.connect
def _load_models(**_: Any) -> None:
    """Each prefork child loads its model once, at start, outside any task's time limit.

    (A solo worker loads on its first task; it enforces no time limits anyway.) The
    search client stays lazy: the server may be down now and up by the first task.
    """
    global _ingestor
    settings: Settings = getattr(current_app.conf, "es_rag_settings", None) or Settings()
    _ingestor = Ingestor(settings)
    _ingestor.embedder.embed(["warm-up"], kind="passage")
    _ingestor.analyzer.analyze("warm-up")


def _retry(task: Task, exc: Exception) -> Exception:
    """Exponential backoff with full jitter, capped; after the last retry the error stands."""
    settings = settings_of(task)
    cap = min(settings.task_retry_backoff_max, 2 ** (task.request.retries + 1))
    return task.retry(
        exc=exc, countdown=random.uniform(1, cap), max_retries=settings.task_max_retries
    )


@contextlib.contextmanager
def _retrying(task: Task) -> Iterator[None]:
    """A transient failure becomes a retry with backoff; any other fails the task."""
    try:
        yield
    except Exception as exc:
        if jobs.is_transient(exc):
            raise _retry(task, exc) from exc
        raise


def _run(
    task: Task, payload: jobs.IngestPayload, doc: jobs.DocumentPayload | None
) -> dict[str, Any]:
    try:
        with _retrying(task):
            result = jobs.run_ingest(
                ingestor(task),
                payload,
                attempt=task.request.retries + 1,
                task_id=task.request.id,
                doc=doc,
            )
    except SoftTimeLimitExceeded:
        ingestor(task).status.record(
            payload.key,
            "failed",
            payload=payload.model_dump(),
            attempts=task.request.retries + 1,
            worker=jobs.worker_id(),
            error_type="TimeoutError",
            error="timeout: the task hit its soft time limit",
            finished_at=now_iso(),
        )
        raise
    return result.to_dict()


@shared_task(name="es_rag.ingest", bind=True)
def ingest(self: Task, payload: dict[str, Any]) -> dict[str, Any]:
    """Read, chunk, embed and index one document (or, split, hand it to the embed queue)."""
    p = jobs.IngestPayload.model_validate(payload)
    settings = settings_of(self)
    if settings.embed_queue and settings.embed_queue != (settings.parse_queue or settings.queue):
        try:
            doc = jobs.parse(ingestor(self), p)
        except Exception as exc:
            if jobs.is_transient(exc):
                raise _retry(self, exc) from exc
            return jobs.run_ingest(ingestor(self), p, task_id=self.request.id).to_dict()
        index_document.delay(payload, doc.model_dump())
        return {"doc_id": p.key, "status": "parsed"}
    return _run(self, p, None)


@shared_task(name="es_rag.index_document", bind=True)
def index_document(self: Task, payload: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    """Embed and index a document parsed on the parse queue."""
    return _run(
        self,
        jobs.IngestPayload.model_validate(payload),
        jobs.DocumentPayload.model_validate(document),
    )


@shared_task(name="es_rag.delete", bind=True)
def delete(self: Task, doc_id: str) -> int:
    with _retrying(self):
        return jobs.run_delete(ingestor(self), doc_id)


@shared_task(name="es_rag.update_acl", bind=True)
def update_acl(self: Task, doc_id: str, acl: dict[str, Any]) -> int:
    """Rewrite access fields only: no parsing, no embedding."""
    with _retrying(self):
        return jobs.run_update_acl(ingestor(self), doc_id, jobs.AclPayload.model_validate(acl))


@shared_task(name="es_rag.sync_directory", bind=True)
def sync_directory(
    self: Task, folder: str, acl: dict[str, Any], metadata: dict[str, Any] | None = None
) -> dict[str, int]:
    """Enqueue every file of ``folder`` and delete documents whose files are gone."""
    with _retrying(self):
        payloads, gone = jobs.plan_sync(
            ingestor(self), folder, jobs.AclPayload.model_validate(acl), metadata
        )
    for p in payloads:
        jobs.enqueue(ingestor(self), self.app, p)
    for doc_id in gone:
        delete.delay(doc_id)
    return {"enqueued": len(payloads), "deleted": len(gone)}
