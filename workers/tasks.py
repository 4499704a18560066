"""Thin Celery tasks: validate a typed payload, call es_rag.jobs, retry what is transient.

The Ingestor (search client, embedding model, analyzer) is created once per worker process,
on its first task, never at import: a prefork pool forks before any model is loaded.

Retries: a ``TransientError`` (es_rag.errors) is retried with exponential backoff and full
jitter up to ``ES_RAG_TASK_MAX_RETRIES``; this is Celery's ``autoretry_for`` /
``retry_backoff`` / ``retry_jitter`` written out, because those are fixed when a task is
declared and es-rag reads its limits from the worker's settings.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Iterator
from typing import Any

from celery import Task, current_app, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_process_init

from es_rag import jobs
from es_rag.config import Settings
from es_rag.errors import EsRagError
from es_rag.pipeline import Ingestor

log = logging.getLogger(__name__)

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
    _ingestor.analyzer.analyze("warm-up")
    try:
        _ingestor.embedder.embed(["warm-up"], kind="passage")
        # on a GPU this measures the batch size (a few seconds), before any time limit runs
        _ingestor.embedder.effective_batch_size()
    except EsRagError as exc:
        # An embedding server that is down now must not kill the pool's children at
        # birth (they would be restarted in a loop); the first task retries it.
        log.warning("embedder warm-up failed, deferred to the first task: %s", exc)


def _countdown(task: Task) -> float:
    """Exponential backoff with full jitter, capped."""
    cap = min(settings_of(task).task_retry_backoff_max, 2 ** (task.request.retries + 1))
    return random.uniform(1, cap)


def _max_attempts(task: Task) -> int:
    return settings_of(task).task_max_retries + 1


def _retry(task: Task, exc: Exception, countdown: float | None = None) -> Exception:
    """A retry of this task; after the last one, the error stands."""
    return task.retry(
        exc=exc,
        countdown=_countdown(task) if countdown is None else countdown,
        max_retries=settings_of(task).task_max_retries,
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
    attempt = task.request.retries + 1
    countdown = _countdown(task)
    try:
        result = jobs.run_ingest(
            ingestor(task),
            payload,
            attempt=attempt,
            max_attempts=_max_attempts(task),
            task_id=task.request.id,
            doc=doc,
            retry_in=countdown,
        )
    except SoftTimeLimitExceeded as exc:
        _timed_out(task, payload, exc)
        raise
    except Exception as exc:
        if jobs.is_transient(exc):  # run_ingest raises only those, before the last attempt
            raise _retry(task, exc, countdown) from exc
        raise
    return result.to_dict()


def _timed_out(task: Task, payload: jobs.IngestPayload, exc: BaseException) -> None:
    limit = settings_of(task).task_soft_time_limit
    jobs.record_failure(
        ingestor(task),
        payload,
        TimeoutError(f"timeout: the task hit its soft time limit ({limit} s)"),
        attempt=task.request.retries + 1,
        task_id=task.request.id,
    )


@shared_task(name="es_rag.ingest", bind=True, ignore_result=True)
def ingest(self: Task, payload: dict[str, Any]) -> dict[str, Any]:
    """Read, chunk, embed and index one document (or, split, hand it to the embed queue)."""
    p = jobs.IngestPayload.model_validate(payload)
    settings = settings_of(self)
    if settings.embed_queue and settings.embed_queue != (settings.parse_queue or settings.queue):
        return _parse_then_hand_over(self, p, payload)
    return _run(self, p, None)


@shared_task(name="es_rag.ingest_batch", bind=True, ignore_result=True)
def ingest_batch(self: Task, payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """Ingest small files sent together (es_rag.jobs.run_batch): parsed one by one,
    embedded and written together. The message is acknowledged when this returns; the
    documents whose failure was transient are sent again as a smaller batch."""
    batch = [jobs.IngestPayload.model_validate(p) for p in payloads]
    countdown = _countdown(self)
    try:
        outcome = jobs.run_batch(
            ingestor(self),
            batch,
            attempt=self.request.retries + 1,
            max_attempts=_max_attempts(self),
            task_id=self.request.id,
            retry_in=countdown,
        )
    except SoftTimeLimitExceeded:
        return _batch_timed_out(self, batch)
    except Exception as exc:
        if jobs.is_transient(exc):  # the status index itself is away: all of it again
            raise _retry(self, exc, countdown) from exc
        raise
    if outcome.retry:
        raise self.retry(
            args=[[p.model_dump() for p in outcome.retry]],
            countdown=countdown,
            max_retries=settings_of(self).task_max_retries,
        )
    statuses: dict[str, int] = {}
    for r in outcome.results:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    return {"documents": len(batch), "statuses": statuses}


def _batch_timed_out(task: Task, batch: list[jobs.IngestPayload]) -> dict[str, Any]:
    """The batch reached its soft limit: every document goes back to the queue as a task
    of its own, with a time limit of its own. The file being parsed is not failed here: its
    batch's time is not its own, and alone it times out (and fails) only on its own time."""
    log.warning("batch %s reached its soft time limit: %d document(s) sent again one by one",
                task.request.id, len(batch))  # fmt: skip
    for p in batch:
        jobs.enqueue(ingestor(task), task.app, p)
    return {"documents": len(batch), "timed_out": True}


