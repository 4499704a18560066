"""Worker leases on a real Redis: a dead worker's messages come back within a lease.

The first tests drive the lease records and the watcher directly against Redis and kombu's
own Redis transport (a message taken without an ack sits in kombu's ``unacked`` hash, as a
worker's do). The last one kills a real worker process mid-run and measures how long its
reserved and running tasks take to reach a new worker, with a broker visibility timeout
far longer than the test, so only the leases can explain a quick recovery.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Connection, Exchange, Queue

from es_rag.leases import (
    LeaseKeeper,
    Leases,
    Watcher,
    lease_key,
    live_processes,
    requeue_lost,
    restore_unclaimed,
    unclaimed,
)
from es_rag.pipeline import Ingestor
from tests.integration.test_queue import Worker, cli, settings_of, wait_status

pytestmark = pytest.mark.integration


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


@pytest.fixture
def taken(redis_url: str) -> Iterator[tuple[Any, str, str]]:
    """A message taken from a fresh queue without an ack: (channel, delivery tag, queue)."""
    name = f"lease-test-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, Exchange(name, type="direct"), routing_key=name)
    with Connection(redis_url, transport_options={"visibility_timeout": 3600}) as conn:
        conn.Producer().publish(
            {"n": 1}, exchange=queue.exchange, routing_key=name, declare=[queue]
        )
        channel = conn.channel()
        message = queue(channel).get(no_ack=False)
        assert message is not None
        yield channel, message.delivery_tag, name
        queue(channel).delete()


def test_a_dead_workers_messages_go_back_after_one_lease(
    client: redis.Redis, taken: tuple[Any, str, str]
) -> None:
    channel, tag, queue = taken
    assert client.hexists("unacked", tag) and client.llen(queue) == 0
    worker = f"dead-{uuid.uuid4().hex[:6]}"
    leases = Leases(client, lease_s=1.0)
    leases.renew(worker, {"host": "h", "pids": [1]}, [tag])
    assert leases.held_by(worker) == [tag] and worker in leases.live()

    watcher = Watcher(leases, me="watcher")
    t0 = time.monotonic()
    # (Other tests' dead workers may be in the registry too: only ours is looked at.)
    assert worker not in watcher.dead(t0)  # alive
    time.sleep(1.3)  # the lease lapses (its owner stopped renewing)
    assert worker not in leases.live()
    now = time.monotonic()
    assert worker not in watcher.dead(now)  # absent once: not yet a full lease of absence
    assert worker not in watcher.dead(now + 0.5)
    assert worker in watcher.dead(now + 1.0)
    assert watcher.reap(worker, channel.qos.restore_by_tag) == 1
    assert client.llen(queue) == 1 and not client.hexists("unacked", tag)  # back in the queue
    assert worker not in leases.workers() and leases.held_by(worker) == []


def test_a_live_worker_is_never_reaped_and_a_redis_error_forgets_what_was_seen(
    client: redis.Redis, taken: tuple[Any, str, str]
) -> None:
    _channel, tag, queue = taken
    worker = f"live-{uuid.uuid4().hex[:6]}"
    leases = Leases(client, lease_s=1.0)
    watcher = Watcher(leases, me="watcher")
    start = time.monotonic()
    for i in range(8):  # renewing faster than the lease: never dead, whatever the clock says
        leases.renew(worker, {"host": "h", "pids": [2]}, [tag])
        assert worker not in watcher.dead(start + i)
        time.sleep(0.3)
    # Seen absent, then Redis fails: nothing seen before counts any more.
    client.delete(lease_key(worker))
    now = time.monotonic()
    assert worker not in watcher.dead(now)
    watcher.forget_sightings()
    assert worker not in watcher.dead(now + 1.5)  # a new first sighting, not a full lease
    assert client.hexists("unacked", tag) and client.llen(queue) == 0
    leases.forget(worker)


def test_the_keeper_thread_renews_and_reaps(
    client: redis.Redis, taken: tuple[Any, str, str]
) -> None:
    channel, tag, queue = taken
    dead = f"dead-{uuid.uuid4().hex[:6]}"
    Leases(client, lease_s=1.0).renew(dead, {"host": "h", "pids": [3]}, [tag])
    keeper = LeaseKeeper(
        Leases(client, lease_s=1.0),
        worker=f"keeper-{uuid.uuid4().hex[:6]}",
        held_tags=lambda: ["own-tag"],
        pids=lambda: [4, 5],
        restore=channel.qos.restore_by_tag,
        queues=[queue],
    )
    keeper.start()
    try:
        deadline = time.monotonic() + 10
        while dead not in keeper.reaped and time.monotonic() < deadline:
            time.sleep(0.1)
        assert keeper.reaped.get(dead) == 1
        assert client.llen(queue) == 1
        live = Leases(client, lease_s=1.0).live()
        assert live[keeper.worker]["pids"] == [4, 5]
        assert {"h:4", "h:5"} >= live_processes({keeper.worker: {"host": "h", "pids": [4, 5]}})
        assert Leases(client, lease_s=1.0).held_by(keeper.worker) == ["own-tag"]
    finally:
        keeper.stop()
    assert keeper.worker not in Leases(client, lease_s=1.0).workers()  # released on stop


@pytest.fixture
def lease_env(env: dict[str, str]) -> dict[str, str]:
    # A visibility timeout far beyond the test: only leases can bring tasks back in time.
    return {
        **env,
        "ES_RAG_VISIBILITY_TIMEOUT": "1800",
        "ES_RAG_TASK_SOFT_TIME_LIMIT": "600",
        "ES_RAG_TASK_TIME_LIMIT": "900",
        "ES_RAG_WORKER_LEASE_SECONDS": "6",
    }


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(env: dict[str, str], pool: str = "solo", extra: tuple[str, ...] = ()) -> Worker:
        w = Worker(env, tmp_path / f"worker-{len(started)}.log", pool=pool, extra=extra)
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()


@pytest.mark.one_engine(
    "leases live in Redis; the rows' writes are test_queue's kill tests, on both engines"
)
def test_a_killed_workers_tasks_reach_a_new_worker_within_a_lease(
    lease_env: dict[str, str], workers: Callable[..., Worker], tmp_path: Path
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(80):
        (folder / f"doc-{i:02d}.md").write_text(
            f"# Note {i}\n\nThe value of item {i} is {i * 7}.\n"
        )
    # Batches of 4: the kill strikes mid-stream, with batches both taken and waiting.
    lease_env = {**lease_env, "ES_RAG_QUEUE_BATCH_DOCS": "4"}
    first = workers(lease_env, pool="prefork")
    proc = cli(
        lease_env, "ingest", "--queue", "--no-wait", str(folder), "--tenant", "acme", "--public"
    )
    assert proc.returncode == 0, proc.stderr
    status = Ingestor(settings_of(lease_env)).status
    keys = [str(p) for p in sorted(folder.iterdir())]

    def finished() -> int:
        status.refresh()
        return sum(
            r["status"] in ("indexed", "skipped", "failed") for r in status.rows(tenant="acme")
        )

    deadline = time.monotonic() + 120
    while finished() < 10:
        assert time.monotonic() < deadline, "the first worker made no progress"
        time.sleep(0.3)
    first.kill9()
    killed_at = time.monotonic()
    done_at_kill = finished()
    assert done_at_kill < len(keys)

    # No live worker yet: once the lease lapses, status names what the dead one held.
    time.sleep(7)
    report = json.loads(cli(lease_env, "status", "--json").stdout)
    assert report["workers"] == 0
    assert report["awaiting_redelivery"] >= 1 or report["orphaned"], report
    assert all(o["tenant"] == "acme" for o in report["orphaned"])

    workers(lease_env)  # a new worker: it sees the dead lease and hands its messages back
    deadline = time.monotonic() + 240
    while finished() < len(keys):
        assert time.monotonic() < deadline, f"{len(keys) - finished()} documents never came back"
        time.sleep(0.5)
    recovered_s = time.monotonic() - killed_at
    rows = {r["doc_id"]: r for r in status.rows(tenant="acme")}
    assert {r["status"] for r in rows.values()} <= {"indexed", "skipped"}
    assert set(rows) == set(keys)
    print(
        f"\n[leases] 80 documents; worker killed after {done_at_kill}; all final "
        f"{recovered_s:.1f} s after the kill (lease 6 s, visibility timeout 1800 s)"
    )
    # The dead worker may have held a message whose document was already final (written,
    # killed before the ack): every document can be final before the new worker's watcher
    # has seen the lease absent for a whole lease and handed that message back.
    deadline = time.monotonic() + 60
    while True:
        report = json.loads(cli(lease_env, "status", "--json").stdout)
        if report["orphaned"] == [] and report["awaiting_redelivery"] == 0:
            break
        assert time.monotonic() < deadline, report
        time.sleep(1)
    assert report["workers"] == 1


@pytest.mark.one_engine("leases live in Redis")
def test_a_message_lost_between_pop_and_record_is_sent_again(
    lease_env: dict[str, str], workers: Callable[..., Worker], tmp_path: Path, client: redis.Redis
) -> None:
    """Redis loses a message a worker popped and died holding before it was recorded as
    taken. The status row still has the payload: the document is enqueued again, once."""
    from es_rag import jobs
    from workers.app import make_app

    env = {**lease_env, "ES_RAG_WORKER_LEASE_SECONDS": "3"}
    settings = settings_of(env)
    ingestor = Ingestor(settings)
    app = make_app(settings)
    queue = env["ES_RAG_QUEUE"]
    lost, kept = tmp_path / "lost.md", tmp_path / "kept.md"
    lost.write_text("# Lost\n\nThis message vanished from Redis.\n")
    kept.write_text("# Kept\n\nThis one waits in the queue.\n")
    for path in (lost, kept):
        jobs.enqueue(ingestor, app, jobs.IngestPayload(path=str(path), tenant="acme", public=True))
    assert client.llen(queue) == 2
    client.rpop(queue)  # the oldest message (lost.md), as a worker's BRPOP takes it
    assert client.llen(queue) == 1

    # No worker yet: two passes, the row unchanged between them, then it is sent again.
    assert requeue_lost(ingestor, app, client, older_than_s=0) == 0  # first sighting
    assert requeue_lost(ingestor, app, client, older_than_s=0) == 1
    assert requeue_lost(ingestor, app, client, older_than_s=0) == 0  # present again
    assert client.llen(queue) == 2

    # And unattended: a worker's lease keeper runs the same passes on its own.
    client.rpop(queue)  # kept.md's message now; then a worker drains the rest
    workers(env)
    for path in (lost, kept):
        row = wait_status(env, str(path), {"indexed", "failed"}, timeout=120)
        assert row["status"] == "indexed", row


def test_a_message_taken_but_named_by_no_lease_goes_back(
    client: redis.Redis, taken: tuple[Any, str, str]
) -> None:
    """kombu recorded the message as taken; its worker died before its lease named it."""
    channel, tag, queue = taken
    leases = Leases(client, lease_s=1.0)
    time.sleep(0.6)
    assert unclaimed(client, [queue], older_than_s=5) == []  # not old enough yet
    assert unclaimed(client, ["another-apps-queue"], older_than_s=0.5) == []  # not ours
    holder = f"live-{uuid.uuid4().hex[:6]}"
    leases.renew(holder, {"host": "h", "pids": [6]}, [tag])
    assert unclaimed(client, [queue], older_than_s=0.5) == []  # a lease names it
    leases.forget(holder)
    assert unclaimed(client, [queue], older_than_s=0.5) == [tag]
    assert restore_unclaimed(client, [queue], channel.qos.restore_by_tag, older_than_s=0.5) == 1
    assert client.llen(queue) == 1 and not client.hexists("unacked", tag)
    assert restore_unclaimed(client, [queue], channel.qos.restore_by_tag, older_than_s=0.5) == 0


@pytest.mark.one_engine("leases live in Redis")
def test_a_worker_hands_back_a_message_its_dead_taker_never_named(
    lease_env: dict[str, str], workers: Callable[..., Worker], tmp_path: Path, redis_url: str
) -> None:
    """End to end: a message sits in kombu's ``unacked`` hash, named by no lease (its taker
    was killed between kombu's record and its first renewal). A live worker hands it back
    after two leases and the document is indexed; status counts it meanwhile."""
    from es_rag import jobs
    from workers.app import make_app

    env = {**lease_env, "ES_RAG_WORKER_LEASE_SECONDS": "3"}
    settings = settings_of(env)
    ingestor = Ingestor(settings)
    name = env["ES_RAG_QUEUE"]
    doc = tmp_path / "orphan.md"
    doc.write_text("# Orphan\n\nIts taker died before naming it.\n")
    jobs.enqueue(
        ingestor, make_app(settings), jobs.IngestPayload(path=str(doc), tenant="acme", public=True)
    )
    with Connection(redis_url) as conn:
        channel = conn.channel()
        message = Queue(name, Exchange(name, type="direct"), routing_key=name)(channel).get(
            no_ack=False
        )
        assert message is not None
        channel.qos._delivered.clear()  # the taker dies: its channel restores nothing
    time.sleep(6.5)  # two leases
    report = json.loads(cli(env, "status", "--json").stdout)
    assert report["awaiting_redelivery"] >= 1, report
    workers(env)
    row = wait_status(env, str(doc), {"indexed", "failed"}, timeout=120)
    assert row["status"] == "indexed", row


@pytest.mark.one_engine("how the sender spreads batches over workers (Redis)")
def test_small_files_are_spread_over_the_live_worker_processes(
    lease_env: dict[str, str], workers: Callable[..., Worker], tmp_path: Path
) -> None:
    """The sender counts the live worker processes in their leases and cuts small files
    into ``queue_batch_spread`` (2) batches each: two for a solo worker, four for a
    prefork worker of two processes (as few and as large as that allows)."""
    from es_rag.jobs import live_worker_processes

    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(40):
        (folder / f"note-{i:02d}.md").write_text(f"# Note {i}\n\nItem {i} weighs {i * 3} kg.\n")
    status = Ingestor(settings_of(lease_env)).status
    for pool, extra, processes in (("solo", (), 1), ("prefork", ("--concurrency", "2"), 2)):
        env = {**lease_env, "ES_RAG_QUEUE": f"spread-{pool}-{uuid.uuid4().hex[:6]}"}
        worker = workers(env, pool=pool, extra=extra)
        deadline = time.monotonic() + 30
        while live_worker_processes(settings_of(env)) != processes:
            assert time.monotonic() < deadline, live_worker_processes(settings_of(env))
            time.sleep(0.2)
        proc = cli(env, "ingest", "--queue", str(folder), "--tenant", f"t-{pool}", "--public")
        assert proc.returncode == 0, proc.stderr + proc.stdout
        status.refresh()
        rows = status.rows(tenant=f"t-{pool}")
        assert len(rows) == 40 and {r["status"] for r in rows} == {"indexed"}, rows
        assert len({r["task_id"] for r in rows}) == 2 * processes, [r["task_id"] for r in rows]
        worker.stop()


def _tree(root: int) -> dict[int, str]:
    """Every process under ``root`` (itself included): pid -> command line."""
    parents: dict[int, int] = {}
    lines: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        lines[int(entry.name)] = cmd
    out = {root: lines.get(root, "")}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in out and pid not in out:
                out[pid] = lines[pid]
                grew = True
    return out


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


@pytest.mark.one_engine("the parse server is the worker's, whatever the engine")
def test_a_prefork_worker_runs_one_parse_server_for_its_processes(
    lease_env: dict[str, str], workers: Callable[..., Worker], tmp_path: Path
) -> None:
    """Two pool processes, one parse server (es_rag.sandbox.SharedServer): both parse
    through it, and it goes when the worker does."""
    env = {**lease_env, "ES_RAG_QUEUE_BATCH_DOCS": "1"}  # a message a file: both processes work
    folder = tmp_path / "pages"
    folder.mkdir()
    for i in range(8):
        (folder / f"page-{i}.html").write_text(
            f"<html><body><h1>Page {i}</h1><p>Section {i} explains valve {i * 3}.</p></body></html>"
        )
    worker = workers(env, pool="prefork", extra=("--concurrency", "2"))
    proc = cli(env, "ingest", "--queue", str(folder), "--tenant", "acme", "--public")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    status = Ingestor(settings_of(env)).status
    status.refresh()
    rows = status.rows(tenant="acme")
    assert len(rows) == 8 and {r["status"] for r in rows} == {"indexed"}, rows
    tree = _tree(worker.proc.pid)
    servers = {pid for pid, cmd in tree.items() if "es_rag.sandbox --socket" in cmd}
    private = [cmd for cmd in tree.values() if "es_rag.sandbox" in cmd and "--socket" not in cmd]
    # One shared server (its handlers, forks of it, may still be finishing); none of a
    # process's own.
    assert servers and not private, tree
    top = [pid for pid in servers if _parent(pid) not in servers]
    assert len(top) == 1, tree
    server_pid = top[0]
    worker.stop()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{server_pid}").exists():
        stat = Path(f"/proc/{server_pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            break
        assert time.monotonic() < deadline, "the parse server outlived its worker"
        time.sleep(0.1)
