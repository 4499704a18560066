"""The Searcher: resolves a strategy, runs it, returns its hits (then an optional rerank).

Strategies (DESIGN.md §6) live in ``es_rag.query.strategies``: each turns a ``Query`` into
request bodies and the responses into ranked hits, without I/O. This module does what
needs the server: probing the cluster, checking the index contract, embedding the
question, sending the request through the ACL guard, and fetching context rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from es_rag.acl import acl_filter, identity_policy, make_caller, normalize_caller
from es_rag.analysis import TextAnalyzer
from es_rag.cache import LRU
from es_rag.config import Settings
from es_rag.embedding import Embedder
from es_rag.engine.base import ClusterInfo
from es_rag.engine.index import ChunkIndex
from es_rag.engine.mapping import IndexContract, recorded_settings
from es_rag.errors import (
    AnalyzerMismatchError,
    ConfigurationError,
    EngineUnavailableError,
    IndexContractError,
)
from es_rag.generations import Generations
from es_rag.parts import Parts
from es_rag.query import build, feedback, sentences
from es_rag.query.filters import FieldFilter, field_types, parse_filter, to_clauses
from es_rag.query.guard import check_body, check_msearch
from es_rag.query.hits import with_rows
from es_rag.query.rerank import Reranker, build_reranker, rerank_hits
from es_rag.query.strategies import NAMES, Query, Request, Strategy, resolve
from es_rag.types import Caller, ExpansionTerm, Hit, SearchResponse

STRATEGIES = NAMES
_RETRY_PAUSE_S = 0.5
T = TypeVar("T")


class Searcher(Parts):
    """Answers queries on behalf of a caller. Construction does no I/O."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: Any = None,
        embedder: Embedder | None = None,
        analyzer: TextAnalyzer | None = None,
        reranker: Reranker | None = None,
        query_cache: LRU[str, list[float]] | None = None,
    ) -> None:
        super().__init__(settings, client=client, embedder=embedder, analyzer=analyzer)
        self._cluster: ClusterInfo | None = None
        self._generations: Generations | None = None
        self._served: dict[str, _Served] = {}
        self._field_types: dict[str, str] | None = None
        self._reranker: Reranker | None = reranker
        # Repeated questions skip the model; shareable between searchers (eval's variants).
        self.query_cache = LRU(settings.query_cache_size) if query_cache is None else query_cache
        self._pipelines: set[str] = set()

    def cluster(self) -> ClusterInfo:
        if self._cluster is None:
            self._cluster = self.engine.probe(self.settings.index)
        return self._cluster

    @property
    def generations(self) -> Generations:
        if self._generations is None:
            self._generations = Generations(self.engine, self.settings)
        return self._generations

    def generation(self) -> _Served:
        """The generation the alias serves (resolved at most a second ago) and the parts
        that query it: this searcher's own, or, once a migration has moved the alias to a
        generation made with another model, that generation's (es_rag.generations)."""
        layout = _once_more(self.generations.layout)
        gen = layout.primary
        if gen is None:
            raise IndexContractError(
                f"no es-rag index behind {self.settings.index!r}: run `es-rag init` or ingest first"
            )
        served = self._served.get(gen.index)
        if served is None:
            recipe: dict[str, Any] = {}
            embedder, analyzer = self.embedder, self.analyzer
            if not gen.configured:
                recipe = recorded_settings(gen.settings)
                embedder = self.generations.embedder(gen, self.embedder)
                analyzer = self.generations.analyzer(gen, self.analyzer)
            elif gen.contract is not None:
                # An index analysed before Traditional-to-Simplified folding is queried as
                # it was made (TextAnalyzer.variant); anything else is refused below.
                analyzer = analyzer.variant(gen.contract.analyzer_version) or analyzer
            served = _Served(
                index=gen.index,
                contract=self._checked(gen.contract, analyzer),
                recipe=recipe,
                embedder=embedder,
                analyzer=analyzer,
            )
            self._served[gen.index] = served
        return served

    def contract(self) -> IndexContract:
        """The served generation's contract, checked against the analyzer that queries it."""
        return self.generation().contract

    def _checked(self, contract: IndexContract | None, analyzer: TextAnalyzer) -> IndexContract:
        if contract is None:
            raise IndexContractError(
                f"no es-rag index behind {self.settings.index!r}: run `es-rag init` or ingest first"
            )
        if contract.analyzer_version != analyzer.version:
            raise AnalyzerMismatchError(
                f"the index was analysed with {contract.analyzer_version!r} but this query "
                f"would use {analyzer.version!r}; BM25 terms would not match"
            )
        identity = identity_policy(self.settings.principal_case_sensitive)
        if contract.identity != identity:
            # A deny entry written in another form would not match this caller.
            raise IndexContractError(
                f"the index's tenants and principals are in the form {contract.identity!r}"
                f", this configuration writes and asks in {identity!r}"
                + (
                    "; run `es-rag upgrade-index` once"
                    if contract.identity == "exact"
                    else " (ES_RAG_PRINCIPAL_CASE_SENSITIVE differs)"
                )
            )
        return contract

    def check_vectors(self) -> None:
        """The served generation's vectors compare with the query vectors it would get."""
        self._check_vectors(self.generation())

    def _check_vectors(self, served: _Served) -> None:
        if served.contract.embedding_version != served.embedder.embedding_version:
            raise IndexContractError(
                f"the index holds vectors of {served.contract.embedding_version!r}, the "
                f"configured model is {served.embedder.embedding_version!r}; query vectors "
                "would not compare"
            )

    def resolve_strategy(self, requested: str | None) -> tuple[str, str | None]:
        """(strategy that will run, note explaining an automatic choice)."""
        strategy, note = resolve(requested, self.settings, self.cluster)
        return strategy.name, note

    # --- the query -----------------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        tenant: str | None = None,
        principals: Iterable[str] = (),
        caller: Caller | None = None,
        k: int | None = None,
        filters: Sequence[FieldFilter | str] = (),
        strategy: str | None = None,
        rerank: bool | None = None,
        clauses: Sequence[dict[str, Any]] = (),
        navigation: bool = False,
    ) -> SearchResponse:
        """Search on behalf of ``caller``; only rows the caller may read are ever scored.

        ``filters`` are metadata filters (``FieldFilter`` or CLI syntax such as
        ``"metadata.product=hr"``); they go inside every retriever, like the ACL.
        ``rerank`` (default: on when a reranker is configured) reorders the top
        ``rerank_window`` candidates; a failing or slow reranker leaves the fused order.
        ``clauses`` are filter-context query clauses already checked by the caller (the
        Elasticsearch-compatible surface, es_rag.serve.dsl); ``navigation`` keeps tables of
        contents and indexes, which search otherwise leaves out.
        """
        s = self.settings
        caller = self._caller(caller, tenant, principals)
        k = k or s.k
        if k < 1:
            raise ConfigurationError("k must be >= 1")
        do_rerank = self._wants_rerank(rerank)
        chosen, note = resolve(strategy, s, self.cluster)
        served = self.generation()  # checked once per generation, outside the timings
        if chosen.uses_vector:
            self._check_vectors(served)
        clauses = [*self._filter_clauses(filters, navigation), *clauses]
        started = time.perf_counter()
        timings: dict[str, float] = {}
        depth = max(k, s.rerank_window) if do_rerank else k
        feedback_on = chosen.uses_terms and chosen.uses_vector and s.feedback_chunks > 0
        if feedback_on:  # the feedback chunks and the agreement: the top of the first ranking
            depth = max(depth, s.feedback_chunks, feedback.AGREEMENT_TOP)
        q = self._query(query, chosen, served, caller, clauses, depth, timings)

        t0 = time.perf_counter()
        responses = self.send(chosen.bodies(q, self.engine), q.acl)
        timings["search"] = _ms(t0)
        t0 = time.perf_counter()
        hits = chosen.hits(responses, q)
        if chosen.fuses_here:
            timings["fuse"] = _ms(t0)
        added: tuple[tuple[str, float], ...] = ()
        if feedback_on and hits:
            t0 = time.perf_counter()  # fused strategies, client-side and native alike
            hits, added = self._feedback(chosen, q, hits, responses)
            timings["feedback"] = _ms(t0)
        if chosen.fetches_rows and hits:
            t0 = time.perf_counter()
            hits = self._rows(q, hits[: depth if do_rerank else k])
            timings["fetch"] = _ms(t0)

        reranked, rerank_note = False, None
        if do_rerank:
            t0 = time.perf_counter()
            hits, reranked, rerank_note = rerank_hits(
                self.reranker, query, hits, window=s.rerank_window, timeout=s.rerank_timeout
            )
            timings["rerank"] = _ms(t0)
            k = s.rerank_k or k
        timings["total"] = _ms(started)
        return SearchResponse(
            strategy=chosen.name,
            hits=hits[:k],
            timings_ms=timings,
            note=note,
            reranked=reranked if do_rerank else None,
            rerank_note=rerank_note,
            expansion=tuple(ExpansionTerm(t, b) for t, b in added),
            sentences=q.sentences,
        )

    # --- stages --------------------------------------------------------------------------
    def _caller(
        self, caller: Caller | None, tenant: str | None, principals: Iterable[str]
    ) -> Caller:
        """The caller in the one identity form the rows are written in (es_rag.acl)."""
        case_sensitive = self.settings.principal_case_sensitive
        if caller is None:
            if tenant is None:
                raise ConfigurationError("search needs a tenant (or a Caller)")
            caller = make_caller(tenant, users=principals, case_sensitive=case_sensitive)
        return normalize_caller(caller, case_sensitive=case_sensitive)

    def _query(
        self,
        text: str,
        strategy: Strategy,
        served: _Served,
        caller: Caller,
        filters: list[dict[str, Any]],
        depth: int,
        timings: dict[str, float],
    ) -> Query:
        # This searcher's settings as they are now (callers may replace them between
        # queries), with the served generation's name and, when it is not this
        # searcher's own, its recipe.
        s = self.settings.model_copy(update={**served.recipe, "index": served.index})
        vector: list[float] = []
        parts: list[str] = []
        sentence_vectors: tuple[list[float], ...] = ()
        if strategy.uses_vector:
            t0 = time.perf_counter()
            embedder = served.embedder
            # Another generation's model answers another key: vectors never cross models.
            key = text if embedder is self.embedder else f"{embedder.embedding_version}\0{text}"
            vector = self.query_cache.get_or_compute(key, lambda: embedder.embed_query(text))
            parts = sentences.split(text, s.question_sentences) if strategy.asks_sentences else []
            asked = {f"{key}\0{part}": part for part in parts}
            sentence_vectors = tuple(
                self.query_cache.get_many_or_compute(list(asked), _embeddings(embedder, asked))
            )
            timings["embed"] = _ms(t0)
        return Query(
            text=text,
            terms=served.analyzer.analyze(text) if strategy.uses_terms else "",
            vector=vector,
            sentences=tuple(parts),
            sentence_vectors=sentence_vectors,
            acl=acl_filter(caller),
            filters=filters,
            depth=depth,
            window=max(s.rank_window_size, depth),
            settings=s,
            highlight=(
                build.highlight(served.analyzer.highlight_words(text) or text)
                if s.highlight
                else None
            ),
        )

    def _feedback(
        self, strategy: Strategy, q: Query, first: list[Hit], responses: list[dict[str, Any]]
    ) -> tuple[list[Hit], tuple[tuple[str, float], ...]]:
        """The fused ranking again, with the question's BM25 side expanded by the terms of
        the first ranking's top chunks (es_rag.query.feedback): one fetch of their terms
        under the caller's ACL, then the BM25 search once more (with the kNN one where the
        server fuses), fused with the first round's kNN list."""
        s = q.settings
        agreed = feedback.agreement([h.ranks for h in first])
        weight = s.feedback_weight * (1.0 if agreed is None else agreed)
        if weight <= 0:  # the retrievers share nothing at the top: no words worth adding
            return first, ()
        ids = [h.chunk_id for h in first[: s.feedback_chunks]]
        (resp,) = self.send(Request(body=build.feedback_body(q.acl, ids)), q.acl)
        found = {h["_id"]: h["_source"].get("content_terms") or "" for h in resp["hits"]["hits"]}
        terms = feedback.expansion(
            [found[i] for i in ids if i in found],
            question=q.terms,
            terms=s.feedback_terms,
            weight=weight,
        )
        if not terms:
            return first, ()
        expanded = replace(q, expansion=terms)
        request, join = strategy.again(expanded, self.engine, responses)
        return strategy.hits(join(self.send(request, q.acl)), expanded), terms

    def _rows(self, q: Query, hits: list[Hit]) -> list[Hit]:
        """The kept hits with their rows and highlights, read by id under the caller's ACL
        and filters (the strategy ranked them from ids and scores alone)."""
        body = build.hits_rows_body(q.acl, q.filters, [h.chunk_id for h in hits], q.highlight)
        (resp,) = self.send(Request(body=body), q.acl)
        return with_rows(hits, resp["hits"]["hits"])

    def _filter_clauses(
        self, filters: Sequence[FieldFilter | str], navigation: bool = False
    ) -> list[dict[str, Any]]:
        """The user's filters, and the rows search leaves out unless a filter asks for them
        (tables of contents and indexes, which match every question and cite nothing)."""
        if not filters:
            return [] if navigation else [build.WITHOUT_NAVIGATION]
        parsed = [parse_filter(f) if isinstance(f, str) else f for f in filters]
        clauses = to_clauses(parsed, self.field_types())
        if not navigation and not any(f.field == "element_types" for f in parsed):
            clauses.append(build.WITHOUT_NAVIGATION)
        return clauses

    def field_types(self) -> dict[str, str]:
        """The index's fields and their types (es_rag.query.filters.field_types)."""
        if self._field_types is None:
            index = ChunkIndex(self.engine, self.settings.index)
            self._field_types = field_types(index.mapping_properties())
        return self._field_types

    def _wants_rerank(self, requested: bool | None) -> bool:
        if requested is False:
            return False
        if self.reranker is None:
            if requested:
                raise ConfigurationError(
                    "rerank requested but no reranker is configured (set ES_RAG_RERANK_MODEL)"
                )
            return False
        return True

    @property
    def reranker(self) -> Reranker | None:
        if self._reranker is None and self.settings.rerank_model:
            self._reranker = build_reranker(self.settings)
        return self._reranker

    # --- context fetches ------------------------------------------------------------------
    def fetch_rows(
        self,
        caller: Caller,
        *,
        ids: Sequence[str] = (),
        neighbours: Sequence[tuple[str, str, int, int]] = (),
    ) -> list[dict[str, Any]]:
        """Rows by id, or children by (doc_id, doc_version, first, last ordinal).

        Always under the caller's ACL: context expansion can never reach a row the search
        itself could not have returned (a parent or neighbour of a readable chunk carries the
        same ACL, but a stale id or a changed ACL must not leak).
        """
        acl = acl_filter(
            normalize_caller(caller, case_sensitive=self.settings.principal_case_sensitive)
        )
        body = build.rows_body(acl, ids=ids, neighbours=neighbours)
        if body is None:
            return []
        (resp,) = self.send(Request(body=body), acl)
        return [{"_id": h["_id"], **h["_source"]} for h in resp["hits"]["hits"]]

    # --- execution -----------------------------------------------------------------------
    def send(self, request: Request, acl: dict[str, Any]) -> list[dict[str, Any]]:
        """Check every body against the ACL guard, then send: one search or one msearch.

        The one way a request built outside this class (the sufficiency check's term
        counts) reaches the index, so nothing that queries rows escapes the guard."""
        if request.searches is not None:
            searches = request.searches
            check_msearch(searches, acl)
            return _once_more(lambda: self.engine.msearch(searches))
        body = request.body
        if body is None:
            raise ValueError("a request holds a body or searches")  # a bug in a strategy
        check_body(body, acl)
        if request.pipeline is not None and request.pipeline[0] not in self._pipelines:
            self.engine.ensure_search_pipeline(*request.pipeline)
            self._pipelines.add(request.pipeline[0])
        index, params = self.generation().index, request.params or None
        return [_once_more(lambda: self.engine.search(index, body, params=params))]


@dataclass(frozen=True)
class _Served:
    """The generation a query runs on, by concrete name, and what queries it."""

    index: str
    contract: IndexContract
    recipe: dict[str, Any]  # the generation's recorded settings, when not this searcher's
    embedder: Embedder
    analyzer: TextAnalyzer


def _once_more(send: Callable[[], T]) -> T:
    """One more try after a transient failure: a node that just went down (the client
    has already tried the others) or a shard whose replica is taking over, which takes
    a moment. A second failure is the caller's to see."""
    try:
        return send()
    except EngineUnavailableError:
        time.sleep(_RETRY_PAUSE_S)
        return send()


def _embeddings(
    embedder: Embedder, texts: Mapping[str, str]
) -> Callable[[list[str]], list[list[float]]]:
    """The query embeddings of the texts of the keys the cache misses, in one model call."""

    def compute(keys: list[str]) -> list[list[float]]:
        return [v.tolist() for v in embedder.embed([texts[k] for k in keys], kind="query")]

    return compute


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0