def _parse_then_hand_over(
    task: Task, p: jobs.IngestPayload, payload: dict[str, Any]
) -> dict[str, Any]:
    """The parse half of a split ingest. A failure here is recorded from the error itself:
    a file that timed out or could not be parsed is never parsed a second time."""
    attempt = task.request.retries + 1
    try:
        if jobs.unchanged_file(ingestor(task), p) is not None:
            return _run(task, p, None)  # recorded skipped here: nothing to parse or embed
        doc = jobs.parse(ingestor(task), p)
    except SoftTimeLimitExceeded as exc:
        _timed_out(task, p, exc)
        raise
    except Exception as exc:
        if jobs.hit_time_limit(exc):
            _timed_out(task, p, exc)
            raise SoftTimeLimitExceeded(str(exc)) from exc
        if jobs.is_transient(exc) and attempt < _max_attempts(task):
            countdown = _countdown(task)
            jobs.record_retry(
                ingestor(task), p, exc, attempt=attempt, task_id=task.request.id, delay=countdown
            )
            raise _retry(task, exc, countdown) from exc
        outcome = jobs.record_failure(
            ingestor(task), p, exc, attempt=attempt, task_id=task.request.id
        )
        return {"doc_id": p.key, "status": outcome.status, "error": outcome.error}
    with _retrying(task):
        jobs.send(task.app, "es_rag.index_document", [payload, doc.model_dump(mode="json")])
    return {"doc_id": p.key, "status": "parsed"}


@shared_task(name="es_rag.index_document", bind=True, ignore_result=True)
def index_document(self: Task, payload: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    """Embed and index a document parsed on the parse queue."""
    return _run(
        self,
        jobs.IngestPayload.model_validate(payload),
        jobs.DocumentPayload.model_validate(document),
    )


@shared_task(name="es_rag.delete", bind=True)
def delete(self: Task, doc_id: str, tenant: str) -> int:
    """Delete one tenant's document (never another tenant's document of the same id)."""
    with _retrying(self):
        return jobs.run_delete(ingestor(self), doc_id, tenant)


@shared_task(name="es_rag.update_acl", bind=True)
def update_acl(self: Task, doc_id: str, acl: dict[str, Any]) -> int:
    """Rewrite access fields only: no parsing, no embedding."""
    with _retrying(self):
        return jobs.run_update_acl(ingestor(self), doc_id, jobs.AclPayload.model_validate(acl))


@shared_task(name="es_rag.sync_directory", bind=True)
def sync_directory(
    self: Task, folder: str, acl: dict[str, Any], metadata: dict[str, Any] | None = None
) -> dict[str, int]:
    """Enqueue the new and changed files of ``folder`` (not the unchanged ones, nor those
    the worker's walk patterns leave out) and delete the tenant's documents whose files are
    gone."""
    acl_payload = jobs.AclPayload.model_validate(acl)
    with _retrying(self):
        plan = jobs.plan_sync(ingestor(self), folder, acl_payload, metadata)
        jobs.enqueue_many(ingestor(self), self.app, plan.enqueue)
        tenant = jobs.tenant_of(ingestor(self), acl_payload)
        for doc_id in plan.delete:
            jobs.send(self.app, "es_rag.delete", [doc_id, tenant])
    return {
        "enqueued": len(plan.enqueue),
        "unchanged": len(plan.unchanged),
        "deleted": len(plan.delete),
        "excluded": plan.excluded,
    }
