"""Pure request-body builders: plain dicts in, plain dicts out, no server.

Every body that retrieves chunks takes the caller's ACL clause and puts it INSIDE the
retriever (the BM25 bool filter, ``knn.filter``), never around the results, so k hits are
k visible hits and nothing else can be scored, counted or highlighted. Unit tests compare
these bodies with fixtures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

VECTOR_FIELD = "embedding"
# Vectors and analysed terms are large and of no use to a reader of hits.
SOURCE_EXCLUDES = ["embedding", "content_terms", "title_terms"]
CHILDREN_ONLY: dict[str, Any] = {"term": {"chunk_type": "child"}}
# Tables of contents and indexes (es_rag.cleaning.mark_navigation): stored, not searched,
# unless a filter on element_types asks for them.
WITHOUT_NAVIGATION: dict[str, Any] = {
    "bool": {"must_not": [{"term": {"element_types": "contents"}}]}
}


def retrieval_filters(acl: dict[str, Any], filters: Sequence[dict[str, Any]] = ()) -> list[dict]:
    """ACL first, then the searchable-rows restriction, then user filters."""
    return [acl, CHILDREN_ONLY, *filters]


def bm25_query(
    query_terms: str,
    *,
    acl: dict[str, Any],
    filters: Sequence[dict[str, Any]] = (),
    content_boost: float = 1.0,
    title_boost: float = 0.5,
    expansion: Sequence[tuple[str, float]] = (),
) -> dict[str, Any]:
    """BM25 over es-rag's analysed term fields; the terms are already analysed in Python.

    ``most_fields`` adds the title match to the content match: the title path is also
    inside ``content_terms`` (context header), so this is a gentle extra vote for
    documents whose headings name the query, not a replacement of the body's score.
    ``expansion`` (pseudo-relevance feedback: analysed terms and their boosts) adds one
    ``term`` clause each on ``content_terms`` beside the question; a row that matches only
    expansion terms is found too, which is what lets feedback reach a vocabulary the
    question did not use. The ACL stays in the one ``filter``, around all of them.
    """
    question = {
        "multi_match": {
            "query": query_terms,
            "type": "most_fields",
            "fields": [
                f"content_terms^{content_boost:g}",
                f"title_terms^{title_boost:g}",
            ],
            "operator": "or",
        }
    }
    if not expansion:
        return {"bool": {"must": [question], "filter": retrieval_filters(acl, filters)}}
    terms = [
        {"term": {"content_terms": {"value": term, "boost": round(boost, 4)}}}
        for term, boost in expansion
    ]
    return {
        "bool": {
            "should": [question, *terms],
            "minimum_should_match": 1,
            "filter": retrieval_filters(acl, filters),
        }
    }


def knn_clause(
    vector: Sequence[float],
    *,
    acl: dict[str, Any],
    k: int,
    num_candidates: int,
    filters: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """A kNN search pre-filtered by the ACL (Lucene applies the filter during the graph walk)."""
    return {
        "field": VECTOR_FIELD,
        "query_vector": list(vector),
        "k": k,
        "num_candidates": max(num_candidates, k),
        "filter": retrieval_filters(acl, filters),
    }


def hits_body(size: int, **retrieval: Any) -> dict[str, Any]:
    """A search body around ``retrieval`` (``query=``, ``knn=``…): ``size`` hits, no vectors
    or term fields in their ``_source``, no total count (nobody reads it)."""
    return {
        **retrieval,
        "size": size,
        "_source": {"excludes": SOURCE_EXCLUDES},
        "track_total_hits": False,
    }


def knn_body(
    vector: Sequence[float],
    *,
    acl: dict[str, Any],
    size: int,
    num_candidates: int,
    filters: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    knn = knn_clause(vector, acl=acl, k=size, num_candidates=num_candidates, filters=filters)
    return hits_body(size, knn=knn)


def opensearch_knn_query(
    vector: Sequence[float],
    *,
    acl: dict[str, Any],
    k: int,
    num_candidates: int,
    filters: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """OpenSearch's kNN query with the ACL as its efficient filter.

    The filter sits inside ``knn.<field>.filter``, so the k-NN plugin applies it while it
    walks the graph (lucene and faiss engines) and k hits are k visible hits; a ``bool``
    around the knn query would post-filter instead. ``ef_search`` plays the part of
    Elasticsearch's ``num_candidates``.
    """
    return {
        "knn": {
            VECTOR_FIELD: {
                "vector": list(vector),
                "k": k,
                "filter": {"bool": {"filter": retrieval_filters(acl, filters)}},
                "method_parameters": {"ef_search": max(num_candidates, k)},
            }
        }
    }


def opensearch_knn_body(
    vector: Sequence[float],
    *,
    acl: dict[str, Any],
    size: int,
    num_candidates: int,
    filters: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    query = opensearch_knn_query(
        vector, acl=acl, k=size, num_candidates=num_candidates, filters=filters
    )
    return hits_body(size, query=query)


def opensearch_hybrid_body(
    bm25: dict[str, Any],
    vector: Sequence[float],
    *,
    acl: dict[str, Any],
    size: int,
    rank_window_size: int,
    num_candidates: int,
    filters: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """OpenSearch ``hybrid`` query: BM25 (``bm25``, a :func:`bm25_query`) and kNN clauses,
    fused by a search pipeline.

    Each clause carries the ACL itself (the hybrid query's own ``filter`` is newer than
    2.19 and would not reach inside the kNN graph walk). ``pagination_depth`` is each
    clause's window, the counterpart of ``rank_window_size``.
    """
    return {
        "query": {
            "hybrid": {
                "queries": [
                    bm25,
                    opensearch_knn_query(
                        vector,
                        acl=acl,
                        k=rank_window_size,
                        num_candidates=num_candidates,
                        filters=filters,
                    ),
                ],
                "pagination_depth": rank_window_size,
            }
        },
        "size": min(size, rank_window_size),
        "_source": {"excludes": SOURCE_EXCLUDES},
    }


def opensearch_rrf_pipeline(
    *, rank_constant: int, bm25_weight: float = 1.0, knn_weight: float = 1.0
) -> dict[str, Any]:
    """The search pipeline that fuses a hybrid query's clauses by RRF (2.19+).

    The processor wants weights in [0, 1] summing to 1; RRF with weights scaled by one
    factor ranks exactly as with the originals, so es-rag's weights are normalised.
    """
    combination: dict[str, Any] = {"technique": "rrf", "rank_constant": rank_constant}
    if bm25_weight != knn_weight:
        total = bm25_weight + knn_weight
        combination["parameters"] = {
            "weights": [round(bm25_weight / total, 6), round(knn_weight / total, 6)]
        }
    return {
        "description": "es-rag: reciprocal rank fusion of a hybrid query (BM25, kNN)",
        "phase_results_processors": [{"score-ranker-processor": {"combination": combination}}],
    }


def opensearch_pipeline_name(
    base: str, *, rank_constant: int, bm25_weight: float = 1.0, knn_weight: float = 1.0
) -> str:
    """One pipeline per fusion setting, so searchers with other settings never rewrite it."""
    name = f"{base}-rc{rank_constant}"
    if bm25_weight != knn_weight:
        name += f"-w{bm25_weight:g}-{knn_weight:g}"
    return name


def msearch_pair(
    index: str,
    bm25: dict[str, Any],
    knn: dict[str, Any],
    *,
    search_type: str = "query_then_fetch",
) -> list[dict[str, Any]]:
    """The ``_msearch`` searches for client-side RRF: BM25 first, kNN second, one round trip.

    ``dfs_query_then_fetch`` (BM25 only: it is about term statistics) makes a multi-shard
    index score BM25 as one shard would.
    """
    return [bm25_header(index, search_type), bm25, {"index": index}, knn]


def bm25_header(index: str, search_type: str = "query_then_fetch") -> dict[str, Any]:
    """The ``_msearch`` header of a BM25 search (kNN ones need no ``search_type``)."""
    header: dict[str, Any] = {"index": index}
    if search_type != "query_then_fetch":
        header["search_type"] = search_type
    return header


def native_rrf_body(
    bm25: dict[str, Any],
    vector: Sequence[float],
    *,
    acl: dict[str, Any],
    size: int,
    rank_window_size: int,
    rank_constant: int,
    num_candidates: int,
    filters: Sequence[dict[str, Any]] = (),
    bm25_weight: float = 1.0,
    knn_weight: float = 1.0,
    explain: bool = True,
) -> dict[str, Any]:
    """``retriever.rrf`` over a ``standard`` retriever of ``bm25`` (a :func:`bm25_query`)
    and a ``knn`` retriever.

    Equal weights use the plain list form that every RRF-capable release accepts; other
    weights use the weighted form (``{"retriever": …, "weight": w}``, Elasticsearch 9.2+).
    ``explain`` makes the server report each hit's rank in each retriever.
    """
    standard = {"standard": {"query": bm25}}
    knn = {
        "knn": knn_clause(
            vector, acl=acl, k=rank_window_size, num_candidates=num_candidates, filters=filters
        )
    }
    retrievers: list[dict[str, Any]]
    if bm25_weight == 1.0 and knn_weight == 1.0:
        retrievers = [standard, knn]
    else:
        retrievers = [
            {"retriever": standard, "weight": bm25_weight},
            {"retriever": knn, "weight": knn_weight},
        ]
    return {
        "retriever": {
            "rrf": {
                "retrievers": retrievers,
                "rank_window_size": rank_window_size,
                "rank_constant": rank_constant,
            }
        },
        "size": min(size, rank_window_size),
        "_source": {"excludes": SOURCE_EXCLUDES},
        "track_total_hits": False,
        "explain": explain,
    }


def rows_body(
    acl: dict[str, Any],
    *,
    ids: Sequence[str] = (),
    neighbours: Sequence[tuple[str, str, int, int]] = (),
) -> dict[str, Any] | None:
    """Context rows under the caller's ACL: rows by id (parents), or the children of a
    document version within an ordinal range (neighbours). None when nothing is asked."""
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
        return None
    return {
        "query": {
            "bool": {"filter": [acl, {"bool": {"should": should, "minimum_should_match": 1}}]}
        },
        "size": 1000,
        "_source": {"excludes": SOURCE_EXCLUDES},
        "sort": [{"doc_id": "asc"}, {"ordinal": "asc"}],
    }


def ids_only(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` returning each hit's id and score only: no row, no highlight."""
    return {**{k: v for k, v in body.items() if k != "highlight"}, "_source": False}


