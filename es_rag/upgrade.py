"""``es-rag upgrade-index``: bring an index written by an older es-rag to the current contract.

Id version 1 (es-rag before tenant-scoped documents) made chunk ids from the document id
alone, kept tenants and principals exactly as given, and hashed metadata together with
the content. This rewrites such an index in place, without re-parsing or re-embedding:

- every row gets its id version 2 ``_id`` (tenant first) and ``parent_id``;
- tenants and principals are brought to the configured normal form (es_rag.acl);
- ``doc_hash`` gets its three parts (content, ACL, metadata). The old content part is kept
  as it was, and it included the metadata, so the first re-ingest of each document after
  the upgrade re-embeds it once; ACL and metadata updates work at once;
- status rows and version fences are re-keyed by tenant and document id;
- the mapping's ``_meta`` records id version 2 and the identity form, last.

It is safe to run again after a crash (rows already rewritten are recognised by their id).
Run it while nothing writes to the index: until it ends, a search may see a chunk twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from es_rag.acl import identity_policy, normalize_principal, normalize_tenant
from es_rag.engine.mapping import ID_VERSION
from es_rag.engine.status import status_key
from es_rag.errors import IndexContractError
from es_rag.generations import mirror_alias
from es_rag.pipeline import Ingestor
from es_rag.rows import chunk_id, hash_of

_ACCESS = ("allowed_principals", "denied_principals")


@dataclass
class UpgradeReport:
    index: str
    rows: int = 0
    rewritten: int = 0
    already: int = 0
    status_rows: int = 0
    fences: int = 0
    fences_dropped: list[str] = field(default_factory=list)
    collisions: int = 0
    done: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def upgrade_index(
    ingestor: Ingestor, *, progress: Callable[[int], None] | None = None
) -> list[UpgradeReport]:
    """Rewrite every concrete index behind the alias that is not at the current contract."""
    settings = ingestor.settings
    index = ingestor.index
    identity = identity_policy(settings.principal_case_sensitive)
    reports = []
    concrete = index.concrete_indices()
    if not concrete:
        raise IndexContractError(f"no index behind {settings.index!r}: nothing to upgrade")
    mirrored = ingestor.engine.alias_indices(mirror_alias(settings.index))
    if mirrored:
        # Rewritten ids here would not be the ids the mirrored generation holds.
        raise IndexContractError(
            f"{settings.index!r} mirrors {mirrored[0]} (a migration): finish it with "
            "`es-rag migrate --drop-old` or `--abort` before upgrading"
        )
    for name in concrete:
        meta = ingestor.engine.mapping(name).get("_meta") or {}
        report = UpgradeReport(index=name)
        if meta.get("id_version", 1) >= ID_VERSION and meta.get("identity") == identity:
            report.done = True
            reports.append(report)
            continue
        if meta.get("id_version", 1) >= ID_VERSION:
            raise IndexContractError(
                f"{name} holds identities in the form {meta.get('identity')!r}; changing "
                "ES_RAG_PRINCIPAL_CASE_SENSITIVE on a written index is not an upgrade: "
                "ingest into a new ES_RAG_INDEX instead"
            )
        _rewrite_rows(ingestor, name, report, progress)
        index.refresh()  # fences are placed by the tenants the rewritten rows name
        _rekey_status(ingestor, report)
        ingestor.engine.put_meta(name, {**meta, "id_version": ID_VERSION, "identity": identity})
        report.done = True
        reports.append(report)
    index.refresh()
    return reports


def _new_identity(src: dict[str, Any], case_sensitive: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "tenant_id": normalize_tenant(src["tenant_id"], case_sensitive=case_sensitive)
    }
    for key in _ACCESS:
        fields[key] = sorted(
            {normalize_principal(p, case_sensitive=case_sensitive) for p in src.get(key) or []}
        )
    return fields


def _rewrite_rows(
    ingestor: Ingestor,
    name: str,
    report: UpgradeReport,
    progress: Callable[[int], None] | None,
) -> None:
    engine = ingestor.engine
    cs = ingestor.settings.principal_case_sensitive
    # Pass 1: every row's new id, so that children can point at their parent's new id.
    new_ids: dict[str, str] = {}
    keys = ("tenant_id", "doc_id", "doc_version", "chunk_type", "ordinal")
    for hit in engine.scan(name, {"query": {"match_all": {}}, "_source": list(keys)}):
        src = hit["_source"]
        tenant = normalize_tenant(src["tenant_id"], case_sensitive=cs)
        new_ids[hit["_id"]] = chunk_id(
            tenant, src["doc_id"], src["doc_version"], src["chunk_type"], src["ordinal"]
        )
    report.rows = len(new_ids)
    targets = set(new_ids.values())
    report.collisions = len(new_ids) - len(targets)

    def actions() -> Iterator[dict[str, Any]]:
        whole = {"query": {"match_all": {}}, "_source": engine.vectors_source(name)}
        for hit in engine.scan(name, whole):
            old_id, src = hit["_id"], hit["_source"]
            new_id = new_ids.get(old_id)
            if new_id is None or new_id == old_id:
                report.already += 1
                continue
            src.update(_new_identity(src, cs))
            src["chunk_id"] = new_id
            if src.get("parent_id"):
                src["parent_id"] = new_ids.get(src["parent_id"], src["parent_id"])
            old_hash = str(src.get("doc_hash") or "")
            acl_part = hash_of({k: src[k] for k in ("tenant_id", "visibility", *_ACCESS)})
            src["doc_hash"] = old_hash[:32] + acl_part + hash_of(src.get("metadata") or {})
            report.rewritten += 1
            if progress:
                progress(1)
            yield {"_op_type": "index", "_index": name, "_id": new_id, "_source": src}

    outcome = ingestor.index.bulk(actions(), chunk_size=ingestor.settings.bulk_chunk_size)
    ingestor.index.raise_on_failures(outcome, f"rewriting the rows of {name}")
    # The new rows are written: only now do the old ones go.
    stale = {old: name for old, new in new_ids.items() if new != old and old not in targets}
    ingestor.index.raise_on_failures(ingestor.index.delete_chunks(stale), f"cleaning {name}")


def _rekey_status(ingestor: Ingestor, report: UpgradeReport) -> None:
    """Status rows keyed by doc id alone become keyed by tenant and doc id."""
    status = ingestor.status
    engine = ingestor.engine
    cs = ingestor.settings.principal_case_sensitive
    status.ensure()
    index_tenants = ingestor.index.tenants_of
    old_rows = {"bool": {"must_not": [{"exists": {"field": "tenant_id"}}]}}
    for hit in list(engine.scan(status.name, {"query": old_rows})):
        row, old_id = hit["_source"], hit["_id"]
        doc_id = row.get("doc_id", "")
        if row.get("kind") == "fence":
            tenants = {normalize_tenant(t, case_sensitive=cs) for t in index_tenants(doc_id)}
            if len(tenants) == 1:
                tenant = tenants.pop()
                status.fence(tenant, doc_id, int(row.get("doc_version") or 0))
                report.fences += 1
            else:  # no rows left, or the id is ambiguous: the fence cannot be placed
                report.fences_dropped.append(doc_id)
        else:
            raw = (row.get("payload") or {}).get("tenant")
            if raw is None:
                continue  # nothing says whose it was: leave it for the operator to read
            tenant = normalize_tenant(raw, case_sensitive=cs)
            row["tenant_id"] = tenant
            engine.put(status.name, status_key(tenant, doc_id), row)
            report.status_rows += 1
        engine.delete_doc(status.name, old_id)
