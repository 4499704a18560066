"""What senders and operators do: enqueue, wait for outcomes, read the queue's state,
and plan a directory sync.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from es_rag.config import Settings
from es_rag.engine.status import now_iso
from es_rag.errors import InputError, QueueUnavailableError
from es_rag.files import FolderResolver, Listed, WalkFilter, expand_paths
from es_rag.jobs.payloads import BATCH_TASK, INGEST_TASK, AclPayload, IngestPayload, tenant_of
from es_rag.pipeline import Ingestor


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


FINAL = ("indexed", "skipped", "failed")


UNKNOWN_WORKERS_BATCH = (64, 64 * 1024)  # files, bytes: batches when no worker is live


def batches(
    settings: Settings, payloads: list[IngestPayload], *, processes: int | None = None
) -> list[list[IngestPayload]]:
    """How payloads travel: small files together (one ``es_rag.ingest_batch`` message a
    batch), a file larger than ``queue_batch_file_kb`` (or than a whole batch) alone.

    A batch is embedded in one call and written in one bulk stream, and the fewer and
    larger the batches, the closer a worker runs to the embedding rate: 600 one-chunk
    files through one worker ran at 0.67-0.70 of it in batches of 64 and at 0.69-0.92 in
    two batches of 300 (scripts/bench_queue.py, on a noisy two-core machine). But every
    live worker process must get work: ``processes`` (the live worker processes on this
    queue) times ``queue_batch_spread`` batches of about equal bytes, within the
    ``queue_batch_docs`` and ``queue_batch_kb`` caps. When no worker is live (None or 0)
    the sender cannot know how many will share the work, so batches stay small
    (``UNKNOWN_WORKERS_BATCH``).

    A split deployment (parse queue, embed queue) sends one document a message: its two
    halves hand documents over one by one.
    """
    s = settings
    split = bool(s.embed_queue) and s.embed_queue != (s.parse_queue or s.queue)
    size, cap = (1 if split else s.queue_batch_docs), s.queue_batch_kb * 1024
    alone_over = min(s.queue_batch_file_kb * 1024, cap)
    sized: list[tuple[IngestPayload, int]] = []
    alone: list[list[IngestPayload]] = []
    for p in payloads:
        try:
            nbytes = p.file.stat().st_size
        except OSError:
            nbytes = 0  # the worker reports why it cannot be read, cheaply
        if size == 1 or nbytes > alone_over:
            alone.append([p])
        else:
            sized.append((p, nbytes))
    groups = [sized]
    if sized and s.queue_batch_spread > 0 and processes:
        groups = _spread(sized, processes * s.queue_batch_spread, size=size, cap=cap)
    elif sized and s.queue_batch_spread > 0:
        size, cap = min(size, UNKNOWN_WORKERS_BATCH[0]), min(cap, UNKNOWN_WORKERS_BATCH[1])
    out: list[list[IngestPayload]] = []
    for group in groups:  # each within the caps, a batch closing before it passes one
        batch: list[IngestPayload] = []
        held = 0
        for p, nbytes in group:
            if batch and (len(batch) == size or held + nbytes > cap):
                out.append(batch)
                batch, held = [], 0
            batch.append(p)
            held += nbytes
        if batch:
            out.append(batch)
    return out + alone


def _spread(
    sized: list[tuple[IngestPayload, int]], parts: int, *, size: int, cap: int
) -> list[list[tuple[IngestPayload, int]]]:
    """``sized`` cut, in order, into ``parts`` groups of about equal bytes (more where the
    caps need it): each file goes to the group its bytes' midpoint falls in."""
    total_bytes = sum(n for _, n in sized)
    count = max(parts, math.ceil(len(sized) / size), math.ceil(total_bytes / max(cap, 1)))
    count = min(count, len(sized))
    weight = total_bytes + len(sized)  # a byte more per file: empty files count too
    groups: list[list[tuple[IngestPayload, int]]] = [[] for _ in range(count)]
    before = 0
    for item in sized:
        share = item[1] + 1
        groups[min(count - 1, int((before + share / 2) * count / weight))].append(item)
        before += share
    return [g for g in groups if g]


def live_worker_processes(settings: Settings) -> int | None:
    """How many live worker processes take ingest tasks (a prefork worker's pool
    processes, a solo worker's one); None when Redis cannot say."""
    import redis

    from es_rag.leases import Leases

    queue = settings.parse_queue or settings.queue
    try:
        client = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
        try:
            live = Leases(client, lease_s=settings.worker_lease_seconds).live()
        finally:
            client.close()
    except (redis.exceptions.RedisError, ValueError):
        return None
    count = 0
    for info in live.values():
        if queue in info.get("queues", []):
            # the consumer process and its pool's processes (a solo pool: itself)
            count += max(1, len(info.get("pids", [])) - 1)
    return count


