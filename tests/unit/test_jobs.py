"""Queue plumbing that needs no server: payloads, failure classes, fences, Celery settings."""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path
from typing import Any

import kombu.exceptions
import pytest
import redis
from pydantic import ValidationError

from es_rag import jobs
from es_rag.acl import make_acl
from es_rag.config import Settings
from es_rag.errors import (
    AccessControlError,
    BulkIndexingError,
    BulkRejectedError,
    DimensionMismatchError,
    EmbeddingError,
    EmbeddingUnavailableError,
    EngineUnavailableError,
    IndexBlockedError,
    InputError,
    QueueUnavailableError,
    UnsupportedFormatError,
)
from es_rag.pipeline import acl_hash, fence_version
from workers.app import make_app

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (EngineUnavailableError("bulk write: search server unreachable"), True),
        (redis.exceptions.ConnectionError("reset"), True),
        (EmbeddingUnavailableError("embedding server down after 6 attempts: HTTP 503"), True),
        (QueueUnavailableError("cannot enqueue: Redis at redis://x unreachable"), True),
        (BulkRejectedError("indexing d: 2 chunk(s) failed", [{"chunk_id": "c"}]), True),
        (kombu.exceptions.OperationalError("connection refused"), True),
        # A type, not a message: words in a permanent error never make it transient.
        (EmbeddingError("server unreachable, timed out"), False),
        (EmbeddingError("model returned NaN"), False),
        (UnsupportedFormatError("x.pdf: unsupported"), False),
        (InputError("empty document"), False),
        (AccessControlError("no ACL"), False),
        (DimensionMismatchError(expected=384, got=768), False),
        (IndexBlockedError("read_only_allow_delete"), False),
        (BulkIndexingError("indexing d: 1 chunk(s) failed", [{"chunk_id": "c"}]), False),
    ],
)
def test_only_transient_failures_are_retried(exc: Exception, transient: bool) -> None:
    assert jobs.is_transient(exc) is transient
    assert type(pickle.loads(pickle.dumps(exc))) is type(exc)  # Celery carries them


def test_payload_is_typed_and_round_trips_as_json() -> None:
    p = jobs.IngestPayload(path="file:///data/a.md", tenant="acme", allow=["group:g"])
    assert p.file.as_posix() == "/data/a.md" and p.key == "file:///data/a.md"
    again = jobs.IngestPayload.model_validate(p.model_dump())
    assert again == p and again.acl() == make_acl("acme", allow=["group:g"])
    with pytest.raises(ValidationError):
        jobs.IngestPayload.model_validate({"path": "/a.md"})  # no tenant
    with pytest.raises(AccessControlError):
        jobs.IngestPayload(path="/a.md", tenant="acme").acl()  # neither public nor allowed


def test_a_parsed_document_crosses_the_split_queue_whole() -> None:
    """Parse queue → embed queue travels as JSON: every field and every element comes back,
    so the embed worker chunks exactly what the parse worker read."""
    import json

    from es_rag.types import Document, Element

    elements = (
        Element("title", "Refunds", level=1, page=1, coordinates=((0.1, 0.05), (0.9, 0.08))),
        Element("text", "Money back in 5 days.", page=1, page_end=2),
        Element("table", "a b", html="<table><tr><td>a</td><td>b</td></tr></table>"),
    )
    doc = Document(
        doc_id="kb/1",
        text="Refunds\n\nMoney back in 5 days.",
        acl=make_acl("acme", allow=["group:g"]),
        title="Refunds",
        source_uri="file:///data/r.pdf",
        mime_type="application/pdf",
        metadata={"product": "pay"},
        doc_version="3",
        updated_at="2026-01-01T00:00:00+00:00",
        elements=elements,
    )
    payload = jobs.DocumentPayload(document=doc, parse_ms=12.5)
    wire = json.loads(json.dumps(payload.model_dump(mode="json")))  # what Celery's JSON carries
    arrived = jobs.DocumentPayload.model_validate(wire)
    assert arrived.document == doc and arrived.parse_ms == 12.5
    assert arrived.document.elements == elements
    # Every field of Document travels: a field added to Document cannot be forgotten here.
    from dataclasses import fields

    assert set(wire["document"]) == {f.name for f in fields(Document)}
    # The ACL validates itself again on arrival.
    wire["document"]["acl"]["allowed_principals"] = []
    with pytest.raises(AccessControlError, match="no ACL"):
        jobs.DocumentPayload.model_validate(wire)


@pytest.mark.parametrize(
    ("version", "fenced"), [("7", 7), ("0", 0), ("v7", None), (None, None), ("2024-01-01", None)]
)
def test_only_integer_versions_are_fenced(version: str | None, fenced: int | None) -> None:
    assert fence_version(version) == fenced


def test_acl_hash_is_the_acl_half_of_doc_hash() -> None:
    a = make_acl("acme", allow=["group:a"])
    b = make_acl("acme", allow=["group:a", "group:b"])
    assert acl_hash(a) == acl_hash(make_acl("acme", allow=["group:a"])) != acl_hash(b)
    assert len(acl_hash(a)) == 32


def test_celery_reliability_settings() -> None:
    settings = Settings(task_soft_time_limit=50, task_time_limit=60, redis_url="redis://r:1/2")
    conf = make_app(settings).conf
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    assert (conf.task_soft_time_limit, conf.task_time_limit) == (50, 60)
    assert conf.broker_transport_options["visibility_timeout"] == 360 > conf.task_time_limit
    assert conf.broker_url == conf.result_backend == "redis://r:1/2"
    assert [q.name for q in conf.task_queues] == ["es-rag"]


