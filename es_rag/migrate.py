"""``es-rag migrate``: move the alias to a new generation built with other settings.

A model, vector index type or analyzer change needs every chunk re-embedded or
re-analysed. This builds ``<alias>-<n+1>`` beside the served ``<alias>-<n>`` without
downtime and without re-parsing a file:

1. create the target from the new settings (its own ``_meta`` contract and recipe) and
   point ``<alias>-mirror`` at it: from then on every writer (inline ingest, workers,
   deletes, ACL updates) writes both generations (es_rag.generations);
2. backfill: page through the source's documents in a fixed order (a composite
   aggregation on tenant and id), copy each page's stored rows with new vectors (and new
   terms when the analyzer changed), and record the last page in the target's ``_meta``,
   so that a run after a crash or Ctrl-C continues where it stopped (ids are
   deterministic: copying a page twice writes the same rows). No ``_reindex``: the bare
   servers lack it, and it could not re-embed anyway;
3. verify: compare every document's rows (tenant, id, document hash, row count) in both
   generations and repair what differs from the source (a row copied just before a live
   delete, a page whose copy crashed), until a pass finds nothing; then, with a gate,
   compare retrieval quality on a judged dataset in both generations;
4. swap: one ``_aliases`` request moves the alias and the mirror together. The old
   generation stays mirrored, so ``--rollback`` (the same swap back) loses nothing
   written since; ``--drop-old`` ends the mirroring and deletes it.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from es_rag.analysis import TextAnalyzer
from es_rag.config import Settings
from es_rag.embedding import Embedder, build_embedder
from es_rag.engine.base import Engine
from es_rag.engine.index import ChunkIndex, doc_query
from es_rag.engine.mapping import ID_VERSION, recorded_recipe, recorded_settings
from es_rag.errors import DimensionMismatchError, IndexContractError
from es_rag.generations import (
    Generation,
    Generations,
    generation_number,
    mirror_alias,
    recipe_key,
)
from es_rag.rows import Retarget

log = logging.getLogger(__name__)

# Writers re-read the layout at least this often (es_rag.generations' ttl); the mirror
# alias is in place this long before the backfill reads a row, and gone this long before
# a generation is deleted.
SETTLE_S = 2.5
DocKey = tuple[str, str]  # (tenant, doc id)
Signature = Counter[str]  # doc_hash -> rows


@dataclass
class MigrationReport:
    """What one run did (``es-rag migrate`` prints it). Counts are this run's only."""

    alias: str
    source: str
    target: str
    state: str
    resumed: bool = False  # a stopped run's target, continued from its checkpoint
    source_rows: int = 0  # rows of the served generation at the last verify pass
    copied_rows: int = 0  # rows written into the target (children and parents)
    embedded: int = 0  # children re-embedded
    skipped_docs: int = 0  # documents the target already held as they are
    repaired_docs: int = 0  # documents copied again by the verify passes
    removed_docs: int = 0  # documents removed from the target (gone from the source)
    verify_passes: int = 0
    backfill_s: float = 0.0
    chunks_per_s: float = 0.0  # children re-embedded per second of backfill
    gate: dict[str, Any] | None = None
    swapped: bool = False
    message: str = ""
    timings_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class MigrationError(IndexContractError):
    """The migration cannot start or go on as asked (nothing was changed)."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


class Migrator:
    """One alias's migrations. Construction does no I/O; models load on first use."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        *,
        page_docs: int = 64,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.alias = settings.index
        self.mirror = mirror_alias(self.alias)
        self.page_docs = page_docs
        self.progress = progress
        # Told the source's row count and the rows a stopped run already did (a bar's ETA).
        self.on_total: Callable[[int, int], None] | None = None
        self.generations = Generations(engine, settings, ttl=0.0)
        self._embedders: dict[str, Embedder] = {}  # by recipe: each model loads once

    # --- state -----------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Every generation of the alias (by number), what serves and what is mirrored,
        and the migration in progress if any: ``es-rag info`` shows it."""
        layout = self.generations.layout(fresh=True)
        names = [
            n
            for n in self.engine.list_indices(f"{self.alias}-*")
            if generation_number(self.alias, n) is not None
        ]
        served = layout.primary.index if layout.primary else None
        mirrored = layout.mirror.index if layout.mirror else None
        out: list[dict[str, Any]] = []
        for name in sorted(names, key=lambda n: generation_number(self.alias, n) or 0):
            meta = self.generations.meta(name)
            out.append(
                {
                    "index": name,
                    "generation": generation_number(self.alias, name),
                    "role": "served" if name == served else "mirrored" if name == mirrored else "",
                    "rows": self.engine.count(name, {"match_all": {}}),
                    "embedding_model": meta.get("embedding_model"),
                    "migration": meta.get("migration"),
                }
            )
        migration = None
        if layout.mirror is not None:
            for gen in layout.targets():
                if gen.meta.get("migration"):
                    migration = {"target": gen.index, **gen.meta["migration"]}
        return {"served": served, "mirrored": mirrored, "indexes": out, "migration": migration}

    def _migration(self, gen: Generation) -> dict[str, Any]:
        return dict(self.generations.meta(gen.index).get("migration") or {})

    def _save(self, index: str, **changes: Any) -> None:
        """Record progress in the target's ``_meta`` (the whole ``_meta`` is replaced)."""
        self.generations.forget()
        meta = dict(self.generations.meta(index))
        meta["migration"] = {**(meta.get("migration") or {}), **changes, "updated_at": now_iso()}
        self.engine.put_meta(index, meta)
        self.generations.forget()

    # --- start or resume -------------------------------------------------------------------
    def start(self, overrides: dict[str, Any]) -> tuple[Generation, Generation, bool]:
        """(source, target, resumed): a new target, or the one a stopped run left."""
        layout = self.generations.layout(fresh=True)
        source = layout.primary
        if source is None or source.contract is None:
            raise MigrationError(f"no es-rag index behind {self.alias!r}: nothing to migrate")
        if source.contract.id_version < ID_VERSION:
            raise MigrationError(
                f"{source.index} has id version {source.contract.id_version}; run "
                "`es-rag upgrade-index` first"
            )
        wanted = self.generations.recipe(source).model_copy(update=overrides)
        if layout.mirror is not None:
            mirror = layout.mirror
            state = self._migration(mirror)
            if state.get("source") == source.index and state.get("state") == "backfilling":
                recorded = recorded_recipe(
                    self.generations.meta(mirror.index).get("settings") or {}
                )
                asked = recorded_settings(wanted)
                differ = sorted(k for k in asked if k in overrides and recorded.get(k) != asked[k])
                if differ:
                    raise MigrationError(
                        f"a migration to {mirror.index} ({recorded.get('embedding_model')}) is "
                        f"in progress and differs in {', '.join(differ)}: run it again with "
                        "the same settings to resume it, or `es-rag migrate --abort`"
                    )
                return source, mirror, True
            raise MigrationError(
                f"{self.alias!r} still mirrors {mirror.index} from an earlier migration: "
                "`es-rag migrate --drop-old` ends it (or --rollback swaps back)"
            )
        target = self._create_target(source, wanted)
        return source, target, False

    def _create_target(self, source: Generation, wanted: Settings) -> Generation:
        numbers = [
            generation_number(self.alias, n) for n in self.engine.list_indices(f"{self.alias}-*")
        ]
        # Never a number used before: long-lived processes remember what a name was made
        # with, so a dropped generation's name must not come back with another model.
        numbers.append(int(source.meta.get("retired_generation") or 0))
        name = f"{self.alias}-{max((n for n in numbers if n is not None), default=0) + 1}"
        embedder = self.embedder(wanted)
        assert source.contract is not None
        contract = replace(
            source.contract,
            embedding_model=embedder.model,
            embedding_version=embedder.embedding_version,
            dims=embedder.dims,
            similarity=wanted.similarity,
            analyzer_version=TextAnalyzer(wanted.analyzer_language).version,
        )
        body = self.engine.index_body(wanted, contract)
        body["mappings"]["_meta"]["migration"] = {
            "source": source.index,
            # Processes configured like the source follow the alias here after the swap.
            "source_settings": source.meta.get("settings") or recorded_settings(source.settings),
            "state": "backfilling",
            "after": None,
            "started_at": now_iso(),
        }
        self.engine.create_index(name, body)
        self.engine.update_aliases([{"add": {"index": name, "alias": self.mirror}}])
        # Writers re-read the layout at least every second, just before they write: after
        # this pause every write reaches both generations.
        time.sleep(SETTLE_S)
        self.generations.forget()
        mirror = self.generations.layout(fresh=True).mirror
        if mirror is None or mirror.index != name:
            raise MigrationError(f"{self.mirror} does not point at {name}; another migration?")
        return mirror

    def embedder(self, settings: Settings) -> Embedder:
        key = recipe_key(settings)
        if key not in self._embedders:
            self._embedders[key] = build_embedder(settings)
        return self._embedders[key]

    # --- backfill --------------------------------------------------------------------------
    def backfill(self, source: Generation, target: Generation, report: MigrationReport) -> None:
        """Copy every document page by page from the checkpoint; re-runnable."""
        state = self._migration(target)
        after, done = state.get("after"), int(state.get("rows_done") or 0)
        copier = self._copier(target)
        if self.on_total is not None:
            self.on_total(self.engine.count(source.index, {"match_all": {}}), done)
        t0 = time.perf_counter()
        while True:
            keys, after_next = self._doc_page(source.index, after)
            if not keys:
                break
            done += self._copy(source.index, copier, keys, report)
            after = after_next
            self._save(target.index, after=after, rows_done=done)
            if after is None:
                break
        report.backfill_s = round(time.perf_counter() - t0, 2)
        if report.backfill_s > 0:
            report.chunks_per_s = round(report.embedded / report.backfill_s, 1)

    def _copier(self, target: Generation) -> _Copier:
        settings = target.settings
        embedder = self.embedder(settings)
        contract = target.contract
        if contract is None:
            raise MigrationError(f"{target.index} has no es-rag _meta")
        if embedder.embedding_version != contract.embedding_version:
            raise MigrationError(
                f"{target.index} holds vectors of {contract.embedding_version!r}, its recorded "
                f"settings make {embedder.embedding_version!r}"
            )
        retarget = Retarget(
            index=target.index,
            analyzer=TextAnalyzer(settings.analyzer_language),
            embedding_model=embedder.model,
            embedding_version=contract.embedding_version,
            context_header_prefix=self.settings.context_header_prefix,
        )
        return _Copier(ChunkIndex(self.engine, target.index), embedder, retarget, contract.dims)

    def _doc_page(
        self, index: str, after: dict[str, Any] | None
    ) -> tuple[list[DocKey], dict[str, Any] | None]:
        comp: dict[str, Any] = {
            "size": self.page_docs,
            "sources": [
                {"t": {"terms": {"field": "tenant_id"}}},
                {"d": {"terms": {"field": "doc_id"}}},
            ],
        }
        if after:
            comp["after"] = after
        body = {"size": 0, "aggs": {"docs": {"composite": comp}}}
        agg = self.engine.search(index, body).get("aggregations", {}).get("docs", {})
        keys = [(b["key"]["t"], b["key"]["d"]) for b in agg.get("buckets", [])]
        return keys, agg.get("after_key") if keys else None

    def _copy(
        self, source: str, copier: _Copier, keys: Sequence[DocKey], report: MigrationReport
    ) -> int:
        """Copy the documents whose rows differ in the target; drop rows the target has
        and the source no longer has (for those documents). Returns the source's rows
        of these documents (copied or already there)."""
        rows = self.rows_of(source, keys)
        mine = _signatures(rows)
        theirs = self.signatures(copier.index.alias, keys)
        todo = [k for k in keys if mine.get(k) != theirs.get(k)]
        report.skipped_docs += len(keys) - len(todo)
        done_rows = sum(len(rows.get(k, [])) for k in keys if k not in todo)
        if self.progress and done_rows:
            self.progress(done_rows)
        if not todo:
            return done_rows
        sources = [row for k in todo for row in rows.get(k, [])]
        if sources:
            texts = copier.retarget.texts([src for _, src in sources])
            vectors: list[Any] = []
            if texts:
                embedded = copier.embedder.embed(texts, kind="passage")
                if embedded.shape[1] != copier.dims:
                    raise DimensionMismatchError(expected=copier.dims, got=int(embedded.shape[1]))
                vectors = list(embedded)  # numpy rows: the client serialises them as they are
            actions = copier.retarget.actions(sources, vectors)
            outcome = copier.index.bulk(actions, chunk_size=self.settings.bulk_chunk_size)
            copier.index.raise_on_failures(outcome, f"copying into {copier.index.alias}")
            report.copied_rows += len(sources)
            report.embedded += len(texts)
        # Rows of these documents that the source does not hold (an older version, a
        # document deleted after its page was read) go.
        keep = {cid for cid, _ in sources}
        stale: dict[str, str] = {}
        for k in todo:
            if k in theirs:
                for cid, idx in copier.index.chunk_locations(*k).items():
                    if cid not in keep:
                        stale[cid] = idx
        if stale:
            copier.index.raise_on_failures(
                copier.index.delete_chunks(stale), f"removing stale rows from {copier.index.alias}"
            )
        if self.progress and sources:
            self.progress(len(sources))
        return done_rows + len(sources)

    def rows_of(self, index: str, keys: Sequence[DocKey]) -> dict[DocKey, list[tuple[str, dict]]]:
        query = {"bool": {"should": [doc_query(t, d) for t, d in keys], "minimum_should_match": 1}}
        out: dict[DocKey, list[tuple[str, dict]]] = {}
        body = {"query": query, "_source": {"excludes": ["embedding"]}}
        for hit in self.engine.scan(index, body, size=500):
            src = hit["_source"]
            out.setdefault((src["tenant_id"], src["doc_id"]), []).append((hit["_id"], src))
        for rows in out.values():
            rows.sort(key=lambda r: (r[1].get("chunk_type", ""), r[1].get("ordinal", 0)))
        return out

    def signatures(
        self, index: str, keys: Sequence[DocKey] | None = None
    ) -> dict[DocKey, Signature]:
        """Per document: rows by document hash (all documents when ``keys`` is None)."""
        query: dict[str, Any] = {"match_all": {}}
        if keys is not None:
            query = {
                "bool": {"should": [doc_query(t, d) for t, d in keys], "minimum_should_match": 1}
            }
        out: dict[DocKey, Signature] = {}
        after: dict[str, Any] | None = None
        while True:
            comp: dict[str, Any] = {
                "size": 1000,
                "sources": [
                    {"t": {"terms": {"field": "tenant_id"}}},
                    {"d": {"terms": {"field": "doc_id"}}},
                    {"h": {"terms": {"field": "doc_hash"}}},
                ],
            }
            if after:
                comp["after"] = after
            body = {"size": 0, "query": query, "aggs": {"sig": {"composite": comp}}}
            agg = self.engine.search(index, body).get("aggregations", {}).get("sig", {})
            buckets = agg.get("buckets", [])
            for b in buckets:
                key = (b["key"]["t"], b["key"]["d"])
                out.setdefault(key, Counter())[b["key"]["h"]] += int(b["doc_count"])
            after = agg.get("after_key")
            if not buckets or not after:
                return out

    # --- verify ----------------------------------------------------------------------------
    def verify(
        self, source: Generation, target: Generation, report: MigrationReport, *, passes: int = 5
    ) -> list[DocKey]:
        """Repair what differs until a pass finds nothing; returns what still differs."""
        copier = self._copier(target)
        differ: list[DocKey] = []
        for _ in range(passes):
            self.engine.refresh(source.index)
            self.engine.refresh(target.index)
            report.verify_passes += 1
            mine, theirs = self.signatures(source.index), self.signatures(target.index)
            report.source_rows = sum(sum(c.values()) for c in mine.values())
            differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
            log.info("verify pass %d: %d document(s) differ", report.verify_passes, len(differ))
            if not differ:
                return []
            gone = [k for k in differ if k not in mine]
            for k in gone:
                copier.index.raise_on_failures(
                    copier.index.delete_chunks(copier.index.chunk_locations(*k)),
                    f"removing {k[1]} from {target.index}",
                )
            report.removed_docs += len(gone)
            present = [k for k in differ if k in mine]
            for start in range(0, len(present), self.page_docs):
                self._copy(source.index, copier, present[start : start + self.page_docs], report)
            report.repaired_docs += len(present)
        return differ

    # --- the whole run ----------------------------------------------------------------------
    def run(
        self,
        overrides: dict[str, Any],
        *,
        gate: Callable[[Generation, Generation], dict[str, Any]] | None = None,
        confirm: Callable[[str], bool] | None = None,
    ) -> MigrationReport:
        """Create or resume, backfill, verify, gate, swap. A failed check leaves the alias
        where it was (and the target mirrored, so running again resumes)."""
        t0 = time.perf_counter()
        source, target, resumed = self.start(overrides)
        report = MigrationReport(
            self.alias, source.index, target.index, "backfilling", resumed=resumed
        )
        report.timings_s["start"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        self.backfill(source, target, report)
        report.timings_s["backfill"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        differ = self.verify(source, target, report)
        report.timings_s["verify"] = round(time.perf_counter() - t0, 2)
        if differ:
            report.message = (
                f"{len(differ)} document(s) still differ after {report.verify_passes} passes "
                f"(first: {differ[0][0]}/{differ[0][1]}): heavy writes? run again to resume"
            )
            return report
        if gate is not None:
            t0 = time.perf_counter()
            report.gate = gate(source, target)
            report.timings_s["gate"] = round(time.perf_counter() - t0, 2)
            if not report.gate.get("passed"):
                report.message = f"gate failed: {report.gate.get('reason')}; the alias stays"
                return report
        question = f"move {self.alias!r} from {source.index} to {target.index}?"
        if confirm is not None and not confirm(question):
            report.message = "not swapped (declined); run again to swap"
            return report
        self.swap(serve=target.index, mirror=source.index)
        self._save(target.index, state="swapped", swapped_at=now_iso())
        report.state, report.swapped = "swapped", True
        report.message = (
            f"{self.alias!r} now serves {target.index}; {source.index} stays mirrored until "
            "`es-rag migrate --drop-old` (`--rollback` swaps back)"
        )
        return report

    # --- swap, rollback, drop ---------------------------------------------------------------
    def swap(self, serve: str, mirror: str) -> None:
        """One ``_aliases`` request: the alias to ``serve``, the mirror to ``mirror``."""
        self.engine.update_aliases(
            [
                {"remove": {"index": mirror, "alias": self.alias}},
                {"remove": {"index": serve, "alias": self.mirror}},
                {"add": {"index": serve, "alias": self.alias, "is_write_index": True}},
                {"add": {"index": mirror, "alias": self.mirror}},
            ]
        )
        self.generations.forget()

    def _finished_pair(self) -> tuple[Generation, Generation, Generation]:
        """(served, mirrored, the migration's target) of a finished migration."""
        layout = self.generations.layout(fresh=True)
        served, mirrored = layout.primary, layout.mirror
        if served is None or mirrored is None:
            raise MigrationError(f"{self.alias!r} mirrors no other generation: nothing to do")
        for gen in (served, mirrored):
            state = self._migration(gen)
            if state.get("state") in ("swapped", "rolled-back"):
                return served, mirrored, gen
        raise MigrationError(
            f"the migration to {mirrored.index} has not finished; run `es-rag migrate` again to "
            "resume it, or `es-rag migrate --abort` to abandon it"
        )

    def rollback(self) -> dict[str, Any]:
        """Serve the mirrored generation again (it has every write made since the swap)."""
        served, mirrored, target = self._finished_pair()
        self.swap(serve=mirrored.index, mirror=served.index)
        state = "swapped" if mirrored.index == target.index else "rolled-back"
        self._save(target.index, state=state)
        return {"served": mirrored.index, "mirrored": served.index, "state": state}

    def drop_old(self) -> dict[str, Any]:
        """End the mirroring and delete the generation that is not served."""
        served, mirrored, _ = self._finished_pair()
        self._unmirror_and_delete(mirrored.index)
        return {"served": served.index, "deleted": mirrored.index}

    def abort(self) -> dict[str, Any]:
        """Abandon a migration that has not swapped: its target is deleted."""
        layout = self.generations.layout(fresh=True)
        mirrored = layout.mirror
        if mirrored is None:
            raise MigrationError(f"no migration of {self.alias!r} in progress")
        if self._migration(mirrored).get("state") != "backfilling":
            raise MigrationError(
                f"{mirrored.index} is a finished migration's generation: use --rollback or "
                "--drop-old"
            )
        self._unmirror_and_delete(mirrored.index)
        return {
            "served": layout.primary.index if layout.primary else None,
            "deleted": mirrored.index,
        }

    def _unmirror_and_delete(self, index: str) -> None:
        served = self.generations.layout(fresh=True).primary
        number = generation_number(self.alias, index)
        if served is not None and number is not None:
            meta = dict(self.generations.meta(served.index))
            retired = max(number, int(meta.get("retired_generation") or 0))
            self.engine.put_meta(served.index, {**meta, "retired_generation": retired})
        self.engine.update_aliases([{"remove": {"index": index, "alias": self.mirror}}])
        # A writer that resolved the layout a moment ago may still write this generation:
        # deleting under it would let the server create a bare index of that name.
        time.sleep(SETTLE_S)
        self.engine.delete_index(index)
        self.generations.forget()


@dataclass(frozen=True)
class _Copier:
    index: ChunkIndex
    embedder: Embedder
    retarget: Retarget
    dims: int


def _signatures(rows: dict[DocKey, list[tuple[str, dict]]]) -> dict[DocKey, Signature]:
    return {k: Counter(src.get("doc_hash", "") for _, src in v) for k, v in rows.items()}


def dataset_gate(
    migrator: Migrator, dataset: Any, *, min_ratio: float, k: int = 10
) -> Callable[[Generation, Generation], dict[str, Any]]:
    """The gate ``es-rag eval --index`` would run, on both generations.

    The dataset's documents are ingested into the alias under the evaluation tenant (the
    mirror writes them into the target too, each with its own model), its questions run
    with the default hybrid search against each generation by its concrete name, and the
    documents are removed again, from both. Passes when the target's nDCG@k is at least
    ``min_ratio`` times the source's.
    """
    from es_rag import eval_runner as er
    from es_rag.parts import Parts
    from es_rag.pipeline import Ingestor

    metric = f"ndcg@{k}"

    def gate(source: Generation, target: Generation) -> dict[str, Any]:
        alias_settings = source.settings.model_copy(update={"index": migrator.alias})
        ingestor = Ingestor(
            alias_settings,
            client=migrator.engine,
            embedder=migrator.embedder(source.settings),
        )
        ingestor.generations.seed(migrator.embedder(target.settings), target.settings)
        scores: dict[str, float] = {}
        try:
            er.ingest_dataset(ingestor, dataset)
            migrator.engine.refresh(target.index)
            for gen in (source, target):
                settings = gen.settings.model_copy(update={"index": gen.index})
                parts = Parts(
                    settings, client=migrator.engine, embedder=migrator.embedder(gen.settings)
                )
                results, _ = er.run(
                    settings, dataset, [er.Variant("hybrid", "hybrid")], k=k, parts=parts
                )
                if "error" in results["hybrid"]:
                    raise MigrationError(f"gate on {gen.index}: {results['hybrid']['error']}")
                scores[gen.index] = float(results["hybrid"][metric])
        finally:
            ingestor.delete_tenant_rows(er.EVAL_TENANT)
        old, new = scores[source.index], scores[target.index]
        ratio = new / old if old > 0 else (1.0 if new == 0 else float("inf"))
        passed = ratio >= min_ratio
        return {
            "dataset": getattr(dataset, "name", ""),
            "metric": metric,
            "queries": len(dataset.queries),
            source.index: round(old, 4),
            target.index: round(new, 4),
            "ratio": round(ratio, 4),
            "min_ratio": min_ratio,
            "passed": passed,
            "reason": f"{metric} {new:.4f} is {ratio:.3f}x the served {old:.4f} "
            f"({'at least' if passed else 'below'} {min_ratio})",
        }

    return gate