def enqueue_many(
    ingestor: Ingestor, app: Any, payloads: list[IngestPayload], *, retry: bool = True
) -> int:
    """``enqueue`` for many documents: small files travel together (``batches``), each
    message after one bulk of its documents' ``queued`` rows. Returns how many were sent.

    A dead broker fails at the first send: that message's documents are recorded
    ``failed`` (requeue-able) and the error says how many went before them.
    """
    sent = 0
    settings = ingestor.settings
    several = len(payloads) > 1 and settings.queue_batch_spread > 0
    processes = live_worker_processes(settings) if several else None
    for group in batches(settings, payloads, processes=processes):
        rows = [
            (
                tenant_of(ingestor, p),
                p.key,
                "queued",
                {"payload": p.model_dump(), "attempts": 0, "queued_at": now_iso()},
            )
            for p in group
        ]
        ingestor.status.record_many(rows)
        try:
            if len(group) == 1:
                send(app, INGEST_TASK, [group[0].model_dump()], ignore_result=True, retry=retry)
            else:
                args = [[p.model_dump() for p in group]]
                send(app, BATCH_TASK, args, ignore_result=True, retry=retry)
        except QueueUnavailableError as exc:
            failed = [
                (t, key, "failed", {**f, "error_type": type(exc).__name__, "error": str(exc)})
                for t, key, _, f in rows
            ]
            ingestor.status.record_many(failed)
            raise QueueUnavailableError(
                f"cannot enqueue: Redis at {ingestor.settings.redis_url} is unreachable; "
                f"{sent} document(s) were queued before it failed"
            ) from exc
        sent += len(group)
    return sent


def enqueue_files(
    ingestor: Ingestor,
    app: Any,
    files: list[Listed],
    acl: AclPayload,
    *,
    doc_id: str | None = None,
    doc_version: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> tuple[list[str], list[dict[str, Any]]]:
    """(doc ids queued, final rows of the files not queued: failed, those that cannot be
    read; skipped, those a walk left out); small files travel together (``enqueue_many``),
    and a dead broker is a ``QueueUnavailableError``."""
    payloads: list[IngestPayload] = []
    not_queued: list[dict[str, Any]] = []
    resolve = FolderResolver()
    for path, problem, excluded in files:
        key = doc_id or str(path)
        if excluded:
            not_queued.append(
                {"doc_id": key, "status": "skipped", "reason": "excluded", "attempts": 0}
            )
            continue
        if problem:
            not_queued.append({"doc_id": key, "status": "failed", "error": problem, "attempts": 0})
            continue
        payloads.append(
            IngestPayload(
                path=str(resolve(path)),
                doc_id=key,
                doc_version=doc_version,
                metadata=dict(metadata or {}),
                **acl.model_dump(),
            )
        )
    enqueue_many(ingestor, app, payloads, retry=False)
    return [p.key for p in payloads], not_queued


def wait_for(
    ingestor: Ingestor,
    keys: list[str],
    *,
    tenant: str,
    timeout: float,
    on_final: Callable[[dict[str, Any]], None] | None = None,
    poll: float = 0.5,
) -> dict[str, dict[str, Any]]:
    """Follow the status index (every ``poll`` seconds) until every document of ``keys``
    has a final row.

    Raises ``TimeoutError`` after ``timeout`` seconds. Rows running past the hard time
    limit are expired on the way (every 30 s: they are minutes old anyway). At the end
    the chunk index is refreshed, as an inline ingest ends: a search right after the wait
    finds what the workers wrote (they do not refresh after each batch).
    """
    status = ingestor.status
    done: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    next_expiry = 0.0
    while len(done) < len(keys):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"gave up waiting after {timeout:g} s: {len(keys) - len(done)} document(s) not "
                "finished (is a worker running? `es-rag worker`); see `es-rag status`"
            )
        time.sleep(poll)
        status.refresh()
        if time.monotonic() >= next_expiry:
            expire_stuck(ingestor)
            next_expiry = time.monotonic() + 30.0
        pending = [k for k in keys if k not in done]
        for row in status.rows(doc_ids=pending[:1000], tenant=tenant):
            if row["status"] in FINAL and row["doc_id"] not in done:
                done[row["doc_id"]] = row
                if on_final is not None:
                    on_final(row)
    if done:
        ingestor.index.refresh()
    return done


