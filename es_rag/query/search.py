"""The Searcher: picks a strategy from the cluster probe, runs it, assembles hits.

Strategies (DESIGN.md §6): ``bm25``, ``knn``, ``client-rrf`` (BM25 and kNN in ONE
``_msearch``, fused in Python) and ``native-rrf`` (the server's ``rrf`` retriever, where
the license and modules allow it). ``auto`` takes native RRF when the probe says it runs,
else client-side RRF, and the response says which one ran and why.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from elasticsearch import Elasticsearch

from es_rag.acl import acl_filter, make_caller
from es_rag.analysis import TextAnalyzer
from es_rag.config import Settings
from es_rag.embedding import Embedder, build_embedder
from es_rag.engine.client import ClusterInfo, call, make_client, probe_cluster
from es_rag.engine.index import ChunkIndex
from es_rag.engine.mapping import IndexContract
from es_rag.errors import (
    AnalyzerMismatchError,
    ConfigurationError,
    EngineError,
    IndexContractError,
    StrategyUnavailableError,
)
from es_rag.query import build
from es_rag.query.fusion import rrf
from es_rag.types import Caller, Hit, SearchResponse

STRATEGIES = ("auto", "bm25", "knn", "client-rrf", "native-rrf")
_RRF_RANKS = re.compile(r"computed for initial ranks \[([0-9, ]*)\]")


class Searcher:
    """Answers queries on behalf of a caller. Construction does no I/O."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: Elasticsearch | None = None,
        embedder: Embedder | None = None,
        analyzer: TextAnalyzer | None = None,
    ) -> None:
        self.settings = settings
        self._client = client
        self._embedder = embedder
        self._analyzer = analyzer
        self._cluster: ClusterInfo | None = None
        self._contract: IndexContract | None = None

    @property
    def client(self) -> Elasticsearch:
        if self._client is None:
            self._client = make_client(self.settings)
        return self._client

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = build_embedder(self.settings)
        return self._embedder

    @property
    def analyzer(self) -> TextAnalyzer:
        if self._analyzer is None:
            self._analyzer = TextAnalyzer(self.settings.analyzer_language)
        return self._analyzer

    def cluster(self) -> ClusterInfo:
        if self._cluster is None:
            self._cluster = probe_cluster(self.client, self.settings.index)
        return self._cluster

    def contract(self) -> IndexContract:
        """The index's contract, checked once against this searcher's analyzer and model."""
        if self._contract is None:
            contract = ChunkIndex(self.client, self.settings.index).contract()
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
        if name == "auto":
            info = self.cluster()
            if info.native_rrf:
                return "native-rrf", None
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
        filters: Sequence[dict[str, Any]] = (),
        strategy: str | None = None,
    ) -> SearchResponse:
        if caller is None:
            if tenant is None:
                raise ConfigurationError("search needs a tenant (or a Caller)")
            caller = make_caller(tenant, users=principals)
        k = k or self.settings.k
        if k < 1:
            raise ConfigurationError("k must be >= 1")
        name, note = self.resolve_strategy(strategy)
        self.contract()  # probed and checked once per Searcher, outside the timings
        if name != "bm25":
            self._check_vectors()
        started = time.perf_counter()
        timings: dict[str, float] = {}
        acl = acl_filter(caller)
        s = self.settings
        window = max(s.rank_window_size, k)
        terms = self.analyzer.analyze(query) if name != "knn" else ""
        vector: list[float] = []
        if name != "bm25":
            t0 = time.perf_counter()
            vector = self.embedder.embed_query(query)
            timings["embed"] = _ms(t0)

        t0 = time.perf_counter()
        if name == "bm25":
            body = build.bm25_body(
                terms,
                acl=acl,
                size=k,
                filters=filters,
                content_boost=s.content_boost,
                title_boost=s.title_boost,
            )
            hits = self._single(self._search(body), "bm25")
        elif name == "knn":
            body = build.knn_body(
                vector, acl=acl, size=k, num_candidates=max(s.num_candidates, k), filters=filters
            )
            hits = self._single(self._search(body), "knn")
        elif name == "client-rrf":
            bm25 = build.bm25_body(
                terms,
                acl=acl,
                size=window,
                filters=filters,
                content_boost=s.content_boost,
                title_boost=s.title_boost,
            )
            knn = build.knn_body(
                vector,
                acl=acl,
                size=window,
                num_candidates=max(s.num_candidates, window),
                filters=filters,
            )
            responses = self._msearch(build.msearch_pair(s.index, bm25, knn))
            timings["search"] = _ms(t0)
            t0 = time.perf_counter()
            hits = self._client_fuse(responses, k=k, window=window)
            timings["fuse"] = _ms(t0)
        else:
            body = build.native_rrf_body(
                terms,
                vector,
                acl=acl,
                size=k,
                rank_window_size=window,
                rank_constant=s.rank_constant,
                num_candidates=max(s.num_candidates, window),
                filters=filters,
                bm25_weight=s.bm25_weight,
                knn_weight=s.knn_weight,
                content_boost=s.content_boost,
                title_boost=s.title_boost,
            )
            hits = self._native(self._search(body))
        timings.setdefault("search", _ms(t0))
        timings["total"] = _ms(started)
        return SearchResponse(strategy=name, hits=hits[:k], timings_ms=timings, note=note)

    # --- execution -----------------------------------------------------------------------
    def _search(self, body: dict[str, Any]) -> dict[str, Any]:
        resp = call("search", lambda: self.client.search(index=self.settings.index, body=body))
        return dict(resp.body)

    def _msearch(self, searches: list[dict[str, Any]]) -> list[dict[str, Any]]:
        resp = call("msearch", lambda: self.client.msearch(searches=searches))
        out = []
        for item in resp.body["responses"]:
            if "error" in item:
                err = item["error"]
                reason = err.get("reason") if isinstance(err, dict) else err
                raise EngineError(f"msearch: {item.get('status')} {reason}")
            out.append(item)
        return out

    def _single(self, resp: Mapping[str, Any], retriever: str) -> list[Hit]:
        hits = []
        for rank, raw in enumerate(resp["hits"]["hits"], start=1):
            ranks: dict[str, int | None] = {"bm25": None, "knn": None}
            ranks[retriever] = rank
            score = float(raw.get("_score") or 0.0)
            hits.append(_hit(raw, score=score, ranks=ranks, scores={retriever: score}))
        return hits

    def _client_fuse(self, responses: list[dict[str, Any]], *, k: int, window: int) -> list[Hit]:
        s = self.settings
        by_id: dict[str, dict[str, Any]] = {}
        raw_scores: dict[str, dict[str, float]] = {}
        rankings: dict[str, list[str]] = {}
        for name, resp in zip(("bm25", "knn"), responses, strict=True):
            ids = []
            for raw in resp["hits"]["hits"]:
                by_id.setdefault(raw["_id"], raw)
                raw_scores.setdefault(raw["_id"], {})[name] = float(raw.get("_score") or 0.0)
                ids.append(raw["_id"])
            rankings[name] = ids
        fused = rrf(
            rankings,
            rank_constant=s.rank_constant,
            rank_window_size=window,
            weights={"bm25": s.bm25_weight, "knn": s.knn_weight},
        )
        hits = []
        for f in fused[:k]:
            scores: dict[str, float | None] = {
                "bm25": raw_scores[f.doc_id].get("bm25"),
                "knn": raw_scores[f.doc_id].get("knn"),
                "rrf": f.score,
            }
            hits.append(_hit(by_id[f.doc_id], score=f.score, ranks=dict(f.ranks), scores=scores))
        return hits

    def _native(self, resp: Mapping[str, Any]) -> list[Hit]:
        hits = []
        for raw in resp["hits"]["hits"]:
            ranks = _native_ranks(raw.get("_explanation"))
            score = float(raw.get("_score") or 0.0)
            hits.append(_hit(raw, score=score, ranks=ranks, scores={"rrf": score}))
        return hits


def _native_ranks(explanation: Mapping[str, Any] | None) -> dict[str, int | None]:
    """Each retriever's rank from the server's RRF explanation ("initial ranks [2, 0]")."""
    ranks: dict[str, int | None] = {"bm25": None, "knn": None}
    stack = [explanation] if explanation else []
    while stack:
        node = stack.pop()
        match = _RRF_RANKS.search(str(node.get("description", "")))
        if match:
            values = [int(v) for v in match.group(1).replace(" ", "").split(",") if v]
            for name, value in zip(("bm25", "knn"), values, strict=False):
                ranks[name] = value or None  # 0 = not in that retriever's window
            return ranks
        stack.extend(node.get("details") or [])
    return ranks


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
    )


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0
