"""The Ingestor: one document end to end: parse, chunk, analyse, embed, write, drop stale.

Used inline by the CLI and by the Celery worker. The write order is what keeps
readers safe: a changed document's new chunks are written first, then the chunks that are
not in the new set are deleted, so a reader never sees the document vanish; a failed write
rolls back what it added, so no document is left half-indexed.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from es_rag.acl import identity_policy, normalize_acl, normalize_tenant
from es_rag.analysis import TextAnalyzer
from es_rag.chunking import (
    CHUNKER_VERSION,
    Counter,
    chunk_elements,
    text_elements,
)
from es_rag.config import Settings
from es_rag.embedding import Embedder
from es_rag.engine.index import (
    WRITE_KEYS,
    ChunkIndex,
    DocState,
    add_later_fields,
    bulk_error,
    doc_query,
)
from es_rag.engine.mapping import ID_VERSION, IndexContract
from es_rag.engine.status import StatusIndex
from es_rag.errors import (
    BulkIndexingError,
    DimensionMismatchError,
    EmptyDocumentError,
    EngineUnavailableError,
    EsRagError,
    IndexBlockedError,
    IndexContractError,
    InputError,
    NoTextError,
    TransientError,
)
from es_rag.files import FolderResolver, WalkFilter, expand_paths, load_document, same_file
from es_rag.generations import Generation, Generations, Layout
from es_rag.parsing import Parser, parser_version
from es_rag.parts import Parts
from es_rag.rows import (
    Retarget,
    RowMaker,
    access_actions,
    access_hash,
    acl_hash,
    chunk_id,
    embedding_text,
    fence_version,
    parser_of,
)
from es_rag.types import AccessControl, Chunk, Document, IngestResult, IngestStatus

log = logging.getLogger(__name__)

# Where users import them from: the row helpers (es_rag.rows) and the file helpers
# (es_rag.files) lived here before.
__all__ = [
    "Ingestor",
    "access_actions",
    "acl_hash",
    "chunk_id",
    "embedding_text",
    "expand_paths",
    "fence_version",
    "load_document",
]


class Ingestor(Parts):
    """Writes documents into the chunk index. Construction does no I/O; parts load lazily."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: Any = None,
        embedder: Embedder | None = None,
        analyzer: TextAnalyzer | None = None,
    ) -> None:
        super().__init__(settings, client=client, embedder=embedder, analyzer=analyzer)
        self._index: ChunkIndex | None = None
        self._status: StatusIndex | None = None
        self._unblocked_at: float | None = None
        self._ready = False
        self._dims = 0
        self._parser: Parser | None = None
        self._tokens: tuple[Counter, int | None] | None = None
        self._row_maker: RowMaker | None = None
        # The analyzer this process was configured with; the one in use may be the
        # variant the served generation was made with (_adopt_analyzer).
        self._configured_analyzer: TextAnalyzer | None = None
        self._generations: Generations | None = None

    @property
    def parser(self) -> Parser:
        """Unstructured in a sandboxed child; its server starts with the first file."""
        if self._parser is None:
            self._parser = Parser(self.settings)
        return self._parser

    @property
    def tokens(self) -> tuple[Counter, int | None]:
        """How chunk sizes are counted (the embedding model's tokenizer) and the room a
        chunk has in the model's input (its limit less the passage prefix)."""
        if self._tokens is None:
            count, limit = self.embedder.token_counter()
            if limit is not None and self.settings.passage_prefix:
                limit -= count(self.settings.passage_prefix)
            self._tokens = (count, limit)
        return self._tokens

    @property
    def index(self) -> ChunkIndex:
        if self._index is None:
            self._index = ChunkIndex(self.engine, self.settings.index)
        return self._index

    @property
    def generations(self) -> Generations:
        """The generation behind the alias and, during a migration, the mirrored one."""
        if self._generations is None:
            self._generations = Generations(self.engine, self.settings)
        return self._generations

    @property
    def row_maker(self) -> RowMaker:
        """What rows look like for this ingestor (pure; es_rag.rows)."""
        if self._row_maker is None:
            self._row_maker = RowMaker(
                settings=self.settings,
                analyzer=self.analyzer,
                embedding_model=self.embedder.model,
                embedding_version=self.embedder.embedding_version,
            )
        return self._row_maker

    @property
    def status(self) -> StatusIndex:
        """Ingest outcomes and version fences (``<alias>-status``), created on first use."""
        if self._status is None:
            s = self.settings
            self._status = StatusIndex(self.engine, s.index, replicas=s.number_of_replicas)
        return self._status

    def contract(self) -> IndexContract:
        return IndexContract(
            embedding_model=self.embedder.model,
            embedding_version=self.embedder.embedding_version,
            dims=self.embedder.dims,
            similarity=self.settings.similarity,
            analyzer_version=self.analyzer.version,
            chunker_version=CHUNKER_VERSION,
            parser_version=parser_version(),
            id_version=ID_VERSION,
            identity=identity_policy(self.settings.principal_case_sensitive),
        )

    def init_index(self) -> tuple[str, bool]:
        """Create the index and alias if absent, else check the existing one's contract.

        During or after a migration (es_rag.generations) a writer configured for the
        mirrored generation is checked against that one: it keeps writing both.
        """
        layout = self.generations.layout(fresh=True)
        own = layout.own()
        self._adopt_analyzer(own)
        contract = self.contract()
        if own is not None and layout.primary is not None and own is not layout.primary:
            diffs = own.contract.differences(contract, keys=WRITE_KEYS) if own.contract else []
            if own.contract is None or diffs:
                raise IndexContractError(
                    f"{own.index} (mirrored behind {self.settings.index!r}) does not match "
                    "the configuration: " + ("; ".join(diffs) or "it has no es-rag _meta")
                )
            self._add_later_fields(layout)
            self._dims = contract.dims
            self._ready = True
            return layout.primary.index, False
        name, created = self.index.ensure(self.engine.index_body(self.settings, contract), contract)
        if created:
            self.generations.forget()
        else:
            # The layout read above still holds: ensure() created nothing.
            self._add_later_fields(layout)
        # ensure() checked that the index's dims equal the contract's; a remote embedding
        # server that later changes model is still caught per batch against this number.
        self._dims = contract.dims
        self._ready = True
        return name, created

    def _adopt_analyzer(self, gen: Generation | None) -> None:
        """Analyse as the index recorded when this code can still do so
        (``TextAnalyzer.variant``): an index made before Traditional-to-Simplified folding
        keeps its terms consistent until ``es-rag migrate`` re-analyses it."""
        if gen is None or gen.contract is None:
            return
        recorded = gen.contract.analyzer_version
        if recorded == self.analyzer.version:
            return
        if self._configured_analyzer is None:
            self._configured_analyzer = self.analyzer
        made = self._configured_analyzer.variant(recorded)
        if made is not None:  # else the contract check refuses the index
            self._analyzer = made
            self._row_maker = None

    def _add_later_fields(self, layout: Layout) -> None:
        for gen in layout.targets():
            add_later_fields(self.engine, gen.index)

    # --- one document ----------------------------------------------------------------------
    def ingest(self, doc: Document, *, refresh: bool = False) -> IngestResult:
        """Ingest one document; its failure is raised (see ``ingest_many`` for reports)."""
        outcome = self._ingest_batch([doc], refresh=refresh)[0]
        if isinstance(outcome, EsRagError):
            raise outcome
        return outcome

    def ingest_many(self, docs: Sequence[Document], *, refresh: bool = False) -> list[IngestResult]:
        """Ingest documents together (one embedding stream, one bulk stream).

        A document that fails is reported in its result and loses nothing that was indexed
        before; the others still ingest. A dead server raises ``EngineUnavailableError``.
        """
        return [
            error_outcome(doc.doc_id, out, tenant=doc.acl.tenant_id)
            if isinstance(out, EsRagError)
            else out
            for doc, out in zip(docs, self._ingest_batch(docs, refresh=refresh), strict=True)
        ]

    def ingest_each(self, docs: Sequence[Document]) -> list[IngestResult | EsRagError]:
        """``ingest_many`` with each failure as the error itself: a queue batch retries the
        documents whose error is transient and fails the rest."""
        return self._ingest_batch(docs, refresh=False)

    def _ingest_batch(
        self, docs: Sequence[Document], *, refresh: bool
    ) -> list[IngestResult | EsRagError]:
        if not self._ready:
            self.init_index()
        out: list[IngestResult | EsRagError | None] = [None] * len(docs)
        plans: list[_Plan] = []
        targets = self._targets()
        keys = [(self._tenant(doc), doc.doc_id) for doc in docs]
        last = {key: i for i, key in enumerate(keys)}
        candidates: list[_Plan] = []
        for i, doc in enumerate(docs):
            try:
                plan = self._plan(i, doc)
            except EsRagError as exc:
                out[i] = exc
                continue
            tenant, doc_id = plan.doc.acl.tenant_id, plan.doc.doc_id
            if last[keys[i]] != i:
                # The same document again further on in this batch: that one is the newest.
                out[i] = plan.result("skipped", reason="superseded")
                continue
            if plan.fence is not None and not self.status.fence(tenant, doc_id, plan.fence):
                newest = self.status.newest_version(tenant, doc_id)
                out[i] = plan.result("skipped", reason="stale-version")
                out[i].error = f"version {plan.fence} is older than {newest}, already accepted"  # type: ignore[union-attr]
                continue
            candidates.append(plan)

        known = self._states(targets, [(p.doc.acl.tenant_id, p.doc.doc_id) for p in candidates])
        for plan in candidates:
            i, tenant, doc_id = plan.position, plan.doc.acl.tenant_id, plan.doc.doc_id
            states = known[(tenant, doc_id)]
            if all(
                st.is_complete(doc_hash=plan.doc_hash, embedding_version=t.version)
                for t, st in zip(targets, states, strict=True)
            ):
                # Nothing to chunk, embed or write: the counts are the index's.
                plan.counts = (states[0].children, states[0].count - states[0].children)
                out[i] = plan.result("skipped", reason="unchanged")
                self._restamp(plan, targets, states)
                continue
            try:
                self._chunk(plan)
            except EsRagError as exc:
                out[i] = exc
                continue
            if all(
                st.same_content(content_hash=plan.doc_hash[:32], embedding_version=t.version)
                for t, st in zip(targets, states, strict=True)
            ):
                # Only the ACL or metadata changed: rewrite those fields, embed nothing.
                try:
                    out[i] = self._rewrite_access(plan, targets, states)
                    continue
                except BulkIndexingError as exc:
                    if isinstance(exc, TransientError):
                        out[i] = exc
                        continue
                    # A server that cannot update these rows in place: write them anew.
                    log.warning("%s: access-only update refused (%s); rewriting", doc_id, exc)
                except EsRagError as exc:
                    out[i] = exc
                    continue
            plan.old = {
                t.name: t.index.chunk_locations(tenant, doc_id) if st.count else {}
                for t, st in zip(targets, states, strict=True)
            }
            plans.append(plan)

        if plans:
            self._write(plans, out)
        if refresh:
            self.index.refresh()
        return [o for o in out if o is not None]

    def _states(
        self, targets: list[_Target], docs: list[tuple[str, str]]
    ) -> dict[tuple[str, str], list[DocState]]:
        """Each (tenant, doc id)'s state in every target: one request per tenant and
        target for the whole batch (es_rag.engine.index.ChunkIndex.doc_states)."""
        if docs:
            self._see_writes([t.name for t in targets])
        by_tenant: dict[str, list[str]] = {}
        for tenant, doc_id in docs:
            by_tenant.setdefault(tenant, []).append(doc_id)
        out: dict[tuple[str, str], list[DocState]] = {key: [] for key in docs}
        for target in targets:
            for tenant, ids in by_tenant.items():
                for doc_id, state in target.index.doc_states(tenant, ids).items():
                    out[(tenant, doc_id)].append(state)
        return out

    def _see_writes(self, names: Sequence[str]) -> None:
        """Publish every write already acknowledged to these indices before rows are
        looked up.

        Rows are found by search (states, chunk locations), and a search sees only what
        the last refresh published (once a second, or at the next search of an idle
        shard). Without this a version written a moment ago, by this process or another,
        was invisible: its replacement left its rows behind (stale text, the old ACL), and
        a delete or an ACL change right after an ingest found nothing. A refresh with
        nothing pending is a round trip; one per batch, not per document.
        """
        self.engine.refresh(",".join(dict.fromkeys(names)))

    def _targets(self, *, adopt: bool = True) -> list[_Target]:
        """Where this batch writes: the alias's generation, then a mirrored one.

        ``adopt`` (a batch's first look, before any row is made): analyse as the
        generation this process writes was made (``_adopt_analyzer``), which a migration's
        swap can change under a long-lived worker.
        """
        layout = self.generations.layout()
        if layout.own() is None:
            # Reconfigured, or the generation this process was made for has been dropped:
            # the contract check says which (and refuses a model that does not fit).
            self.init_index()
            layout = self.generations.layout(fresh=True)
        own = layout.own() or layout.primary
        if adopt:
            self._adopt_analyzer(own)
        return [self._target(g, configured=g is own) for g in layout.targets()]

    def _target(self, gen: Generation, *, configured: bool) -> _Target:
        recorded = gen.contract.analyzer_version if gen.contract else None
        if configured and recorded in (None, self.analyzer.version):
            return _Target(gen.index, ChunkIndex(self.engine, gen.index), self.embedder, None)
        # Another model, or rows made before a swap changed the analysis they need: each
        # row is remade (es_rag.rows.Retarget).
        embedder = self.generations.embedder(gen, self.embedder)
        retarget = Retarget(
            index=gen.index,
            analyzer=self.generations.analyzer(gen, self.analyzer),
            embedding_model=embedder.model,
            embedding_version=gen.embedding_version or embedder.embedding_version,
            context_header_prefix=self.settings.context_header_prefix,
        )
        dims = gen.contract.dims if gen.contract else 0
        return _Target(gen.index, ChunkIndex(self.engine, gen.index), embedder, retarget, dims)

    def _tenant(self, doc: Document) -> str:
        try:
            return normalize_tenant(
                doc.acl.tenant_id, case_sensitive=self.settings.principal_case_sensitive
            )
        except EsRagError:
            return doc.acl.tenant_id  # reported by the document's own plan

    def _restamp(self, plan: _Plan, targets: list[_Target], states: list[DocState]) -> None:
        """A file read alike by a new parser (or found again after its stamp changed):
        its rows get the new stamp and parser version, so that the next ingest skips it
        without a parse; nothing is embedded. A failure only costs that parse again."""
        stamp = self.row_maker.stamp(plan.doc)
        if stamp is None or all(st.stamps == (stamp,) for st in states):
            return
        fields = {"source_stamp": stamp, "parser_version": parser_of(plan.doc)}
        doc = plan.doc
        for target in targets:
            try:
                locations = target.index.chunk_locations(doc.acl.tenant_id, doc.doc_id)
                outcome = target.index.bulk(
                    access_actions(locations, fields),
                    chunk_size=self.settings.bulk_chunk_size,
                    max_retries=self.settings.bulk_max_retries,
                    initial_backoff=self.settings.bulk_initial_backoff,
                )
                target.index.raise_on_failures(outcome, f"restamping {doc.doc_id}")
            except EsRagError as exc:
                log.warning("%s is unchanged but keeps its old stamp: %s", doc.doc_id, exc)

    def _rewrite_access(
        self, plan: _Plan, targets: list[_Target], states: list[DocState]
    ) -> IngestResult:
        """The access-only path of ``ingest`` (``update_acl`` sends the same updates):
        every row of the document gets the new access fields, metadata and hash; no parse
        result is written and nothing is embedded.

        A partial failure leaves rows with two hashes of the same content, which the next
        attempt recognises and rewrites again (never a re-embedding).
        """
        t0 = time.perf_counter()
        doc = plan.doc
        blocks = self._write_blocks()
        if blocks:
            raise IndexBlockedError(
                f"the index refuses writes ({', '.join(blocks)}); nothing was changed"
            )
        for target, state in zip(targets, states, strict=True):
            fields = {**doc.acl.as_fields(), "doc_hash": plan.doc_hash}
            reset_metadata = any(h[64:] != plan.doc_hash[64:] for h in state.doc_hashes)
            if reset_metadata:
                fields["metadata"] = doc.metadata
            locations = target.index.chunk_locations(doc.acl.tenant_id, doc.doc_id)
            outcome = target.index.bulk(
                access_actions(locations, fields, reset_metadata=reset_metadata),
                chunk_size=self.settings.bulk_chunk_size,
                max_retries=self.settings.bulk_max_retries,
                initial_backoff=self.settings.bulk_initial_backoff,
            )
            target.index.raise_on_failures(
                outcome, f"updating the access fields of {doc.doc_id} in {target.name}"
            )
        plan.timings["index"] = _ms(t0)
        return plan.result("indexed", reason="access-only")

    def _plan(self, position: int, doc: Document) -> _Plan:
        """What the document's rows would be named and hashed: enough to find it
        unchanged before any chunking (``_chunk`` makes the chunks)."""
        # Identity strings in their one form, whoever built the ACL (DESIGN.md §5).
        acl = normalize_acl(doc.acl, case_sensitive=self.settings.principal_case_sensitive)
        if acl != doc.acl:
            doc = dataclasses.replace(doc, acl=acl)
        title = doc.title or doc.doc_id
        doc_hash = self.row_maker.doc_hash(doc, title)
        plan = _Plan(position, doc, title, [], doc_hash, doc.doc_version or doc_hash[:16])
        plan.fence = fence_version(doc.doc_version)
        return plan

    def _chunk(self, plan: _Plan) -> None:
        t0 = time.perf_counter()
        count, limit = self.tokens
        plan.chunks = chunk_elements(
            plan.doc.elements or text_elements(plan.doc.text),
            title=plan.title,
            size=self.settings.chunk_size,
            overlap=self.settings.chunk_overlap,
            parent_size=self.settings.parent_chunk_size,
            count_tokens=count,
            max_tokens=limit,
        )
        if not plan.chunks:
            raise EmptyDocumentError(f"{plan.doc.doc_id}: no text to index")
        plan.timings["chunk"] = _ms(t0)

    def _write(self, plans: list[_Plan], out: list[IngestResult | EsRagError | None]) -> None:
        """Embed every planned chunk, write all rows, then roll back or clean up per doc.

        The order keeps readers safe: new rows first, old rows deleted last; an attempt that
        failed (or was overtaken by a newer version) removes only what it added. With a
        mirrored generation, the alias's generation is written and cleaned first, then
        the mirror for the documents that succeeded there.
        """
        t0 = time.perf_counter()
        refused = self._refusal(plans)
        if refused is None:
            refused = self._embed(plans)
        if isinstance(refused, EsRagError):
            for p in plans:
                out[p.position] = refused
            return
        embed_ms, total = _ms(t0), max(sum(len(p.children) for p in plans), 1)
        t0 = time.perf_counter()
        # Once more: a migration may have begun (or swapped) while this batch embedded, and
        # a mirror that appeared must get these rows too (in the analysis they were made
        # with: a generation that needs another gets them remade).
        targets = self._targets(adopt=False)
        appeared = [t.name for t in targets if any(t.name not in p.old for p in plans)]
        if appeared:
            self._see_writes(appeared)
        for target in targets:
            for p in plans:
                if target.name not in p.old:
                    tenant, doc_id = p.doc.acl.tenant_id, p.doc.doc_id
                    p.old[target.name] = target.index.chunk_locations(tenant, doc_id)
        stale_failures: dict[str, dict[str, Any]] = {}
        for n, target in enumerate(targets):
            live = [p for p in plans if p.ok]
            if not live:
                break
            self._bulk_write(target, live)
            if n == 0:
                self._mark_superseded(live)
            stale_failures.update(self._clean_up(target, live))
        index_ms = _ms(t0)
        for p in plans:
            p.timings["embed"] = embed_ms * len(p.children) / total
            p.timings["index"] = index_ms * len(p.children) / total
            out[p.position] = self._outcome(p, stale_failures)

    def _refusal(self, plans: list[_Plan]) -> EsRagError | None:
        blocks = self._write_blocks()
        if not blocks:
            return None
        return IndexBlockedError(
            f"the index refuses writes ({', '.join(blocks)}); free disk space or lift the "
            "block, then requeue: nothing was written"
        )

    def _embed(self, plans: list[_Plan]) -> EsRagError | None:
        """One embedding stream for every child of the batch; each plan gets its rows."""
        prefix = self.settings.context_header_prefix
        texts = [embedding_text(c, prefix=prefix) for p in plans for c in p.children]
        try:
            vectors = self.embedder.embed(texts, kind="passage")
            if vectors.shape[1] != self._dims:
                raise DimensionMismatchError(expected=self._dims, got=int(vectors.shape[1]))
        except EsRagError as exc:
            return exc
        start = 0
        for p in plans:
            # numpy rows, not lists: the client's serializer writes them as they are
            part = list(vectors[start : start + len(p.children)])
            start += len(p.children)
            p.rows = list(
                self.row_maker.rows(p.doc, p.title, p.chunks, part, p.doc_hash, p.version)
            )
            p.new_ids = {row["_id"] for row in p.rows}
        return None

    def _bulk_write(self, target: _Target, plans: list[_Plan]) -> None:
        """The plans' rows into one generation: as made, or remade with its model."""
        rows: list[dict[str, Any]]
        if target.retarget is None:
            rows = [{**row, "_index": target.name} for p in plans for row in p.rows]
        else:
            sources = [(row["_id"], row["_source"]) for p in plans for row in p.rows]
            try:
                vectors = target.embedder.embed(
                    target.retarget.texts([src for _, src in sources]), kind="passage"
                )
                if vectors.shape[1] != target.dims:
                    raise DimensionMismatchError(expected=target.dims, got=int(vectors.shape[1]))
            except EsRagError as exc:
                for p in plans:
                    p.error = exc
                return
            rows = list(target.retarget.actions(sources, list(vectors)))
        owner = {cid: p for p in plans for cid in p.new_ids}
        outcome = target.index.bulk(
            rows,
            chunk_size=self.settings.bulk_chunk_size,
            max_retries=self.settings.bulk_max_retries,
            initial_backoff=self.settings.bulk_initial_backoff,
        )
        for failure in outcome.failures:
            owner[failure["chunk_id"]].failures.append(failure)

    def _mark_superseded(self, plans: list[_Plan]) -> None:
        """A newer version accepted while this one was being written wins."""
        for p in plans:
            if p.fence is not None and not p.failures:
                newest = self.status.newest_version(p.doc.acl.tenant_id, p.doc.doc_id)
                if newest is not None and newest > p.fence:
                    p.superseded = newest

    def _clean_up(self, target: _Target, plans: list[_Plan]) -> dict[str, dict[str, Any]]:
        """Roll back failed or overtaken attempts; delete the rows the new version replaced.

        Returns the stale deletes that failed, by chunk id.
        """
        rollback: dict[str, str] = {}
        stale: dict[str, str] = {}
        for p in plans:
            old = p.old.get(target.name, {})
            if not p.ok:
                # What this attempt added goes; the previous version stays whole.
                rollback.update({i: target.name for i in p.new_ids - set(old)})
            else:
                stale.update({c: idx for c, idx in old.items() if c not in p.new_ids})
        if rollback:
            target.index.delete_chunks(rollback)
        if not stale:
            return {}
        return {f["chunk_id"]: f for f in target.index.delete_chunks(stale).failures}

    def _outcome(
        self, p: _Plan, stale_failures: dict[str, dict[str, Any]]
    ) -> IngestResult | EsRagError:
        if p.superseded is not None:
            res = p.result("skipped", reason="stale-version")
            res.error = f"version {p.fence} was superseded by {p.superseded} while writing"
            return res
        if p.failures:
            return bulk_error(f"indexing {p.doc.doc_id}", p.failures)
        if p.error is not None:
            return p.error
        old = next(iter(p.old.values()), {})
        gone = [c for c in old if c not in p.new_ids]
        leftover = [stale_failures[c] for c in gone if c in stale_failures]
        if leftover:
            return bulk_error(f"deleting stale chunks of {p.doc.doc_id}", leftover)
        return p.result("indexed", deleted=len(gone))

    def _write_blocks(self) -> list[str]:
        """The index's write blocks; a clear answer is trusted for 10 s (one request per
        batch is a noticeable share of a one-document queue task), a block never."""
        now = time.monotonic()
        if self._unblocked_at is not None and now - self._unblocked_at < 10.0:
            return []
        blocks = self.engine.write_blocks(self.settings.index)
        self._unblocked_at = None if blocks else now
        return blocks

    # --- files ---------------------------------------------------------------------------
    def ingest_paths(
        self,
        paths: Sequence[str | Path],
        *,
        acl: AccessControl,
        doc_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        on_result: Callable[[IngestResult], None] | None = None,
        exclude: WalkFilter | None = None,
        batch_docs: int = 128,
        batch_chars: int = 256 * 1024,
    ) -> list[IngestResult]:
        """Ingest files and folders; a bad file is reported and the others still ingest.

        Folder walks leave out what ``exclude`` names (by default the settings' patterns,
        ``WalkFilter.of``): each is reported as skipped, reason "excluded".

        Files are read and ingested in batches of up to ``batch_docs`` files and
        ``batch_chars`` characters of text, so that many small files share embedding
        batches and bulk requests: an embedding call needs more than two batches of texts
        before its streams share them out (at 32 one-chunk files a call had two).
        """
        listed = list(expand_paths(paths, exclude or WalkFilter.of(self.settings)))
        if doc_id is not None and len(listed) != 1:
            raise InputError("--doc-id names one document: give exactly one file")
        results: list[IngestResult] = []
        unavailable: str | None = None

        def report(result: IngestResult) -> None:
            results.append(result)
            if on_result:
                on_result(result)

        batch: list[Document] = []
        chars = 0
        readable = [(f.path, doc_id or str(f.path)) for f in listed if f.to_read]
        unchanged: dict[str, IngestResult] = {}
        try:
            unchanged = self.unchanged_files(readable, acl=acl, metadata=metadata)
        except EngineUnavailableError as exc:
            unavailable = str(exc)

        flushed = False

        def flush() -> None:
            nonlocal unavailable, flushed, chars
            if not batch:
                return
            flushed = True
            chars = 0
            try:
                done = self.ingest_many(batch)
            except EngineUnavailableError as exc:
                unavailable = str(exc)
                done = [error_outcome(d.doc_id, exc, tenant=d.acl.tenant_id) for d in batch]
            for result in done:
                report(result)
            batch.clear()

        for path, listed_error, excluded in listed:
            given = doc_id or str(path)
            if excluded:
                report(IngestResult(doc_id=given, status="skipped", reason="excluded"))
                continue
            if unavailable:
                report(
                    IngestResult(
                        doc_id=given,
                        status="failed",
                        error_type="EngineUnavailableError",
                        error=f"not attempted: {unavailable}",
                    )
                )
                continue
            if listed_error:
                report(
                    IngestResult(
                        doc_id=given, status="failed", error=listed_error, error_type="InputError"
                    )
                )
                continue
            if given in unchanged:
                report(unchanged[given])
                continue
            try:
                doc = load_document(
                    path, parser=self.parser, acl=acl, doc_id=doc_id, metadata=metadata
                )
            except EsRagError as exc:
                report(error_outcome(given, exc, tenant=acl.tenant_id))
            else:
                batch.append(doc)
                chars += len(doc.text) + sum(len(e.text) for e in doc.elements)
            if len(batch) >= batch_docs or chars >= batch_chars:
                flush()
        flush()
        if flushed and self._ready and not unavailable:
            self.index.refresh()  # nothing to show when every file was unchanged or failed
        return results

    def unchanged_files(
        self,
        files: Sequence[tuple[Path, str]],
        *,
        acl: AccessControl,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, IngestResult]:
        """The ``(path, doc id)`` files that need no parse: every generation holds their
        rows whole, written from the same bytes (size and time, or hash), at the same
        place, by the same recipe, with these access fields and metadata.

        One state request per 1,000 files (ChunkIndex.doc_states); the rest is a ``stat``
        per file (and a hash of the bytes where the time moved but the size did not).
        """
        try:
            acl = normalize_acl(acl, case_sensitive=self.settings.principal_case_sensitive)
        except EsRagError:
            return {}  # each file's own ingest reports the ACL's problem
        if not files:
            return {}
        if not self._ready:
            self.init_index()
        access = access_hash(acl, dict(metadata or {}))
        targets = self._targets()
        known = self._states(targets, [(acl.tenant_id, doc_id) for _, doc_id in files])
        out: dict[str, IngestResult] = {}
        resolve = FolderResolver()
        for path, doc_id in files:
            states = known[(acl.tenant_id, doc_id)]
            try:
                stat = path.stat()
                uri = resolve(path).as_uri()
            except OSError:
                continue  # its load reports why
            key = self.row_maker.file_key(uri)
            stamps = {
                st.file_stamp(key=key, access=access, embedding_version=t.version)
                for t, st in zip(targets, states, strict=True)
            }
            stamp = stamps.pop()
            if stamps or stamp is None or not same_file(stamp, path, stat):
                continue
            out[doc_id] = IngestResult(
                doc_id=doc_id,
                tenant=acl.tenant_id,
                status="skipped",
                reason="unchanged",
                chunks=states[0].children,
                parents=states[0].count - states[0].children,
                source=uri,
            )
        return out

    def update_acl(self, doc_id: str, acl: AccessControl, *, refresh: bool = False) -> int:
        """Rewrite the access fields of every row of ``doc_id``: no parsing, no embedding.

        The document is the one of ``acl``'s tenant; the ACL part of ``doc_hash`` is
        rewritten with the fields, so a later re-ingest of the same text with this ACL is
        recognised as unchanged. Moving a document to another tenant is not an ACL change:
        that tenant simply has no such document (ingest it there, delete it here).
        Returns the rows updated.
        """
        acl = normalize_acl(acl, case_sensitive=self.settings.principal_case_sensitive)
        tenant = acl.tenant_id
        if not self._ready:
            self.init_index()
        targets = self._targets()
        self._see_writes([t.name for t in targets])
        state = targets[0].index.doc_state(tenant, doc_id)
        if state.count == 0:
            raise InputError(
                f"{doc_id}: tenant {tenant!r} has no such document, no ACL to update "
                "(an ACL update never moves a document between tenants)"
            )
        contents = {h[:32] for h in state.doc_hashes}
        if len(contents) != 1 or len(state.doc_hashes) > 2:
            raise InputError(f"{doc_id}: rows of several versions; re-ingest it first")
        old = state.doc_hashes[0]
        new_hash = old[:32] + acl_hash(acl) + old[64:]
        fields = {**acl.as_fields(), "doc_hash": new_hash}
        updated = 0
        for n, target in enumerate(targets):
            # A mirrored generation that has no rows of it yet gets them (with this ACL)
            # from the migration's backfill, which copies from the first.
            locations = target.index.chunk_locations(tenant, doc_id)
            outcome = target.index.bulk(
                access_actions(locations, fields), chunk_size=self.settings.bulk_chunk_size
            )
            target.index.raise_on_failures(outcome, f"updating the ACL of {doc_id}")
            updated = outcome.ok if n == 0 else updated
        if refresh:
            self.index.refresh()
        return updated

    def delete_document(self, doc_id: str, *, tenant: str, refresh: bool = True) -> int:
        """Delete every row of one tenant's document (found by scan, removed by id)."""
        tenant = normalize_tenant(tenant, case_sensitive=self.settings.principal_case_sensitive)
        return self._delete_rows(doc_query(tenant, doc_id), f"deleting {doc_id}", refresh=refresh)

    def delete_tenant_rows(self, tenant: str, *, refresh: bool = True) -> int:
        """Delete every row of ``tenant`` (scan and delete by id: no _delete_by_query)."""
        tenant = normalize_tenant(tenant, case_sensitive=self.settings.principal_case_sensitive)
        return self._delete_rows(
            {"term": {"tenant_id": tenant}}, f"deleting {tenant}", refresh=refresh
        )

    def _delete_rows(self, query: dict[str, Any], what: str, *, refresh: bool) -> int:
        """Scan and delete by id in every generation written, the alias's first (a
        migration's backfill compares against it, so a row gone there never comes back).
        Returns the rows deleted from the alias's generation."""
        layout = self.generations.layout()
        names = [g.index for g in layout.targets()] or [self.settings.index]
        self._see_writes(names)
        deleted = 0
        for n, name in enumerate(names):
            index = ChunkIndex(self.engine, name)
            locations = index.locations(query)
            index.raise_on_failures(index.delete_chunks(locations), what)
            deleted = len(locations) if n == 0 else deleted
        if refresh and deleted:
            self.index.refresh()
        return deleted


