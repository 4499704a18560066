"""Pure hit assembly: the server's responses in, ranked ``Hit`` objects out.

Every strategy ends here, so every hit reports the same things whatever ran: its rank
and raw score in each retriever (``None`` where it was not in that retriever's window),
the fused score, and an ``explain`` entry with each retriever's share of the fusion.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from es_rag.query.fusion import linear, rrf, rrf_contribution, zscore
from es_rag.types import Hit

RETRIEVERS = ("bm25", "knn")
# z-score fusion reads BM25's scores as log(1 + score): es_rag.query.fusion.zscore says why
LOG_SCORES = frozenset({"bm25"})
_RRF_RANKS = re.compile(r"computed for initial ranks \[([0-9, ]*)\]")
_QUERY_INDEX = re.compile(r"in query at index \[(\d+)\]")


def to_hit(
    raw: Mapping[str, Any],
    *,
    score: float,
    ranks: dict[str, int | None],
    scores: dict[str, float | None],
) -> Hit:
    """One raw search hit as a ``Hit`` (citation fields from ``_source``)."""
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


def with_rows(hits: Sequence[Hit], rows: Sequence[Mapping[str, Any]]) -> list[Hit]:
    """``hits`` (ranked from ids and scores alone) with their citation fields and highlights
    from ``rows``, the raw hits of a fetch by id; a hit without its row is left out."""
    by_id = {row["_id"]: row for row in rows}
    out = []
    for hit in hits:
        row = by_id.get(hit.chunk_id)
        if row is not None:
            full = to_hit(row, score=hit.score, ranks=hit.ranks, scores=hit.scores)
            full.explain = hit.explain
            out.append(full)
    return out


def explain(
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


def single(resp: Mapping[str, Any], retriever: str) -> list[Hit]:
    """The hits of one retriever, ranked as the server ranked them."""
    hits = []
    for rank, raw in enumerate(resp["hits"]["hits"], start=1):
        ranks: dict[str, int | None] = dict.fromkeys(RETRIEVERS)
        ranks[retriever] = rank
        score = float(raw.get("_score") or 0.0)
        hit = to_hit(raw, score=score, ranks=ranks, scores={retriever: score})
        hit.explain = {retriever: {"rank": rank, "score": score}}
        hits.append(hit)
    return hits


def client_fused(
    responses: Sequence[Mapping[str, Any]],
    *,
    method: str,
    window: int,
    rank_constant: int,
    weights: Mapping[str, float],
) -> list[Hit]:
    """The BM25 and kNN responses of one ``_msearch``, fused here.

    ``method`` is ``rrf`` (reciprocal rank fusion), ``linear`` (convex combination of
    min-max normalised scores) or ``zscore`` (of z-scores, BM25's of log(1 + score));
    es_rag.query.fusion holds them.
    """
    by_id: dict[str, dict[str, Any]] = {}
    raw_scores: dict[str, dict[str, float]] = {}
    rankings: dict[str, list[str]] = {}
    for name, resp in zip(RETRIEVERS, responses, strict=True):
        ids = []
        for raw in resp["hits"]["hits"]:
            by_id.setdefault(raw["_id"], dict(raw))
            if "highlight" in raw:
                by_id[raw["_id"]].setdefault("highlight", raw["highlight"])
            raw_scores.setdefault(raw["_id"], {})[name] = float(raw.get("_score") or 0.0)
            ids.append(raw["_id"])
        rankings[name] = ids
    if method in ("linear", "zscore"):
        scored = {n: [(d, raw_scores[d][n]) for d in ids] for n, ids in rankings.items()}
        if method == "linear":
            fused = linear(scored, rank_window_size=window, weights=dict(weights))
        else:
            fused = zscore(
                scored, rank_window_size=window, weights=dict(weights), log_scores=LOG_SCORES
            )
    else:
        fused = rrf(
            rankings, rank_constant=rank_constant, rank_window_size=window, weights=dict(weights)
        )
    hits = []
    for f in fused:
        scores: dict[str, float | None] = {
            "bm25": raw_scores[f.doc_id].get("bm25"),
            "knn": raw_scores[f.doc_id].get("knn"),
            method: f.score,
        }
        hit = to_hit(by_id[f.doc_id], score=f.score, ranks=dict(f.ranks), scores=scores)
        hit.explain = explain(f.ranks, scores, f.contributions, f.score, method)
        hits.append(hit)
    return hits


def server_fused(resp: Mapping[str, Any]) -> list[Hit]:
    """Hits fused by OpenSearch's RRF pipeline, which reports only the fused score."""
    hits = []
    for raw in resp["hits"]["hits"]:
        score = float(raw.get("_score") or 0.0)
        ranks: dict[str, int | None] = dict.fromkeys(RETRIEVERS)
        hit = to_hit(raw, score=score, ranks=ranks, scores={"rrf": score})
        hit.explain = {
            "rrf": score,
            "note": "the hybrid query reports the fused score only, not each clause's rank",
        }
        hits.append(hit)
    return hits


def native_rrf(
    resp: Mapping[str, Any], *, rank_constant: int, weights: Mapping[str, float]
) -> list[Hit]:
    """Hits of Elasticsearch's ``rrf`` retriever, each retriever's rank read from its
    explanation (the body asks for ``explain``)."""
    hits = []
    for raw in resp["hits"]["hits"]:
        ranks, retriever_scores = native_ranks(raw.get("_explanation"))
        score = float(raw.get("_score") or 0.0)
        contributions = {
            name: rrf_contribution(rank, rank_constant=rank_constant, weight=weights[name])
            for name, rank in ranks.items()
            if rank is not None
        }
        scores: dict[str, float | None] = {**retriever_scores, "rrf": score}
        hit = to_hit(raw, score=score, ranks=ranks, scores=scores)
        hit.explain = explain(ranks, retriever_scores, contributions, score)
        hits.append(hit)
    return hits


def native_ranks(
    explanation: Mapping[str, Any] | None,
) -> tuple[dict[str, int | None], dict[str, float | None]]:
    """Each retriever's rank and score from the server's RRF explanation.

    The RRF node says "computed for initial ranks [2, 0]" (0: not in that retriever's
    window); each of its details names "… in query at index [i] …" and wraps that
    retriever's own explanation, whose value is the retriever's score for the hit.
    """
    ranks: dict[str, int | None] = dict.fromkeys(RETRIEVERS)
    scores: dict[str, float | None] = dict.fromkeys(RETRIEVERS)
    stack = [explanation] if explanation else []
    while stack:
        node = stack.pop()
        match = _RRF_RANKS.search(str(node.get("description", "")))
        if match:
            values = [int(v) for v in match.group(1).replace(" ", "").split(",") if v]
            for name, value in zip(RETRIEVERS, values, strict=False):
                ranks[name] = value or None
            for detail in node.get("details") or []:
                which = _QUERY_INDEX.search(str(detail.get("description", "")))
                inner = detail.get("details") or []
                if which and inner and int(which.group(1)) < len(RETRIEVERS):
                    name = RETRIEVERS[int(which.group(1))]
                    if ranks[name] is not None:
                        scores[name] = float(inner[0].get("value", 0.0))
            return ranks, scores
        stack.extend(node.get("details") or [])
    return ranks, scores
