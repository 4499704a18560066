"""The Celery app: Redis broker and result backend from ``ES_RAG_REDIS_URL``.

    celery -A workers.app worker -Q es-rag --concurrency 2     (or: es-rag worker)

Every reliability setting below says why it is there. Settings are read from the
environment once, at import; no model is created here (see workers/tasks.py), and the one
Redis client below belongs to a worker's lease, made when the worker starts.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery, bootsteps
from celery.signals import task_received, worker_init, worker_shutdown
from kombu import Queue

from es_rag.config import Settings

log = logging.getLogger(__name__)


class LeaseStep(bootsteps.StartStopStep):
    """Keeps this worker's lease in Redis and hands dead workers' tasks back (es_rag.leases).

    Started once with the consumer and kept across broker reconnections (a reconnection
    stops and restarts consumer steps); given up at shutdown.
    """

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.keeper: Any = None

    def start(self, c: Any) -> None:
        if self.keeper is not None:
            return
        import redis

        from es_rag.leases import LeaseKeeper, Leases, new_worker_id

        settings: Settings = getattr(c.app.conf, "es_rag_settings", None) or Settings()
        client = redis.Redis.from_url(
            settings.redis_url, socket_timeout=5, socket_connect_timeout=5
        )

        def qos() -> Any:
            consumer = getattr(c, "task_consumer", None)
            return consumer.channel.qos if consumer is not None else None

        def held_tags() -> list[str]:
            q = qos()
            return list(q._delivered) if q is not None else []

        def pids() -> list[int]:
            info = getattr(c.pool, "info", None) or {}
            return [os.getpid(), *info.get("processes", [])]

        def restore(tag: str) -> None:
            q = qos()
            if q is None:
                raise RuntimeError("no broker channel to restore on")
            q.restore_by_tag(tag)

        parts: dict[str, Any] = {}

        def reconcile() -> int:
            """Messages taken by a worker that died before its lease named them go back to
            their queues; documents whose message Redis lost are sent again (es_rag.leases)."""
            from es_rag.leases import requeue_lost, restore_unclaimed
            from es_rag.pipeline import Ingestor

            q = qos()
            if q is not None:
                restored = restore_unclaimed(
                    client,
                    settings.queues,
                    restore,
                    older_than_s=2 * settings.worker_lease_seconds,
                    unacked_key=q.unacked_key,
                    index_key=q.unacked_index_key,
                )
                if restored:
                    log.warning("%d message(s) held by no live worker handed back", restored)
            if "ingestor" not in parts:
                parts["ingestor"] = Ingestor(settings)
            ingestor = parts["ingestor"]
            lost_after = 4 * settings.worker_lease_seconds
            return requeue_lost(ingestor, c.app, client, older_than_s=lost_after)

        self.keeper = LeaseKeeper(
            Leases(client, lease_s=settings.worker_lease_seconds),
            worker=new_worker_id(),
            held_tags=held_tags,
            pids=pids,
            restore=restore,
            queues=settings.queues,
            reconcile=reconcile,
        )
        c.es_rag_lease_keeper = self.keeper
        self.keeper.start()

    def stop(self, c: Any) -> None:
        """A reconnection, not a shutdown: the lease lives on."""

    def shutdown(self, c: Any) -> None:
        if self.keeper is not None:
            self.keeper.stop()
            self.keeper = None


_parse_server: Any = None


@worker_init.connect
def _share_the_parse_server(sender: Any = None, **_: Any) -> None:
    """A worker of several processes starts one parse server for all of them, before its
    pool forks (es_rag.sandbox.SharedServer): about 1 GB of parsers held once, not once
    per process. A solo worker has one process, and its parser starts its own."""
    global _parse_server
    settings: Settings = getattr(sender.app.conf, "es_rag_settings", None) or Settings()
    pool = getattr(sender, "pool_cls", None)
    name = pool if isinstance(pool, str) else getattr(pool, "__module__", "") or ""
    if not settings.parse_shared_server or "solo" in name or sender.concurrency == 1:
        return
    from es_rag.parsing import start_shared_server

    try:
        _parse_server = start_shared_server()
    except (OSError, RuntimeError) as exc:  # each process then starts its own, as before
        log.warning("no shared parse server: %s", exc)


@worker_shutdown.connect
def _stop_the_parse_server(**_: Any) -> None:
    global _parse_server
    if _parse_server is not None:
        _parse_server.stop()
        _parse_server = None


@task_received.connect
def _renew_now(sender: Any = None, **_: Any) -> None:
    """A message was just taken: renew at once, so the lease names it before anything can
    kill this worker (otherwise the visibility timeout is its only way back)."""
    keeper = getattr(sender, "es_rag_lease_keeper", None)
    if keeper is not None:
        keeper.wake.set()


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
        # It is only the fallback: a dead worker's messages come back within a lease
        # (worker_lease_seconds, LeaseStep) when any other worker is alive to notice.
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
            "es_rag.ingest_batch": {"queue": s.parse_queue or s.queue},
            "es_rag.index_document": {"queue": s.embed_queue or s.queue},
        },
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_expires=24 * 3600,
        worker_hijack_root_logger=False,
    )
    app.conf.es_rag_settings = s
    app.steps["consumer"].add(LeaseStep)
    return app


app = make_app()
