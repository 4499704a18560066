"""Worker leases: a dead worker's tasks go back to the queue within a lease; a live one's never.

Redis redelivers an unacknowledged message only after the broker's visibility timeout,
which must outlast the longest task (the hard time limit plus a margin: 20 minutes by
default). So a worker killed with SIGKILL, or a host that vanished, leaves the task it was
running *and* the tasks it had reserved waiting that long while other workers sit idle.

Each worker's consumer process therefore keeps a lease in Redis while it lives:

- ``es-rag:lease:<worker>`` (JSON: host, pids of its pool processes, queues) with a TTL of
  one lease, renewed every quarter lease and at once when a task arrives;
- ``es-rag:lease:<worker>:tags``, the delivery tags of the messages it holds (running,
  reserved, or waiting for a retry's countdown), rewritten at every renewal;
- ``es-rag:leases``, the set of workers that ever held a lease.

Every live worker also watches the others. A worker whose lease key has been *continuously*
absent for a whole lease, as seen by a watcher that could reach Redis the whole time, is
dead: its tags are handed back to their queues with kombu's own transactional restore
(the same one the visibility timeout uses, so a message is restored once even if two
watchers act together) and its registry entries are removed.

A live worker is never mistaken for a dead one by a Redis outage: its lease keys may
expire while Redis is down, but a watcher forgets what it saw at any Redis error, and
every live worker renews within a quarter lease of Redis coming back. (A worker that can
reach the search server but not Redis for longer than a lease cannot acknowledge its task
either; its task may then run twice, which ingestion's deterministic ids make harmless.)

Two gaps lie between taking a message and naming it in a lease, and each has its cover:

- kombu records a taken message in its ``unacked`` hash, and only then does the worker's
  lease name it (at once, on ``task_received``). A worker killed in between leaves a
  message that no lease holds: ``restore_unclaimed`` hands back any es-rag message that has
  sat in ``unacked`` for two leases with no worker's lease naming it.
- A message popped by a worker that died before kombu recorded it is nowhere in Redis,
  but its document's status row still holds the payload: ``requeue_lost`` sends it again.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

log = logging.getLogger(__name__)

REGISTRY = "es-rag:leases"
PREFIX = "es-rag:lease:"
TAGS_TTL_S = 7 * 24 * 3600  # a dead worker's tags outlive it until a watcher hands them back


def lease_key(worker: str) -> str:
    return f"{PREFIX}{worker}"


def tags_key(worker: str) -> str:
    return f"{PREFIX}{worker}:tags"


class Leases:
    """The lease records in Redis (``client``: a redis-py client). No threads here."""

    def __init__(self, client: Any, *, lease_s: float) -> None:
        self.client = client
        self.lease_s = lease_s

    def renew(self, worker: str, info: dict[str, Any], tags: Iterable[str]) -> None:
        held = sorted(set(tags))
        pipe = self.client.pipeline(transaction=True)
        pipe.set(lease_key(worker), json.dumps(info), ex=max(1, round(self.lease_s)))
        pipe.sadd(REGISTRY, worker)
        pipe.delete(tags_key(worker))
        if held:
            pipe.sadd(tags_key(worker), *held)
            pipe.expire(tags_key(worker), TAGS_TTL_S)
        pipe.execute()

    def release(self, worker: str) -> None:
        """A worker that shut down cleanly (its messages were acked or restored by kombu)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(lease_key(worker), tags_key(worker))
        pipe.srem(REGISTRY, worker)
        pipe.execute()

    def workers(self) -> list[str]:
        return sorted(_text(w) for w in self.client.smembers(REGISTRY))

    def live(self) -> dict[str, dict[str, Any]]:
        """Workers holding a lease now, with what they said about themselves."""
        out: dict[str, dict[str, Any]] = {}
        for worker in self.workers():
            raw = self.client.get(lease_key(worker))
            if raw is not None:
                out[worker] = json.loads(_text(raw))
        return out

    def held_by(self, worker: str) -> list[str]:
        return sorted(_text(t) for t in self.client.smembers(tags_key(worker)))

    def forget(self, worker: str) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(tags_key(worker))
        pipe.srem(REGISTRY, worker)
        pipe.execute()


_PRIORITY_SEP = "\x06\x16"  # kombu's Redis transport: a priority's list is "<queue>\x06\x16<n>"
_PRIORITIES = (3, 6, 9)