def status_report(
    ingestor: Ingestor, *, tenant: str | None = None, limit: int = 50
) -> dict[str, Any]:
    """What ``es-rag status`` shows: queue depth, live workers, counts per status, failed
    rows, rows orphaned on dead workers, and messages awaiting redelivery."""
    import redis

    from es_rag.leases import Leases, live_processes, unclaimed

    settings = ingestor.settings
    st = ingestor.status
    expire_stuck(ingestor)
    st.refresh()
    counts = st.counts(tenant=tenant)
    failed = [
        {
            "tenant": r.get("tenant_id"),
            "doc_id": r["doc_id"],
            "error_type": r.get("error_type"),
            "error": r.get("error"),
            "reason": r.get("reason"),
            "attempts": r.get("attempts"),
        }
        for r in st.rows(status="failed", tenant=tenant)[:limit]
    ]
    try:
        client = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
        depth = sum(int(client.llen(q)) for q in settings.queues)
        leases = Leases(client, lease_s=settings.worker_lease_seconds)
        live = leases.live()
        awaiting = sum(len(leases.held_by(w)) for w in leases.workers() if w not in live)
        lease_s = settings.worker_lease_seconds
        awaiting += len(unclaimed(client, settings.queues, older_than_s=2 * lease_s))
    except redis.exceptions.RedisError as exc:
        raise QueueUnavailableError(f"Redis at {settings.redis_url} unreachable ({exc})") from exc
    alive = live_processes(live)
    orphaned = [
        {
            "tenant": r.get("tenant_id"),
            "doc_id": r["doc_id"],
            "worker": r.get("worker"),
            "started_at": r.get("started_at"),
        }
        for r in st.rows(status="running", tenant=tenant)
        if r.get("worker") not in alive
    ]
    return {
        "queue_depth": depth,
        "workers": len(live),
        "counts": counts,
        "failed": failed,
        "orphaned": orphaned,
        "awaiting_redelivery": awaiting,
    }


def expire_stuck(ingestor: Ingestor) -> list[str]:
    """Rows ``running`` past the hard time limit (plus a minute) become failed: timeout."""
    return ingestor.status.expire(running_for_s=ingestor.settings.task_time_limit + 60)


@dataclass
class SyncPlan:
    """What makes the tenant's index mirror a folder (``plan_sync``)."""

    enqueue: list[IngestPayload]  # new or changed files
    unchanged: list[str]  # files whose rows are whole and from the same bytes: left alone
    delete: list[str]  # doc ids under the folder whose files are gone
    excluded: int = 0  # files and folders the walk left out (WalkFilter)


def plan_sync(
    ingestor: Ingestor, folder: str, acl: AclPayload, metadata: dict[str, Any] | None = None
) -> SyncPlan:
    """The files to enqueue and the doc ids to delete to make the tenant's index mirror
    ``folder``.

    A file whose rows are whole and were written from the same bytes, with this ACL and
    metadata, is not enqueued (``Ingestor.unchanged_files``: a stat, and one state request
    per 1,000 files), so a folder where one file changed enqueues that file only; the
    tenant's documents whose ids are paths under ``folder`` but whose files are gone are
    deleted. Other tenants' documents are never listed, whatever their ids.
    """
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"{folder}: not a directory")
    listed = list(expand_paths([root], WalkFilter.of(ingestor.settings)))
    payloads = [
        IngestPayload(path=str(f.path), metadata=dict(metadata or {}), **acl.model_dump())
        for f in listed
        if f.to_read
    ]
    excluded = sum(1 for f in listed if f.excluded)
    present = {p.key for p in payloads}
    prefix = str(root).rstrip("/") + "/"
    if not ingestor.index.exists():
        return SyncPlan(payloads, [], [], excluded)
    ingestor.index.refresh()  # documents indexed a moment ago must count as present
    indexed = ingestor.index.doc_ids(tenant=tenant_of(ingestor, acl), prefix=prefix)
    files = [(p.file, p.key) for p in payloads]
    caller_acl = acl.acl(case_sensitive=ingestor.settings.principal_case_sensitive)
    unchanged = ingestor.unchanged_files(files, acl=caller_acl, metadata=metadata)
    return SyncPlan(
        [p for p in payloads if p.key not in unchanged],
        sorted(unchanged),
        sorted(d for d in indexed if d not in present),
        excluded,
    )
