"""The chunk index: creation behind an alias, contract checks, bulk writes, stale deletes.

Nothing here relies on what bare or basic-license clusters lack: a document's old chunks
are found with a scan on ``doc_id`` and removed with bulk deletes by id (no
``_delete_by_query``), so the same code runs on the integ-test server and on any cluster.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from es_rag.engine.base import Engine
from es_rag.engine.mapping import IndexContract
from es_rag.errors import BulkIndexingError, BulkRejectedError, EngineError, IndexContractError
from es_rag.generations import by_generation

# Writing with other vectors or other terms would silently corrupt ranking; with other ids
# a document's rows would no longer be found (and replaced) by their id; with another
# identity form an ACL written now would not match the callers of rows written before.
WRITE_KEYS = (
    "embedding_version",
    "dims",
    "analyzer_version",
    "mapping_version",
    "id_version",
    "identity",
)


def doc_query(tenant: str, doc_id: str) -> dict[str, Any]:
    """A document is its tenant plus its id: two tenants' ``handbook.md`` are two documents."""
    return {"bool": {"filter": [{"term": {"tenant_id": tenant}}, {"term": {"doc_id": doc_id}}]}}


# Fields added to the chunk mapping after indices were made with it: an index that lacks
# one gains it before the first write (add_later_fields).
LATER_FIELDS: dict[str, Any] = {"source_stamp": {"type": "keyword", "index": False}}

# Ids per state aggregation: well under the terms query's and the buckets' limits (each id
# brings about a dozen buckets; Elasticsearch allows 65,536 of each per request).
STATE_BATCH = 1000

# Three values of a field that should have one are enough to see it has several.
_STATE = {
    "hashes": {"terms": {"field": "doc_hash", "size": 3}},
    "versions": {"terms": {"field": "embedding_version", "size": 3}},
    "counts": {"terms": {"field": "chunk_count", "size": 3}},
    "stamps": {"terms": {"field": "source_stamp", "size": 3}},
    "children": {"filter": {"term": {"chunk_type": "child"}}},
}


def add_later_fields(engine: Engine, index: str) -> None:
    """Give a concrete index the fields added to mapping v1 since it was made (additive;
    its strict mapping would refuse rows that carry them)."""
    props = engine.mapping(index).get("properties", {})
    missing = {k: v for k, v in LATER_FIELDS.items() if k not in props}
    if missing:
        engine.put_mapping(index, missing)


def _doc_state(bucket: dict[str, Any]) -> DocState:
    def keys(name: str) -> tuple[Any, ...]:
        return tuple(b["key"] for b in bucket.get(name, {}).get("buckets", []))

    return DocState(
        count=int(bucket["doc_count"]),
        doc_hashes=keys("hashes"),
        embedding_versions=keys("versions"),
        chunk_counts=tuple(int(k) for k in keys("counts")),
        children=int(bucket.get("children", {}).get("doc_count", 0)),
        stamps=keys("stamps"),
    )


@dataclass(frozen=True)
class DocState:
    """What the index holds for one doc_id, enough to decide "unchanged"."""

    count: int
    doc_hashes: tuple[str, ...] = ()
    embedding_versions: tuple[str, ...] = ()
    chunk_counts: tuple[int, ...] = ()
    children: int = 0
    stamps: tuple[str, ...] = ()  # source_stamp values (files only; es_rag.files)

    def access_hash(self) -> str | None:
        """The ACL-and-metadata part of the one ``doc_hash`` of a whole document."""
        return self.doc_hashes[0][32:] if len(self.doc_hashes) == 1 else None

    def is_complete(self, *, doc_hash: str, embedding_version: str) -> bool:
        """One version, fully written (a crashed ingest leaves a mixed or short set)."""
        return self.doc_hashes == (doc_hash,) and self._whole(embedding_version)

    def file_stamp(self, *, key: str, access: str, embedding_version: str) -> str | None:
        """The file stamp (es_rag.files) of a whole document written from one file with
        this key and these access fields; None when anything would need a parse."""
        if len(self.stamps) != 1 or self.access_hash() != access:
            return None
        stamp, _, stored_key = self.stamps[0].rpartition(":")
        return stamp if stored_key == key and self._whole(embedding_version) else None

    def same_content(self, *, content_hash: str, embedding_version: str) -> bool:
        """Every row holds this content, fully written, whatever its access fields say:
        an ACL or metadata change (even a half-applied one) needs no new vectors."""
        return (
            bool(self.doc_hashes)
            and all(h[:32] == content_hash for h in self.doc_hashes)
            and self._whole(embedding_version)
        )

    def _whole(self, embedding_version: str) -> bool:
        return (
            self.embedding_versions == (embedding_version,)
            and len(self.chunk_counts) == 1
            and self.chunk_counts[0] == self.count
        )