def broker_payloads(client: Any, queues: list[str], *, cap: int) -> list[dict[str, Any]] | None:
    """The payloads of every es-rag message Redis holds (``_payloads``): waiting in a queue
    or taken by a worker and not acknowledged yet. None when more than ``cap`` messages
    wait: a backlog that long explains why documents wait, and is not worth decoding."""
    lists = [
        q for name in queues for q in (name, *(f"{name}{_PRIORITY_SEP}{p}" for p in _PRIORITIES))
    ]
    if sum(int(client.llen(q)) for q in lists) > cap:
        return None
    raw: list[Any] = []
    for q in lists:
        raw.extend(client.lrange(q, 0, -1))
    for _, value in client.hscan_iter("unacked"):
        try:
            raw.append(json.dumps(json.loads(_text(value))[0]))
        except (ValueError, IndexError, TypeError):
            continue
    return [payload for item in raw for payload in _payloads(item)]


def _payloads(raw: Any) -> list[dict[str, Any]]:
    """The payloads a Celery (protocol 2) message carries: its first positional argument,
    a dict (one document) or a list of dicts (a batch, ``es_rag.ingest_batch``)."""
    import base64

    try:
        message = json.loads(_text(raw))
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body).decode("utf-8")
        args = json.loads(body)[0]
    except (ValueError, KeyError, IndexError, TypeError):
        return []
    first = args[0] if args else None
    if isinstance(first, dict):
        return [first]
    if isinstance(first, list):
        return [p for p in first if isinstance(p, dict)]
    return []


def unclaimed(
    client: Any,
    queues: list[str],
    *,
    older_than_s: float,
    unacked_key: str = "unacked",
    index_key: str = "unacked_index",
) -> list[str]:
    """Delivery tags of es-rag messages taken more than ``older_than_s`` ago that no worker's
    lease names: their worker died between kombu's record and its first renewal.

    A live worker names a message within moments of taking it and at every renewal (a
    quarter lease), and a dead worker's tags stay named until a watcher hands them back,
    so a message held longer than that by nobody is held by a dead worker. Other
    applications' messages in the same Redis database (kombu's ``unacked`` hash is shared)
    are never touched: only those routed to ``queues`` count.
    """
    old = [_text(t) for t in client.zrangebyscore(index_key, "-inf", time.time() - older_than_s)]
    if not old:
        return []
    # Read after the old tags: a message named by a lease renewed since is still claimed.
    leases = Leases(client, lease_s=1)
    claimed = {tag for worker in leases.workers() for tag in leases.held_by(worker)}
    ours = set(queues)
    out = []
    for tag in old:
        if tag in claimed:
            continue
        raw = client.hget(unacked_key, tag)
        try:
            _message, exchange, routing_key = json.loads(_text(raw))
        except (ValueError, TypeError):
            continue  # acknowledged meanwhile, or not kombu's
        if routing_key in ours or exchange in ours:
            out.append(tag)
    return out


def restore_unclaimed(
    client: Any,
    queues: list[str],
    restore: Callable[[str], None],
    *,
    older_than_s: float,
    unacked_key: str = "unacked",
    index_key: str = "unacked_index",
) -> int:
    """Hand back to their queues the messages ``unclaimed`` finds; returns how many.
    ``restore`` is kombu's transactional restore, so a message acknowledged or restored
    by another watcher meanwhile is not restored twice."""
    tags = unclaimed(
        client, queues, older_than_s=older_than_s, unacked_key=unacked_key, index_key=index_key
    )
    for tag in tags:
        restore(tag)
    return len(tags)


def live_processes(live: dict[str, dict[str, Any]]) -> set[str]:
    """``host:pid`` of every process of a live worker (what status rows' ``worker`` holds)."""
    out: set[str] = set()
    for info in live.values():
        host = info.get("host", "")
        out.update(f"{host}:{pid}" for pid in info.get("pids", []))
    return out


class Watcher:
    """Decides, from successive looks at the registry, which workers are dead."""

    def __init__(self, leases: Leases, *, me: str) -> None:
        self.leases = leases
        self.me = me
        self._absent_since: dict[str, float] = {}

    def forget_sightings(self) -> None:
        """After a Redis error nothing seen before counts: leases may have lapsed while
        Redis was away, and their owners have not had a chance to renew yet."""
        self._absent_since.clear()

    def dead(self, now: float) -> list[str]:
        found = []
        for worker in self.leases.workers():
            if worker == self.me:
                continue
            if self.leases.client.exists(lease_key(worker)):
                self._absent_since.pop(worker, None)
                continue
            first = self._absent_since.setdefault(worker, now)
            if now - first >= self.leases.lease_s:
                found.append(worker)
        return found

    def reap(self, worker: str, restore: Callable[[str], None]) -> int:
        """Hand a dead worker's messages back to their queues; returns how many."""
        tags = self.leases.held_by(worker)
        for tag in tags:
            restore(tag)
        self.leases.forget(worker)
        self._absent_since.pop(worker, None)
        return len(tags)


