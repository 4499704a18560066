"""Fusion in the server, where the cluster has it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from es_rag.query import build, hits
from es_rag.query.strategies.base import Query, Request, Strategy, bm25_query, with_highlight
from es_rag.types import Hit

if TYPE_CHECKING:
    from es_rag.engine.base import ClusterInfo, Engine


class NativeRRF(Strategy):
    """Elasticsearch's ``retriever.rrf`` (rank-rrf module, Enterprise or trial license)."""

    name = "native-rrf"
    needs_cluster = True

    def available(self, cluster: ClusterInfo) -> tuple[bool, str]:
        return cluster.native_rrf, cluster.native_rrf_reason

    def bodies(self, q: Query, engine: Engine) -> Request:
        s = q.settings
        body = build.native_rrf_body(
            bm25_query(q),
            q.vector,
            acl=q.acl,
            size=q.depth,
            rank_window_size=q.window,
            rank_constant=s.rank_constant,
            num_candidates=q.num_candidates,
            filters=q.filters,
            bm25_weight=s.bm25_weight,
            knn_weight=s.knn_weight,
        )
        return Request(body=with_highlight(body, q))

    def hits(self, responses: list[dict[str, Any]], q: Query) -> list[Hit]:
        return hits.native_rrf(
            responses[0], rank_constant=q.settings.rank_constant, weights=q.weights
        )


class OpenSearchHybrid(Strategy):
    """OpenSearch's ``hybrid`` query fused by an RRF search pipeline (neural-search 2.19+)."""

    name = "opensearch-hybrid"
    needs_cluster = True

    def available(self, cluster: ClusterInfo) -> tuple[bool, str]:
        return cluster.hybrid, cluster.hybrid_reason

    def bodies(self, q: Query, engine: Engine) -> Request:
        s = q.settings
        body = build.opensearch_hybrid_body(
            bm25_query(q),
            q.vector,
            acl=q.acl,
            size=q.depth,
            rank_window_size=q.window,
            num_candidates=q.num_candidates,
            filters=q.filters,
        )
        weights = {"bm25_weight": s.bm25_weight, "knn_weight": s.knn_weight}
        name = build.opensearch_pipeline_name(
            s.opensearch_search_pipeline, rank_constant=s.rank_constant, **weights
        )
        pipeline = build.opensearch_rrf_pipeline(rank_constant=s.rank_constant, **weights)
        return Request(
            body=with_highlight(body, q),
            params={"search_pipeline": name},
            pipeline=(name, pipeline),
        )

    def hits(self, responses: list[dict[str, Any]], q: Query) -> list[Hit]:
        return hits.server_fused(responses[0])
