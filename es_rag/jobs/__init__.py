"""Queue jobs: typed payloads, what a worker does with one, and what senders and
operators do around the queue (DESIGN.md §8).

``workers/tasks.py`` only wires Celery to these functions (DESIGN.md §3): a task body
validates its payload, calls one function here and retries what raised a
``TransientError``. Everything an operator sees — the status row with error class,
attempts, retries, per-stage timings and worker, the payload kept for ``es-rag requeue`` —
is written here.
"""

from __future__ import annotations

from es_rag.jobs.operate import (
    FINAL,
    batches,
    enqueue,
    enqueue_files,
    enqueue_many,
    expire_stuck,
    live_worker_processes,
    plan_sync,
    send,
    status_report,
    wait_for,
)
from es_rag.jobs.payloads import (
    BATCH_TASK,
    INGEST_TASK,
    AclPayload,
    DocumentPayload,
    IngestPayload,
    tenant_of,
)
from es_rag.jobs.work import (
    BatchOutcome,
    hit_time_limit,
    is_transient,
    parse,
    record_failure,
    record_retry,
    run_batch,
    run_delete,
    run_ingest,
    run_update_acl,
    unchanged_file,
    worker_id,
)

__all__ = [
    "BATCH_TASK",
    "FINAL",
    "INGEST_TASK",
    "AclPayload",
    "BatchOutcome",
    "DocumentPayload",
    "IngestPayload",
    "batches",
    "enqueue",
    "enqueue_files",
    "enqueue_many",
    "expire_stuck",
    "hit_time_limit",
    "is_transient",
    "live_worker_processes",
    "parse",
    "plan_sync",
    "record_failure",
    "record_retry",
    "run_batch",
    "run_delete",
    "run_ingest",
    "run_update_acl",
    "send",
    "status_report",
    "tenant_of",
    "unchanged_file",
    "wait_for",
    "worker_id",
]
