"""The Searcher: picks a strategy from the cluster probe, runs it, assembles hits.

Strategies (DESIGN.md §6): ``bm25``, ``knn``, ``client-rrf`` (BM25 and kNN in ONE
``_msearch``, fused in Python) and ``native-rrf`` (the server's ``rrf`` retriever, where
the license and modules allow it). ``auto`` takes native RRF when the probe says it runs,
else client-side RRF, and the response says which one ran and why.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from es_rag.acl import acl_filter, identity_policy, make_caller, normalize_caller
from es_rag.analysis import TextAnalyzer
from es_rag.config import Settings
from es_rag.embedding import Embedder
from es_rag.engine.base import ClusterInfo
from es_rag.engine.index import ChunkIndex
from es_rag.engine.mapping import IndexContract
from es_rag.errors import (
    AnalyzerMismatchError,
    ConfigurationError,
    EngineUnavailableError,
    IndexContractError,
    StrategyUnavailableError,
)
from es_rag.parts import Parts
from es_rag.query import build
from es_rag.query.filters import FieldFilter, field_types, parse_filter, to_clauses
from es_rag.query.fusion import linear, rrf, rrf_contribution
from es_rag.query.guard import check_body, check_msearch
from es_rag.query.rerank import Reranker, build_reranker
from es_rag.types import Caller, Hit, SearchResponse

STRATEGIES = (
    "auto",
    "bm25",
    "knn",
    "client-rrf",
    "client-linear",
    "native-rrf",
    "opensearch-hybrid",
)
_RETRY_PAUSE_S = 0.5
T = TypeVar("T")
_RRF_RANKS = re.compile(r"computed for initial ranks \[([0-9, ]*)\]")
_QUERY_INDEX = re.compile(r"in query at index \[(\d+)\]")


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
    ) -> None:
        super().__init__(settings, client=client, embedder=embedder, analyzer=analyzer)
        self._cluster: ClusterInfo | None = None
        self._contract: IndexContract | None = None
        self._field_types: dict[str, str] | None = None
        self._reranker: Reranker | None = reranker
        self._qcache: OrderedDict[str, list[float]] = OrderedDict()
        self._pipelines: set[str] = set()

    def cluster(self) -> ClusterInfo:
        if self._cluster is None:
            self._cluster = self.engine.probe(self.settings.index)
        return self._cluster

    def contract(self) -> IndexContract:
        """The index's contract, checked once against this searcher's analyzer and model."""
        if self._contract is None:
            contract = ChunkIndex(self.engine, self.settings.index).contract()
            if contract is None:
                raise IndexContractError(
                    f"no es-rag index behind {self.settings.index!r}: "
                    "run `es-rag init` or ingest first"
                )
            if contract.analyzer_version != self.analyzer.version:
                raise AnalyzerMismatchError(
                    f"the index was analysed with {contract.analyzer_version!r} but this query "
                    f"would use {self.analyzer.version!r}; BM25 terms would not match"
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
            self._contract = contract
        return self._contract

    def _check_vectors(self) -> None:
        contract = self.contract()
        if contract.embedding_version != self.embedder.embedding_version:
            raise IndexContractError(
                f"the index holds vectors of {contract.embedding_version!r}, the configured "
                f"model is {self.embedder.embedding_version!r}; query vectors would not compare"
            )

    def resolve_strategy(self, requested: str | None) -> tuple[str, str | None]:
        """(strategy that will run, note explaining an automatic choice)."""
        name = requested or self.settings.strategy
        if name not in STRATEGIES:
            raise ConfigurationError(f"unknown strategy {name!r}; expected one of {STRATEGIES}")
        if name == "native-rrf":
            info = self.cluster()
            if not info.native_rrf:
                raise StrategyUnavailableError(f"native-rrf cannot run: {info.native_rrf_reason}")
            return name, None
        if name == "opensearch-hybrid":
            info = self.cluster()
            if not info.hybrid:
                raise StrategyUnavailableError(
                    f"opensearch-hybrid cannot run: {info.hybrid_reason}"
                )
            return name, None
        if name == "auto" and self.settings.fusion == "linear":
            return "client-linear", None  # score fusion runs here, on any cluster
        if name == "auto":
            info = self.cluster()
            if info.native_rrf:
                return "native-rrf", None
            if info.hybrid:
                return "opensearch-hybrid", None
            if info.flavor == "opensearch":
                return "client-rrf", f"opensearch-hybrid unavailable: {info.hybrid_reason}"
            return "client-rrf", f"native RRF unavailable: {info.native_rrf_reason}"
        return name, None

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
    ) -> SearchResponse:
        """Search on behalf of ``caller``; only rows the caller may read are ever scored.

        ``filters`` are metadata filters (``FieldFilter`` or CLI syntax such as
        ``"metadata.product=hr"``); they go inside every retriever, like the ACL.
        ``rerank`` (default: on when a reranker is configured) reorders the top
        ``rerank_window`` candidates; a failing or slow reranker leaves the fused order.
        """
        s = self.settings
        if caller is None:
            if tenant is None:
                raise ConfigurationError("search needs a tenant (or a Caller)")
            caller = make_caller(
                tenant, users=principals, case_sensitive=s.principal_case_sensitive
            )
        caller = normalize_caller(caller, case_sensitive=s.principal_case_sensitive)
        k = k or s.k
        if k < 1:
            raise ConfigurationError("k must be >= 1")
        do_rerank = self._wants_rerank(rerank)
        name, note = self.resolve_strategy(strategy)
        self.contract()  # probed and checked once per Searcher, outside the timings
        if name != "bm25":
            self._check_vectors()
        clauses = self._filter_clauses(filters)
        started = time.perf_counter()
        timings: dict[str, float] = {}
        acl = acl_filter(caller)
        depth = max(k, s.rerank_window) if do_rerank else k
        window = max(s.rank_window_size, depth)
        terms = self.analyzer.analyze(query) if name != "knn" else ""
        vector: list[float] = []
        if name != "bm25":
            t0 = time.perf_counter()
            vector = self._query_vector(query)
            timings["embed"] = _ms(t0)
        highlight = build.highlight(query) if s.highlight else None

        t0 = time.perf_counter()
        if name == "bm25":
            body = build.bm25_body(
                terms,
                acl=acl,
                size=depth,
                filters=clauses,
                content_boost=s.content_boost,
                title_boost=s.title_boost,
            )
            hits = self._single(self._search(body, acl, highlight, bm25=True), "bm25")
        elif name == "knn":
            body = self._knn_body(
                vector,
                acl=acl,
                size=depth,
                num_candidates=max(s.num_candidates, depth),
                filters=clauses,
            )
            hits = self._single(self._search(body, acl, highlight), "knn")
        elif name in ("client-rrf", "client-linear"):
            bm25 = build.bm25_body(
                terms,
                acl=acl,
                size=window,
                filters=clauses,
                content_boost=s.content_boost,
                title_boost=s.title_boost,
            )
            knn = self._knn_body(
                vector,
                acl=acl,
                size=window,
                num_candidates=max(s.num_candidates, window),
                filters=clauses,
            )
            if highlight:
                bm25["highlight"] = knn["highlight"] = highlight
            searches = build.msearch_pair(s.index, bm25, knn, search_type=s.search_type)
            responses = self._msearch(searches, acl)
            timings["search"] = _ms(t0)
            t0 = time.perf_counter()
            hits = self._client_fuse(responses, window=window, method=name)[:depth]
            timings["fuse"] = _ms(t0)
        elif name == "opensearch-hybrid":
            body = build.opensearch_hybrid_body(
                terms,
                vector,
                acl=acl,
                size=depth,
                rank_window_size=window,
                num_candidates=max(s.num_candidates, window),
                filters=clauses,
                content_boost=s.content_boost,
                title_boost=s.title_boost,
            )
            pipeline = self._hybrid_pipeline()
            resp = self._search(body, acl, highlight, params={"search_pipeline": pipeline})
            hits = self._hybrid(resp)
        else:
            body = build.native_rrf_body(
                terms,
                vector,
                acl=acl,
                size=depth,
                rank_window_size=window,
                rank_constant=s.rank_constant,
                num_candidates=max(s.num_candidates, window),
                filters=clauses,
                bm25_weight=s.bm25_weight,
                knn_weight=s.knn_weight,
                content_boost=s.content_boost,
                title_boost=s.title_boost,
            )
            hits = self._native(self._search(body, acl, highlight))
        timings.setdefault("search", _ms(t0))

        reranked, rerank_note = False, None
        if do_rerank:
            t0 = time.perf_counter()
            hits, reranked, rerank_note = self._rerank(query, hits)
            timings["rerank"] = _ms(t0)
            k = s.rerank_k or k
        timings["total"] = _ms(started)
        return SearchResponse(
            strategy=name,
            hits=hits[:k],
            timings_ms=timings,
            note=note,
            reranked=reranked if do_rerank else None,
            rerank_note=rerank_note,
        )

    # --- stages --------------------------------------------------------------------------
    def _query_vector(self, query: str) -> list[float]:
        """Query embeddings, LRU-cached: repeated questions skip the model."""
        size = self.settings.query_cache_size
        cached = self._qcache.get(query)
        if cached is not None:
            self._qcache.move_to_end(query)
            return cached
        vector = self.embedder.embed_query(query)
        if size > 0:
            self._qcache[query] = vector
            while len(self._qcache) > size:
                self._qcache.popitem(last=False)
        return vector

    def _filter_clauses(self, filters: Sequence[FieldFilter | str]) -> list[dict[str, Any]]:
        if not filters:
            return []
        parsed = [parse_filter(f) if isinstance(f, str) else f for f in filters]
        if self._field_types is None:
            index = ChunkIndex(self.engine, self.settings.index)
            self._field_types = field_types(index.mapping_properties())
        return to_clauses(parsed, self._field_types)

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

    def _rerank(self, query: str, hits: list[Hit]) -> tuple[list[Hit], bool, str | None]:
        """Reorder the top window by the cross-encoder; never fail the query because of it."""
        reranker = self.reranker
        window = hits[: self.settings.rerank_window]
        if reranker is None or not window:
            return hits, False, "nothing to rerank" if reranker else "no reranker"
        texts = [
            f"{' > '.join(h.title_path)}\n{h.text}" if h.title_path else h.text for h in window
        ]
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["scores"] = reranker.score(query, texts)
            except Exception as exc:  # any failure degrades to the fused order
                box["error"] = exc

        thread = threading.Thread(target=work, name="es-rag-rerank", daemon=True)
        thread.start()
        thread.join(self.settings.rerank_timeout)
        if thread.is_alive():
            return hits, False, f"rerank exceeded its {self.settings.rerank_timeout:g} s budget"
        if "error" in box:
            exc = box["error"]
            return hits, False, f"rerank failed: {type(exc).__name__}: {exc}"
        scores: list[float] = box["scores"]
        for hit, value in zip(window, scores, strict=True):
            hit.scores["rerank"] = float(value)
            hit.explain["rerank"] = float(value)
        order = sorted(range(len(window)), key=lambda i: (-scores[i], i))
        reordered = [window[i] for i in order]
        for hit in reordered:
            hit.score = float(hit.scores["rerank"] or 0.0)
        return reordered + hits[len(window) :], True, None

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
        should: list[dict[str, Any]] = []
        if ids:
            should.append({"ids": {"values": list(ids)}})
        for doc_id, version, first, last in neighbours:
            should.append(
                {
                    "bool": {
                        "filter": [
                            {"term": {"doc_id": doc_id}},
                            {"term": {"doc_version": version}},
                            {"term": {"chunk_type": "child"}},
                            {"range": {"ordinal": {"gte": first, "lte": last}}},
                        ]
                    }
                }
            )
        if not should:
            return []
        body = {
            "query": {
                "bool": {"filter": [acl, {"bool": {"should": should, "minimum_should_match": 1}}]}
            },
            "size": 1000,
            "_source": {"excludes": build.SOURCE_EXCLUDES},
            "sort": [{"doc_id": "asc"}, {"ordinal": "asc"}],
        }
        resp = self._search(body, acl, None)
        return [{"_id": h["_id"], **h["_source"]} for h in resp["hits"]["hits"]]

    # --- execution -----------------------------------------------------------------------
    def _search(
        self,
        body: dict[str, Any],
        acl: dict[str, Any],
        highlight: dict[str, Any] | None,
        *,
        params: dict[str, Any] | None = None,
        bm25: bool = False,
    ) -> dict[str, Any]:
        if highlight:
            body["highlight"] = highlight
        check_body(body, acl)
        if bm25 and self.settings.search_type != "query_then_fetch":
            params = {**(params or {}), "search_type": self.settings.search_type}
        return _once_more(lambda: self.engine.search(self.settings.index, body, params=params))

    def _msearch(self, searches: list[dict[str, Any]], acl: dict[str, Any]) -> list[dict[str, Any]]:
        check_msearch(searches, acl)
        return _once_more(lambda: self.engine.msearch(searches))

    def _knn_body(
        self,
        vector: Sequence[float],
        *,
        acl: dict[str, Any],
        size: int,
        num_candidates: int,
        filters: Sequence[dict[str, Any]],
    ) -> dict[str, Any]:
        """The engine's kNN search shape; both pre-filter by the ACL inside the graph walk."""
        make = build.opensearch_knn_body if self.engine.flavor == "opensearch" else build.knn_body
        return make(vector, acl=acl, size=size, num_candidates=num_candidates, filters=filters)

    def _hybrid_pipeline(self) -> str:
        """The RRF search pipeline for these fusion settings, created once if missing."""
        s = self.settings
        weights = {"bm25_weight": s.bm25_weight, "knn_weight": s.knn_weight}
        name = build.opensearch_pipeline_name(
            s.opensearch_search_pipeline, rank_constant=s.rank_constant, **weights
        )
        if name not in self._pipelines:
            ensure = getattr(self.engine, "ensure_search_pipeline", None)
            if ensure is None:
                raise StrategyUnavailableError("opensearch-hybrid needs an OpenSearch engine")
            ensure(name, build.opensearch_rrf_pipeline(rank_constant=s.rank_constant, **weights))
            self._pipelines.add(name)
        return name

    def _single(self, resp: Mapping[str, Any], retriever: str) -> list[Hit]:
        hits = []
        for rank, raw in enumerate(resp["hits"]["hits"], start=1):
            ranks: dict[str, int | None] = {"bm25": None, "knn": None}
            ranks[retriever] = rank
            score = float(raw.get("_score") or 0.0)
            hit = _hit(raw, score=score, ranks=ranks, scores={retriever: score})
            hit.explain = {retriever: {"rank": rank, "score": score}}
            hits.append(hit)
        return hits

    def _client_fuse(
        self, responses: list[dict[str, Any]], *, window: int, method: str = "client-rrf"
    ) -> list[Hit]:
        s = self.settings
        by_id: dict[str, dict[str, Any]] = {}
        raw_scores: dict[str, dict[str, float]] = {}
        rankings: dict[str, list[str]] = {}
        for name, resp in zip(("bm25", "knn"), responses, strict=True):
            ids = []
            for raw in resp["hits"]["hits"]:
                by_id.setdefault(raw["_id"], raw)
                if "highlight" in raw:
                    by_id[raw["_id"]].setdefault("highlight", raw["highlight"])
                raw_scores.setdefault(raw["_id"], {})[name] = float(raw.get("_score") or 0.0)
                ids.append(raw["_id"])
            rankings[name] = ids
        weights = {"bm25": s.bm25_weight, "knn": s.knn_weight}
        if method == "client-linear":
            scored = {n: [(d, raw_scores[d][n]) for d in ids] for n, ids in rankings.items()}
            fused = linear(scored, rank_window_size=window, weights=weights)
            label = "linear"
        else:
            fused = rrf(
                rankings, rank_constant=s.rank_constant, rank_window_size=window, weights=weights
            )
            label = "rrf"
        hits = []
        for f in fused:
            scores: dict[str, float | None] = {
                "bm25": raw_scores[f.doc_id].get("bm25"),
                "knn": raw_scores[f.doc_id].get("knn"),
                label: f.score,
            }
            hit = _hit(by_id[f.doc_id], score=f.score, ranks=dict(f.ranks), scores=scores)
            hit.explain = _explain(f.ranks, scores, f.contributions, f.score, label)
            hits.append(hit)
        return hits

    def _hybrid(self, resp: Mapping[str, Any]) -> list[Hit]:
        """Hits fused by the server's RRF pipeline, which reports only the fused score."""
        hits = []
        for raw in resp["hits"]["hits"]:
            score = float(raw.get("_score") or 0.0)
            ranks: dict[str, int | None] = {"bm25": None, "knn": None}
            hit = _hit(raw, score=score, ranks=ranks, scores={"rrf": score})
            hit.explain = {
                "rrf": score,
                "note": "the hybrid query reports the fused score only, not each clause's rank",
            }
            hits.append(hit)
        return hits

    def _native(self, resp: Mapping[str, Any]) -> list[Hit]:
        s = self.settings
        weights = {"bm25": s.bm25_weight, "knn": s.knn_weight}
        hits = []
        for raw in resp["hits"]["hits"]:
            ranks, retriever_scores = _native_ranks(raw.get("_explanation"))
            score = float(raw.get("_score") or 0.0)
            contributions = {
                name: rrf_contribution(rank, rank_constant=s.rank_constant, weight=weights[name])
                for name, rank in ranks.items()
                if rank is not None
            }
            scores: dict[str, float | None] = {**retriever_scores, "rrf": score}
            hit = _hit(raw, score=score, ranks=ranks, scores=scores)
            hit.explain = _explain(ranks, retriever_scores, contributions, score)
            hits.append(hit)
        return hits