def hits_rows_body(
    acl: dict[str, Any],
    filters: Sequence[dict[str, Any]],
    ids: Sequence[str],
    highlight: dict[str, Any] | None,
) -> dict[str, Any]:
    """The rows of the hits a search keeps, under the caller's ACL and filters, highlighted
    as the search would have highlighted them (the highlight carries its own query): a
    row whose ACL changed since the search is not read."""
    body: dict[str, Any] = {
        "query": {"bool": {"filter": [acl, *filters, {"ids": {"values": list(ids)}}]}},
        "size": len(ids),
        "_source": {"excludes": SOURCE_EXCLUDES},
        "track_total_hits": False,
    }
    if highlight:
        body["highlight"] = highlight
    return body


def feedback_body(acl: dict[str, Any], ids: Sequence[str]) -> dict[str, Any]:
    """The analysed terms of the top fused chunks, under the caller's ACL (they were hits of
    this caller's search a moment ago; a row whose ACL changed since is simply not read)."""
    return {
        "query": {"bool": {"filter": [acl, {"ids": {"values": list(ids)}}]}},
        "size": len(ids),
        "_source": ["content_terms"],
        "track_total_hits": False,
    }


def highlight(query_text: str, *, fragment_size: int = 160, fragments: int = 2) -> dict[str, Any]:
    """Highlights on ``content`` for the words of the question.

    They come from the same filtered search as the hits, so they can only quote rows the
    caller may read. ``content`` is standard-analysed, so the raw question is matched there
    (the BM25 terms are stems and would not highlight).
    """
    return {
        "fields": {"content": {"fragment_size": fragment_size, "number_of_fragments": fragments}},
        "highlight_query": {"match": {"content": {"query": query_text}}},
        "pre_tags": ["<em>"],
        "post_tags": ["</em>"],
    }
