"""The Celery app: Redis broker and result backend from ``ES_RAG_REDIS_URL``.

    celery -A workers.app worker -Q es-rag --concurrency 2     (or: es-rag worker)

Every reliability setting below says why it is there. Settings are read from the
environment once, at import; no client or model is created here (see workers/tasks.py).
"""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from es_rag.config import Settings


def make_app(settings: Settings | None = None) -> Celery:
    s = settings or Settings()
    app = Celery("es_rag", broker=s.redis_url, backend=s.redis_url, include=["workers.tasks"])
    app.conf.update(
        # Acknowledge after the task ran, not when it was received: a worker that dies
        # mid-document (kill -9, OOM, node loss) leaves the message to be redelivered.
        task_acks_late=True,
        # ... and when the worker process is lost, reject (requeue) instead of acking.
        task_reject_on_worker_lost=True,
        # One message at a time per process: a long document never holds others hostage
        # in a prefetch buffer, and a crash redelivers at most one.
        worker_prefetch_multiplier=1,
        # The soft limit raises inside the task (recorded as failed: timeout); the hard
        # limit kills a task stuck in native code. Both are per task.
        task_soft_time_limit=s.task_soft_time_limit,
        task_time_limit=s.task_time_limit,
        # Redis redelivers an unacknowledged message after visibility_timeout: it must be
        # longer than the hard limit, or a slow but healthy task would run twice at once.
        broker_transport_options={
            "visibility_timeout": s.visibility_timeout or s.task_time_limit + 300
        },
        # Keep trying to reach Redis when it restarts instead of exiting.
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        task_default_queue=s.queue,
        task_queues=[Queue(name) for name in s.queues],
        task_routes={
            "es_rag.ingest": {"queue": s.parse_queue or s.queue},
            "es_rag.index_document": {"queue": s.embed_queue or s.queue},
        },
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_expires=24 * 3600,
        worker_hijack_root_logger=False,
    )
    app.conf.es_rag_settings = s
    return app


app = make_app()
