"""The single retrievers, the baselines every fusion is measured against."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from es_rag.query import hits
from es_rag.query.strategies.base import Query, Request, Strategy, bm25_body, with_highlight
from es_rag.types import Hit

if TYPE_CHECKING:
    from es_rag.engine.base import Engine


class BM25(Strategy):
    """BM25 on es-rag's analysed terms fields."""

    name = "bm25"
    uses_vector = False

    def bodies(self, q: Query, engine: Engine) -> Request:
        search_type = q.settings.search_type
        params = {"search_type": search_type} if search_type != "query_then_fetch" else {}
        return Request(body=bm25_body(q, q.depth), params=params)

    def hits(self, responses: list[dict[str, Any]], q: Query) -> list[Hit]:
        return hits.single(responses[0], "bm25")


class KNN(Strategy):
    """Approximate kNN, pre-filtered by the ACL inside the graph walk."""

    name = "knn"
    uses_terms = False

    def bodies(self, q: Query, engine: Engine) -> Request:
        body = engine.knn_body(
            q.vector,
            acl=q.acl,
            size=q.depth,
            num_candidates=max(q.settings.num_candidates, q.depth),
            filters=q.filters,
        )
        return Request(body=with_highlight(body, q))

    def hits(self, responses: list[dict[str, Any]], q: Query) -> list[Hit]:
        return hits.single(responses[0], "knn")
