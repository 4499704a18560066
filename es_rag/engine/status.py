"""The ingest-status index ``<alias>-status``: every document's latest outcome, and fences.

Operators read it in Kibana (field names in ``mappings/status-v2.json`` are a contract);
``es-rag status`` and ``es-rag requeue`` read it too. A document is its tenant plus its id
(two tenants may both have ``handbook.md``), so rows are keyed by both:

- ``kind: status``, ``_id`` = ``status_key(tenant, doc id)``: the latest outcome (queued,
  running, indexed, skipped, failed) with error class and message, attempts, transient
  retries, per-stage timings, worker, and the payload, so a failed document can be
  requeued after a fix.
- ``kind: fence``, ``_id`` = ``fence:<key>``: the newest version ever accepted for that
  tenant's document, written with ``version_type=external_gte`` so the server, atomically,
  refuses an older version that arrives late (a redelivery of the same version passes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from es_rag.engine.base import Engine
from es_rag.engine.mapping import index_body
from es_rag.errors import BulkIndexingError, BulkRejectedError

STATUSES = ("queued", "running", "indexed", "skipped", "failed")
STATUS_MAPPING = "status-v2.json"


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


def status_index_name(alias: str) -> str:
    return f"{alias}-status"


def status_key(tenant: str, doc_id: str) -> str:
    """The row id of one tenant's document: fixed length whatever the id (paths are long)."""
    key = json.dumps([tenant, doc_id], ensure_ascii=False)
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]


def status_body(*, replicas: int = 0) -> dict[str, Any]:
    """The status index's create body. It gets the chunk index's replicas, so that losing a
    node loses neither the outcomes nor the version fences."""
    body = index_body(STATUS_MAPPING)
    body["settings"]["index"]["number_of_replicas"] = replicas
    return body