class LeaseKeeper(threading.Thread):
    """The consumer process's lease: renews it, and reaps dead workers' messages.

    A thread of its own, because a ``solo`` worker runs tasks on its main thread and
    would otherwise stop renewing for as long as a document takes.
    """

    def __init__(
        self,
        leases: Leases,
        *,
        worker: str,
        held_tags: Callable[[], Iterable[str]],
        pids: Callable[[], list[int]],
        restore: Callable[[str], None],
        queues: list[str],
        reconcile: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(name="es-rag-lease", daemon=True)
        self.reconcile = reconcile
        self._next_reconcile = 0.0
        self._reconciling: threading.Thread | None = None
        self.leases = leases
        self.worker = worker
        self.held_tags = held_tags
        self.pids = pids
        self.restore = restore
        self.queues = queues
        self.watcher = Watcher(leases, me=worker)
        self.wake = threading.Event()
        self._halt = threading.Event()
        self.reaped: dict[str, int] = {}

    def run(self) -> None:
        interval = self.leases.lease_s / 4
        while not self._halt.is_set():
            # Cleared before the renewal, never after the wait: a task taken while this
            # tick runs sets it again and is named at once, not a quarter lease later.
            self.wake.clear()
            try:
                self.tick(time.monotonic())
            except Exception as exc:  # Redis away: keep trying, trust nothing seen so far
                self.watcher.forget_sightings()
                log.warning("worker lease: %s: %s", type(exc).__name__, exc)
            self.wake.wait(interval)

    def tick(self, now: float) -> None:
        info = {
            "host": socket.gethostname(),
            "pids": sorted(set(self.pids())),
            "queues": self.queues,
            "renewed_at": time.time(),
        }
        self.leases.renew(self.worker, info, self.held_tags())
        for dead in self.watcher.dead(now):
            count = self.watcher.reap(dead, self.restore)
            self.reaped[dead] = count
            log.warning("worker %s is gone: %d of its tasks handed back to the queue", dead, count)
        busy = self._reconciling is not None and self._reconciling.is_alive()
        if self.reconcile is not None and now >= self._next_reconcile and not busy:
            self._next_reconcile = now + self.leases.lease_s
            # On a thread of its own: a slow search server must never delay a renewal
            # (a lapsed lease would hand a live worker's tasks to another).
            self._reconciling = threading.Thread(
                target=self._reconcile_once, name="es-rag-reconcile", daemon=True
            )
            self._reconciling.start()

    def _reconcile_once(self) -> None:
        assert self.reconcile is not None
        try:
            # One worker at a time looks for lost messages (the lock outlives a pass).
            lock = self.leases.client.set(
                "es-rag:reconcile", self.worker, nx=True, ex=max(1, round(self.leases.lease_s))
            )
            if lock:
                sent = self.reconcile()
                if sent:
                    log.warning("%d document(s) whose message was lost sent again", sent)
        except Exception as exc:  # the next pass tries again
            log.warning("lost-message check: %s: %s", type(exc).__name__, exc)

    def stop(self) -> None:
        """Stop renewing and give the lease up (a clean shutdown: kombu has acknowledged
        or restored every message this worker held)."""
        self._halt.set()
        self.wake.set()
        if self.is_alive():
            self.join(timeout=10)
        try:
            self.leases.release(self.worker)
        except Exception as exc:  # shutting down: the lease will simply lapse
            log.warning("worker lease release: %s", exc)


def new_worker_id() -> str:
    """host:pid plus a random part: a restarted container reuses its host name and pid 1,
    and must not take over (and overwrite) the lease of the worker it replaces."""
    import os
    import uuid

    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def requeue_lost(
    ingestor: Any, app: Any, client: Any, *, older_than_s: float, cap: int = 10_000
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
    from es_rag.jobs import IngestPayload, enqueue, tenant_of

    payloads = broker_payloads(client, ingestor.settings.queues, cap=cap)
    if payloads is None:
        return 0
    present = set()
    for p in payloads:
        try:
            present.add((tenant_of(ingestor, q := IngestPayload.model_validate(p)), q.key))
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
        key = (tenant_of(ingestor, payload), payload.key)
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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