def test_split_queues_route_parse_and_embed() -> None:
    conf = make_app(Settings(parse_queue="cpu", embed_queue="gpu")).conf
    assert sorted(q.name for q in conf.task_queues) == ["cpu", "es-rag", "gpu"]
    assert conf.task_routes["es_rag.ingest"] == {"queue": "cpu"}
    assert conf.task_routes["es_rag.index_document"] == {"queue": "gpu"}


def test_limits_must_be_ordered() -> None:
    with pytest.raises(ValidationError, match="task_time_limit"):
        Settings(task_soft_time_limit=100, task_time_limit=100)
    with pytest.raises(ValidationError, match="visibility_timeout"):
        Settings(task_time_limit=100, task_soft_time_limit=50, visibility_timeout=90)


def test_a_wrapped_time_limit_is_recognised() -> None:
    from celery.exceptions import SoftTimeLimitExceeded

    try:
        try:
            raise SoftTimeLimitExceeded()
        except SoftTimeLimitExceeded as inner:
            raise EmbeddingError("cannot load st model 'x'") from inner
    except EmbeddingError as exc:
        assert jobs.hit_time_limit(exc)
    assert not jobs.hit_time_limit(EmbeddingError("model returned NaN"))


def test_small_files_travel_in_batches_and_large_ones_alone(tmp_path: Path) -> None:
    def payload(name: str, size: int | None) -> jobs.IngestPayload:
        path = tmp_path / name
        if size is not None:
            path.write_bytes(b"x" * size)
        return jobs.IngestPayload(path=str(path), tenant="acme", public=True)

    small = [payload(f"s{i}.md", 100) for i in range(5)]
    large = payload("large.pdf", 5000)
    missing = payload("gone.md", None)  # the worker reports it, cheaply, in a batch
    settings = Settings(queue_batch_docs=3, queue_batch_kb=1)
    groups = jobs.batches(settings, [small[0], large, *small[1:], missing])
    keys = [[p.path.rsplit("/", 1)[1] for p in g] for g in groups]
    assert keys == [["s0.md", "s1.md", "s2.md"], ["s3.md", "s4.md", "gone.md"], ["large.pdf"]]
    # A batch closes before its files pass queue_batch_kb together.
    mid = [payload(f"m{i}.md", 400) for i in range(5)]
    assert [len(g) for g in jobs.batches(settings, mid)] == [2, 2, 1]
    # One a message: batching off, or a split deployment (its halves hand over one by one).
    for off in (Settings(queue_batch_docs=1), Settings(parse_queue="cpu", embed_queue="gpu")):
        assert [len(g) for g in jobs.batches(off, small)] == [1] * 5
    # A file above queue_batch_file_kb travels alone even where a batch would hold it.
    roomy = Settings(queue_batch_kb=1024, queue_batch_file_kb=4)
    *spread, last = jobs.batches(roomy, [*small, large], processes=1)
    assert last == [large] and sorted(len(g) for g in spread) == [2, 3]


def test_batches_are_as_large_as_the_live_worker_processes_allow(tmp_path: Path) -> None:
    """Few large batches (one embedding call, one bulk stream each), but spread over every
    live worker process: ``queue_batch_spread`` batches each, within the caps."""
    files = []
    for i in range(600):
        path = tmp_path / f"f{i:03d}.md"
        path.write_bytes(b"x" * (700 + i % 200))  # one chunk each, uneven sizes
        files.append(jobs.IngestPayload(path=str(path), tenant="acme", public=True))
    defaults = Settings()
    sizes = {n: [len(g) for g in jobs.batches(defaults, files, processes=n)] for n in (1, 2, 3)}
    assert [len(v) for v in sizes.values()] == [2, 4, 6], sizes
    assert all(sum(v) == 600 for v in sizes.values()), sizes
    for n in (1, 2, 3):  # about equal bytes each (the work), within one file's size
        held = [
            sum(p.file.stat().st_size for p in g)
            for g in jobs.batches(defaults, files, processes=n)
        ]
        assert max(held) - min(held) <= 2 * 900, held
    # No live worker: the sender cannot know how many will share the work; small batches.
    unknown = [len(g) for g in jobs.batches(defaults, files, processes=None)]
    assert unknown == [len(g) for g in jobs.batches(defaults, files, processes=0)]
    assert max(unknown) <= 64 and len(unknown) >= 10
    # The caps hold whatever the spread: 512 files, 1 MB; spread 0 fills batches to them.
    many = Settings(queue_batch_docs=100)
    assert max(len(g) for g in jobs.batches(many, files, processes=1)) == 100
    fill = Settings(queue_batch_spread=0, queue_batch_kb=200)
    for group in jobs.batches(fill, files, processes=8):
        assert sum(p.file.stat().st_size for p in group) <= 200 * 1024
    assert len(jobs.batches(fill, files, processes=8)) == 3


def _celery_message(args: list[Any]) -> str:
    """A message as kombu's Redis transport stores it (Celery protocol 2, base64 body)."""
    body = base64.b64encode(json.dumps([args, {}, {}]).encode()).decode()
    return json.dumps({"body": body, "properties": {"body_encoding": "base64"}})


def test_the_lost_message_check_reads_single_and_batch_messages() -> None:
    from es_rag.leases import _payloads

    one = {"path": "/d/a.md", "tenant": "acme"}
    two = {"path": "/d/b.md", "tenant": "acme"}
    assert _payloads(_celery_message([one])) == [one]
    assert _payloads(_celery_message([[one, two]])) == [one, two]
    assert _payloads(_celery_message(["folder", {"tenant": "acme"}])) == []  # a sync task
    assert _payloads("not json") == []


def test_batches_route_like_single_documents() -> None:
    conf = make_app(Settings(parse_queue="cpu", embed_queue="gpu")).conf
    assert conf.task_routes["es_rag.ingest_batch"] == conf.task_routes["es_rag.ingest"]