class StatusIndex:
    """Construction does no I/O; ``ensure`` creates the index once (or adds new fields)."""

    def __init__(self, engine: Engine, alias: str, *, replicas: int = 0) -> None:
        self.engine = engine
        self.name = status_index_name(alias)
        self.replicas = replicas
        self._ready = False

    def ensure(self) -> None:
        if self._ready:
            return
        body = status_body(replicas=self.replicas)
        if not self.engine.ensure_index(self.name, body):
            # An index made from an older status mapping gains the new fields (additive).
            self.engine.put_mapping(self.name, body["mappings"]["properties"])
        self._ready = True

    # --- status rows ---------------------------------------------------------------------
    def record(self, tenant: str, doc_id: str, status: str, **fields: Any) -> None:
        """Write the document's latest outcome (whole row; the caller carries the payload)."""
        row = _status_row(tenant, doc_id, status, fields)
        self.ensure()
        self.engine.put(self.name, status_key(tenant, doc_id), row)

    def record_many(self, rows: Sequence[tuple[str, str, str, dict[str, Any]]]) -> None:
        """``record`` for many documents in one bulk request: a queue batch's rows (one
        request, not one per document). Rows the server refuses raise ``BulkIndexingError``
        (``BulkRejectedError`` when every refusal was for load, after the client's retries).
        """
        if not rows:
            return
        actions = [
            {
                "_index": self.name,
                "_id": status_key(tenant, doc_id),
                "_source": _status_row(tenant, doc_id, status, fields),
            }
            for tenant, doc_id, status, fields in rows
        ]
        self.ensure()
        failures = [
            item
            for ok, item in self.engine.streaming_bulk(
                actions, chunk_size=500, max_retries=3, initial_backoff=0.5
            )
            if not ok
        ]
        if failures:
            errors: list[dict[str, Any]] = [next(iter(f.values()), {}) for f in failures]
            load = all(e.get("status") in (429, 503) for e in errors)
            cls = BulkRejectedError if load else BulkIndexingError
            raise cls(f"{len(failures)} status row(s) not written: {errors[0]}", errors)

    def get(self, tenant: str, doc_id: str) -> dict[str, Any] | None:
        self.ensure()
        return self.engine.get(self.name, status_key(tenant, doc_id))

    def refresh(self) -> None:
        self.ensure()
        self.engine.refresh(self.name)

    def counts(self, *, tenant: str | None = None) -> dict[str, int]:
        self.ensure()
        body = {
            "size": 0,
            "query": {"bool": {"filter": _filters(tenant=tenant)}},
            "aggs": {"s": {"terms": {"field": "status", "size": len(STATUSES)}}},
        }
        resp = self.engine.search(self.name, body)
        buckets = resp.get("aggregations", {}).get("s", {}).get("buckets", [])
        return {b["key"]: int(b["doc_count"]) for b in buckets}

    def rows(
        self,
        *,
        status: str | None = None,
        since: str | None = None,
        doc_ids: list[str] | None = None,
        tenant: str | None = None,
        before: str | None = None,
    ) -> list[dict[str, Any]]:
        """Status rows, newest first; ``since``/``before`` are dates or date math (``now-1h``)
        bounding ``updated_at``."""
        self.ensure()
        filters = _filters(tenant=tenant)
        if status:
            filters.append({"term": {"status": status}})
        if since:
            filters.append({"range": {"updated_at": {"gte": since}}})
        if before:
            filters.append({"range": {"updated_at": {"lt": before}}})
        if doc_ids is not None:
            filters.append({"terms": {"doc_id": doc_ids}})
        body = {"query": {"bool": {"filter": filters}}, "sort": [{"updated_at": "desc"}]}
        return [hit["_source"] for hit in self.engine.scan(self.name, body)]

    def expire(self, *, running_for_s: float) -> list[str]:
        """Rows ``running`` for longer than the hard time limit become ``failed: timeout``.

        A worker killed by the hard limit (or by the OS) cannot record its own end; this
        makes sure nothing stays "running" forever. Returns the doc ids expired.
        """
        cutoff = (datetime.now(timezone.utc) - timedelta(seconds=running_for_s)).isoformat()
        self.ensure()
        filters = _filters()
        filters += [{"term": {"status": "running"}}, {"range": {"started_at": {"lt": cutoff}}}]
        expired = []
        for hit in self.engine.scan(self.name, {"query": {"bool": {"filter": filters}}}):
            row = hit["_source"]
            row.update(
                status="failed",
                error_type="TimeoutError",
                error=f"timeout: running for more than {running_for_s:g} s "
                "(the worker died or hit its hard time limit)",
                finished_at=now_iso(),
                updated_at=now_iso(),
            )
            self.engine.put(self.name, hit["_id"], row)
            expired.append(row["doc_id"])
        return expired

    # --- version fences ------------------------------------------------------------------
    def fence(self, tenant: str, doc_id: str, version: int) -> bool:
        """Accept ``version`` unless a newer one was accepted before (atomic, server-side)."""
        self.ensure()
        row = {
            "kind": "fence",
            "tenant_id": tenant,
            "doc_id": doc_id,
            "doc_version": str(version),
            "updated_at": now_iso(),
        }
        return self.engine.put(
            self.name, f"fence:{status_key(tenant, doc_id)}", row, version=version
        )

    def newest_version(self, tenant: str, doc_id: str) -> int | None:
        self.ensure()
        row = self.engine.get(self.name, f"fence:{status_key(tenant, doc_id)}")
        return int(row["_version"]) if row else None


def _status_row(tenant: str, doc_id: str, status: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A whole status row: the fields given (None ones left out) and when."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    row = {
        "kind": "status",
        "tenant_id": tenant,
        "doc_id": doc_id,
        "status": status,
        "updated_at": now_iso(),
    }
    row.update({k: v for k, v in fields.items() if v is not None})
    return row


def _filters(*, tenant: str | None = None) -> list[dict[str, Any]]:
    filters: list[dict[str, Any]] = [{"term": {"kind": "status"}}]
    if tenant is not None:
        filters.append({"term": {"tenant_id": tenant}})
    return filters