@dataclass
class _Plan:
    """One document on its way into the index."""

    position: int
    doc: Document
    title: str
    chunks: list[Chunk]
    doc_hash: str
    version: str
    # Per generation written (es_rag.generations): chunk id -> concrete index of the rows
    # this document had before.
    old: dict[str, dict[str, str]] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    new_ids: set[str] = field(default_factory=set)
    failures: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    fence: int | None = None  # numeric doc_version: fenced against older versions
    superseded: int | None = None  # a newer version accepted while this one was written
    error: EsRagError | None = None  # a generation after the first could not embed it
    counts: tuple[int, int] | None = None  # (children, parents) the index holds, if unchunked

    @property
    def ok(self) -> bool:
        return not self.failures and self.superseded is None and self.error is None

    @property
    def children(self) -> list[Chunk]:
        return [c for c in self.chunks if c.chunk_type == "child"]

    def result(
        self, status: IngestStatus, *, deleted: int = 0, reason: str | None = None
    ) -> IngestResult:
        return IngestResult(
            reason=reason,
            tenant=self.doc.acl.tenant_id,
            doc_id=self.doc.doc_id,
            status=status,
            chunks=self.counts[0] if self.counts else len(self.children),
            parents=self.counts[1] if self.counts else len(self.chunks) - len(self.children),
            deleted=deleted,
            source=self.doc.source_uri,
            timings_ms=self.timings,
        )


@dataclass(frozen=True)
class _Target:
    """One generation a batch writes: the configured one (rows as made), or one whose rows
    are remade with its own model (``retarget``)."""

    name: str
    index: ChunkIndex
    embedder: Embedder
    retarget: Retarget | None
    dims: int = 0

    @property
    def version(self) -> str:
        if self.retarget is not None:
            return self.retarget.embedding_version
        return self.embedder.embedding_version


def error_outcome(
    doc_id: str, exc: BaseException, *, tenant: str | None = None, reason: str | None = None
) -> IngestResult:
    """What an error makes of a document: skipped for an image with no words in it
    (``NoTextError``: nothing to index, nothing wrong), failed for the rest."""
    if isinstance(exc, NoTextError):
        return IngestResult(doc_id=doc_id, tenant=tenant, status="skipped", reason="no-text")
    return IngestResult(
        doc_id=doc_id,
        tenant=tenant,
        status="failed",
        error=str(exc),
        error_type=type(exc).__name__,
        reason=reason,
    )


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0