def _explain(
    ranks: Mapping[str, int | None],
    scores: Mapping[str, float | None],
    contributions: Mapping[str, float],
    fused: float,
    label: str = "rrf",
) -> dict[str, Any]:
    """Why a hit is where it is: each retriever's rank, raw score and share of the fusion."""
    out: dict[str, Any] = {
        name: {"rank": rank, "score": scores.get(name), label: contributions.get(name)}
        for name, rank in ranks.items()
    }
    out[label] = fused
    return out


def _native_ranks(
    explanation: Mapping[str, Any] | None,
) -> tuple[dict[str, int | None], dict[str, float | None]]:
    """Each retriever's rank and score from the server's RRF explanation.

    The RRF node says "computed for initial ranks [2, 0]" (0: not in that retriever's
    window); each of its details names "… in query at index [i] …" and wraps that
    retriever's own explanation, whose value is the retriever's score for the hit.
    """
    names = ("bm25", "knn")
    ranks: dict[str, int | None] = dict.fromkeys(names)
    scores: dict[str, float | None] = dict.fromkeys(names)
    stack = [explanation] if explanation else []
    while stack:
        node = stack.pop()
        match = _RRF_RANKS.search(str(node.get("description", "")))
        if match:
            values = [int(v) for v in match.group(1).replace(" ", "").split(",") if v]
            for name, value in zip(names, values, strict=False):
                ranks[name] = value or None
            for detail in node.get("details") or []:
                which = _QUERY_INDEX.search(str(detail.get("description", "")))
                inner = detail.get("details") or []
                if which and inner and int(which.group(1)) < len(names):
                    name = names[int(which.group(1))]
                    if ranks[name] is not None:
                        scores[name] = float(inner[0].get("value", 0.0))
            return ranks, scores
        stack.extend(node.get("details") or [])
    return ranks, scores


def _hit(
    raw: Mapping[str, Any],
    *,
    score: float,
    ranks: dict[str, int | None],
    scores: dict[str, float | None],
) -> Hit:
    src = raw.get("_source") or {}
    return Hit(
        chunk_id=raw["_id"],
        doc_id=src.get("doc_id", ""),
        source_uri=src.get("source_uri"),
        title_path=list(src.get("title_path") or []),
        page_start=src.get("page_start"),
        page_end=src.get("page_end"),
        text=src.get("content", ""),
        score=score,
        ranks=ranks,
        scores=scores,
        metadata=dict(src.get("metadata") or {}),
        highlights=list((raw.get("highlight") or {}).get("content") or []),
        doc_version=src.get("doc_version"),
        ordinal=src.get("ordinal"),
        parent_id=src.get("parent_id"),
    )


def _once_more(send: Callable[[], T]) -> T:
    """One more try after a transient failure: a node that just went down (the client
    has already tried the others) or a shard whose replica is taking over, which takes
    a moment. A second failure is the caller's to see."""
    try:
        return send()
    except EngineUnavailableError:
        time.sleep(_RETRY_PAUSE_S)
        return send()


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0
