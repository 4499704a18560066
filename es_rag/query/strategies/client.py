"""Fusion in es-rag: BM25 and kNN in one ``_msearch``, fused here (any cluster)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from es_rag.query import build, hits, sentences
from es_rag.query.strategies.base import Query, Request, Strategy, bm25_body
from es_rag.types import Hit

if TYPE_CHECKING:
    from es_rag.engine.base import Engine


class ClientFusion(Strategy):
    """Both retrievers' top ``window`` in one round trip; ``method`` fuses them.

    Fusion reads ids and scores only, so the two windows come back without their rows:
    reading and highlighting twice the window's rows to keep ``depth`` of them cost more
    than the searches themselves (26.4 against 10.8 ms p50 on Cranfield, window 50). The
    Searcher fetches the rows of the hits it keeps (``fetches_rows``)."""

    method: ClassVar[str]
    fuses_here = True
    fetches_rows = True
    asks_sentences = True

    def bodies(self, q: Query, engine: Engine) -> Request:
        s = q.settings
        knn = [
            build.ids_only(
                engine.knn_body(
                    vector,
                    acl=q.acl,
                    size=q.window,
                    num_candidates=q.num_candidates,
                    filters=q.filters,
                )
            )
            for vector in (q.vector, *q.sentence_vectors)
        ]
        searches = build.msearch_pair(s.index, _bm25(q), knn[0], search_type=s.search_type)
        for body in knn[1:]:  # the question's sentences (es_rag.query.sentences)
            searches += [{"index": s.index}, body]
        return Request(searches=searches)

    def again(
        self, q: Query, engine: Engine, first: list[dict[str, Any]]
    ) -> tuple[Request, Callable[[list[dict[str, Any]]], list[dict[str, Any]]]]:
        """The expanded BM25 search alone: the first round's kNN list is reused, since the
        question's vector has not changed, so the kNN search is not repeated."""
        header = build.bm25_header(q.settings.index, q.settings.search_type)
        request = Request(searches=[header, _bm25(q)])
        return request, lambda responses: [*responses, *first[1:]]

    def hits(self, responses: list[dict[str, Any]], q: Query) -> list[Hit]:
        if len(responses) > 2:  # kNN asked for the whole question and its sentences
            responses = [responses[0], sentences.best_of(responses[1:], q.window)]
        fused = hits.client_fused(
            responses,
            method=self.method,
            window=q.window,
            rank_constant=q.settings.rank_constant,
            weights=q.weights,
        )
        return fused[: q.depth]


def _bm25(q: Query) -> dict[str, Any]:
    return build.ids_only(bm25_body(q, q.window))


class ClientRRF(ClientFusion):
    """Reciprocal rank fusion, as the server's ``rrf`` retriever computes it."""

    name = "client-rrf"
    method = "rrf"


class ClientLinear(ClientFusion):
    """Convex combination of min-max normalised scores (Bruch et al., TOIS 2023)."""

    name = "client-linear"
    method = "linear"


class ClientZScore(ClientFusion):
    """Weighted mean of z-normalised scores (es_rag.query.fusion.zscore)."""

    name = "client-zscore"
    method = "zscore"