@dataclass
class BulkOutcome:
    ok: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)


class ChunkIndex:
    """One alias and the concrete index behind it. Construction does no I/O."""

    def __init__(self, engine: Engine, alias: str) -> None:
        self.engine = engine
        self.alias = alias

    # --- lifecycle -----------------------------------------------------------------------
    def concrete_indices(self) -> list[str]:
        """By generation number: ``-10`` is newer than ``-9``."""
        return by_generation(self.alias, self.engine.alias_indices(self.alias))

    def exists(self) -> bool:
        return bool(self.concrete_indices())

    def contract(self) -> IndexContract | None:
        indices = self.concrete_indices()
        if not indices:
            return None
        meta = self.engine.mapping(indices[-1]).get("_meta") or {}
        return IndexContract.from_meta(meta)

    def mapping_properties(self) -> dict[str, Any]:
        indices = self.concrete_indices()
        if not indices:
            raise IndexContractError(f"no index behind {self.alias!r}")
        props: dict[str, Any] = self.engine.mapping(indices[-1]).get("properties", {})
        return props

    def ensure(self, body: dict[str, Any], contract: IndexContract) -> tuple[str, bool]:
        """Create ``<alias>-<n>`` with the alias if absent; otherwise check the contract.

        Returns (concrete index, created). Idempotent; refuses an index built with another
        embedding version, dimensions or analyzer.
        """
        indices = self.concrete_indices()
        if not indices and self.engine.index_exists(self.alias):
            # The name exists: a concrete index of that name, or the alias a writer
            # starting together with this one (a prefork worker's other process) has just
            # created since the first look.
            indices = self.concrete_indices()
            if not indices:
                raise IndexContractError(
                    f"{self.alias!r} is a concrete index, not an alias; es-rag needs the "
                    "name for its alias (set ES_RAG_INDEX to another name)"
                )
        if indices:
            self.check_contract(contract, keys=WRITE_KEYS)
            return indices[-1], False
        name = f"{self.alias}-{self._next_number()}"
        body = {**body, "aliases": {self.alias: {"is_write_index": True}}}
        try:
            self.engine.create_index(name, body)
        except EngineError:
            # Two writers (workers starting together) raced to create it: the loser finds
            # the winner's index and checks it like any existing one.
            if not self.concrete_indices():
                raise
            self.check_contract(contract, keys=WRITE_KEYS)
            return self.concrete_indices()[-1], False
        return name, True

    def check_contract(self, expected: IndexContract, *, keys: tuple[str, ...]) -> None:
        actual = self.contract()
        if actual is None:
            raise IndexContractError(
                f"index behind {self.alias!r} has no es-rag _meta; it was not created by es-rag"
            )
        if actual.id_version < expected.id_version and "id_version" in keys:
            raise IndexContractError(
                f"index behind {self.alias!r} was written by an es-rag whose document ids "
                "did not include the tenant (id version "
                f"{actual.id_version}, this es-rag writes {expected.id_version}); run "
                "`es-rag upgrade-index` once to rewrite its ids, hashes and principals in "
                "place (no re-embedding), or ingest into a new ES_RAG_INDEX"
            )
        diffs = actual.differences(expected, keys=keys)
        if diffs:
            raise IndexContractError(
                f"index behind {self.alias!r} does not match the configuration: "
                + "; ".join(diffs)
                + ". Use another ES_RAG_INDEX, or rebuild the index with the new settings."
            )

    def _next_number(self) -> int:
        pattern = re.compile(rf"^{re.escape(self.alias)}-(\d+)$")
        names = self.engine.list_indices(f"{self.alias}-*")
        numbers = [int(m.group(1)) for name in names if (m := pattern.match(name))]
        return max(numbers, default=0) + 1

    def refresh(self) -> None:
        self.engine.refresh(self.alias)

    # --- per document --------------------------------------------------------------------
    def doc_state(self, tenant: str, doc_id: str) -> DocState:
        return self.doc_states(tenant, [doc_id])[doc_id]

    def doc_states(self, tenant: str, doc_ids: Iterable[str]) -> dict[str, DocState]:
        """What the index holds for each of one tenant's documents: one aggregation per
        ``STATE_BATCH`` ids, not a request per document (a re-ingest of an unchanged
        corpus is mostly this)."""
        ids = list(dict.fromkeys(doc_ids))
        out = {doc_id: DocState(count=0) for doc_id in ids}
        for start in range(0, len(ids), STATE_BATCH):
            part = ids[start : start + STATE_BATCH]
            body = {
                "size": 0,
                "query": {
                    "bool": {
                        "filter": [
                            {"term": {"tenant_id": tenant}},
                            {"terms": {"doc_id": part}},
                        ]
                    }
                },
                "aggs": {"docs": {"terms": {"field": "doc_id", "size": len(part)}, "aggs": _STATE}},
            }
            resp = self.engine.search(self.alias, body)
            for bucket in resp.get("aggregations", {}).get("docs", {}).get("buckets", []):
                out[bucket["key"]] = _doc_state(bucket)
        return out

    def chunk_locations(self, tenant: str, doc_id: str) -> dict[str, str]:
        """chunk id → concrete index for every row of one tenant's document (scan)."""
        return self.locations(doc_query(tenant, doc_id))

    def locations(self, query: dict[str, Any]) -> dict[str, str]:
        """chunk id → concrete index for every row ``query`` matches (scan, no _source)."""
        return {
            hit["_id"]: hit["_index"]
            for hit in self.engine.scan(self.alias, {"query": query, "_source": False})
        }

    def doc_ids(self, *, tenant: str, prefix: str = "") -> set[str]:
        """Every doc id of ``tenant`` (optionally starting with ``prefix``), by aggregation."""
        query: dict[str, Any] = {"bool": {"filter": [{"term": {"tenant_id": tenant}}]}}
        if prefix:
            query["bool"]["filter"].append({"prefix": {"doc_id": prefix}})
        return {key["d"] for key in self._composite(query, {"d": "doc_id"})}

    def tenants_of(self, doc_id: str) -> set[str]:
        """The tenants holding a document with this id (operator tools resolve ambiguity)."""
        return {
            key["t"] for key in self._composite({"term": {"doc_id": doc_id}}, {"t": "tenant_id"})
        }

    def _composite(self, query: dict[str, Any], fields: dict[str, str]) -> Iterator[dict]:
        """Every distinct combination of ``fields`` among the rows ``query`` matches."""
        if not self.exists():
            return
        after: dict[str, Any] | None = None
        while True:
            comp: dict[str, Any] = {
                "size": 1000,
                "sources": [{name: {"terms": {"field": f}}} for name, f in fields.items()],
            }
            if after:
                comp["after"] = after
            body = {"size": 0, "query": query, "aggs": {"ids": {"composite": comp}}}
            agg = self.engine.search(self.alias, body).get("aggregations", {}).get("ids", {})
            buckets = agg.get("buckets", [])
            for b in buckets:
                yield b["key"]
            after = agg.get("after_key")
            if not buckets or not after:
                return

    # --- writes --------------------------------------------------------------------------
    def bulk(
        self,
        actions: Iterable[dict[str, Any]],
        *,
        chunk_size: int = 256,
        max_retries: int = 5,
        initial_backoff: float = 1.0,
    ) -> BulkOutcome:
        """Stream actions through the client library's ``helpers.streaming_bulk``.

        429s are retried with exponential backoff by the helper; every other per-item
        failure is collected (never dropped) for the caller to report or roll back.
        Connection failures raise ``EngineUnavailableError``.
        """
        outcome = BulkOutcome()
        for ok, item in self.engine.streaming_bulk(
            actions,
            chunk_size=chunk_size,
            max_retries=max_retries,
            initial_backoff=initial_backoff,
        ):
            if ok:
                outcome.ok += 1
                continue
            op, detail = next(iter(item.items()))
            if op == "delete" and detail.get("status") == 404:
                outcome.ok += 1  # already gone: the goal of a delete is met
                continue
            outcome.failures.append(
                {
                    "op": op,
                    "chunk_id": detail.get("_id"),
                    "status": detail.get("status"),
                    "error": detail.get("error"),
                }
            )
        return outcome

    def delete_chunks(self, locations: dict[str, str], *, chunk_size: int = 500) -> BulkOutcome:
        return self.bulk(_delete_actions(locations), chunk_size=chunk_size)

    def raise_on_failures(self, outcome: BulkOutcome, what: str) -> None:
        if outcome.failures:
            raise bulk_error(what, outcome.failures)


def bulk_error(what: str, failures: list[dict[str, Any]]) -> BulkIndexingError:
    """One error naming how many chunks failed and the first one's id and reason."""
    first = failures[0]
    reason = first.get("error")
    if isinstance(reason, dict):
        reason = f"{reason.get('type')}: {reason.get('reason')}"
    message = f"{what}: {len(failures)} chunk(s) failed, first {first.get('chunk_id')}: {reason}"
    if all(f.get("status") in (429, 503) for f in failures):
        # Rejected for load even after the client's own backoff: a later retry may pass.
        return BulkRejectedError(message, failures)
    return BulkIndexingError(message, failures)


def _delete_actions(locations: dict[str, str]) -> Iterator[dict[str, Any]]:
    for chunk_id, index in sorted(locations.items()):
        yield {"_op_type": "delete", "_index": index, "_id": chunk_id}
