"""Commands around the queue: worker, status, requeue (ingest --queue is in documents)."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from es_rag.cli import render
from es_rag.cli.common import fail, ingest_streams, math_threads, run, settings_of, tenant_of

OnlyTenant = Annotated[str | None, typer.Option(help="only this tenant's documents")]


def worker(
    ctx: typer.Context,
    concurrency: Annotated[int, typer.Option(help="worker processes (or threads)")] = 1,
    pool: Annotated[str, typer.Option(help="prefork | solo | threads")] = "prefork",
    queues: Annotated[
        str | None, typer.Option("-Q", "--queues", help="comma list (default: ES_RAG_QUEUE)")
    ] = None,
    loglevel: Annotated[str, typer.Option(help="celery log level")] = "INFO",
) -> None:
    """Run a Celery worker of es-rag's app (same as `celery -A workers.app worker`)."""
    from workers.app import make_app

    if pool not in ("prefork", "solo", "threads"):
        fail(f"--pool must be prefork, solo or threads, not {pool!r}")
    settings = settings_of(ctx)
    # Each process runs its own model: without a cap, N processes x all cores of math
    # threads thrash. OMP_NUM_THREADS set by the user wins.
    threads = max(1, (os.cpu_count() or 1) // (concurrency if pool == "prefork" else 1))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    # Not in a thread pool, whose tasks already share the threads.
    settings = ingest_streams(settings, math_threads(default=1) if pool != "threads" else 1)
    celery_app = make_app(settings)
    import workers.tasks  # noqa: F401  (registers the tasks on the default app's name)

    names = queues or ",".join(settings.queues)
    celery_app.worker_main(
        [
            "worker",
            f"--concurrency={concurrency}",
            f"--pool={pool}",
            "-Q",
            names,
            f"--loglevel={loglevel}",
        ]
    )


def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    limit: Annotated[int, typer.Option(help="failed documents listed")] = 50,
    tenant: OnlyTenant = None,
) -> None:
    """Queue depth, live workers, documents per status; failed and orphaned ones listed.

    A ``running`` row whose worker holds no lease any more is *orphaned*: its worker died,
    and a live worker hands its task back to the queue within a lease.
    """
    from es_rag import jobs
    from es_rag.pipeline import Ingestor

    settings = settings_of(ctx)
    ingestor = Ingestor(settings)
    owner = tenant_of(settings, tenant)
    report = run(lambda: jobs.status_report(ingestor, tenant=owner, limit=limit))
    if as_json:
        typer.echo(json.dumps(report, ensure_ascii=False))
    else:
        lease = settings.worker_lease_seconds
        typer.echo(render.status_text(report, queues=settings.queues, lease_s=lease))


def requeue(
    ctx: typer.Context,
    failed: Annotated[bool, typer.Option("--failed", help="requeue failed documents")] = False,
    since: Annotated[
        str | None, typer.Option(help="only those failed since (date or date math: now-1h)")
    ] = None,
    tenant: OnlyTenant = None,
) -> None:
    """Send failed documents back to the queue with their original payload."""
    from es_rag import jobs
    from es_rag.pipeline import Ingestor
    from workers.app import make_app

    if not failed:
        fail("nothing to requeue: pass --failed")
    settings = settings_of(ctx)
    ingestor = Ingestor(settings)
    celery_app = make_app(settings)
    owner = tenant_of(settings, tenant)
    run(ingestor.status.refresh)
    rows = run(lambda: ingestor.status.rows(status="failed", since=since, tenant=owner))
    payloads = [jobs.IngestPayload.model_validate(r["payload"]) for r in rows if r.get("payload")]
    run(lambda: jobs.enqueue_many(ingestor, celery_app, payloads))
    typer.echo(json.dumps({"requeued": [p.key for p in payloads]}, ensure_ascii=False))
