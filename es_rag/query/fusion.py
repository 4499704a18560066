"""Reciprocal Rank Fusion, pure, with Elasticsearch's semantics.

Cormack, Clarke & Büttcher (SIGIR 2009), as Elasticsearch's ``rrf`` retriever computes it:
each retriever contributes ``w_r / (rank_constant + rank_r(d))`` for the documents in its
top ``rank_window_size`` (ranks start at 1); a document missing from a retriever gets
nothing from it. The same function serves ``client-rrf`` and the explanations of
``native-rrf``, so both paths rank identically where both can run.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Fused:
    """One fused document: its RRF score, its rank in each retriever, each contribution."""

    doc_id: str
    score: float
    ranks: dict[str, int | None] = field(default_factory=dict)
    contributions: dict[str, float] = field(default_factory=dict)


def _ranked(
    scores: Mapping[str, float],
    ranks: Mapping[str, Mapping[str, int | None]],
    contributions: Mapping[str, dict[str, float]],
    names: Sequence[str],
    rank_window_size: int,
) -> list[Fused]:
    """Best first. Ties break deterministically: the better best rank first (a document one
    retriever put first beats one that was second twice, at equal score), then retriever
    order (the first retriever's view wins), then the id."""
    missing = rank_window_size + 1

    def key(doc_id: str) -> tuple[float, int, tuple[int, ...], str]:
        doc_ranks = ranks[doc_id]
        present = [r for r in doc_ranks.values() if r is not None]
        order = tuple(missing if r is None else r for r in (doc_ranks[n] for n in names))
        return (-scores[doc_id], min(present), order, doc_id)

    return [
        Fused(doc_id=d, score=scores[d], ranks=dict(ranks[d]), contributions=contributions[d])
        for d in sorted(scores, key=key)
    ]


def _window(scored: Sequence[tuple[str, float]], size: int) -> dict[str, float]:
    """A retriever's first ``size`` documents with their scores, in its order; a repeat
    keeps its first (best) score."""
    seen: dict[str, float] = {}
    for doc_id, value in scored:
        if doc_id not in seen and len(seen) < size:
            seen[doc_id] = value
    return seen


def rrf_contribution(rank: int, *, rank_constant: int, weight: float = 1.0) -> float:
    return weight / (rank_constant + rank)


def rrf(
    rankings: Mapping[str, Sequence[str]],
    *,
    rank_constant: int = 60,
    rank_window_size: int = 50,
    weights: Mapping[str, float] | None = None,
) -> list[Fused]:
    """Fuse ranked id lists (best first) into one list, best first (ties: :func:`_ranked`)."""
    if rank_constant < 1 or rank_window_size < 1:
        raise ValueError("rank_constant and rank_window_size must be >= 1")
    weights = dict(weights or {})
    names = list(rankings)
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int | None]] = {}
    contribs: dict[str, dict[str, float]] = {}
    for name in names:
        weight = weights.get(name, 1.0)
        seen: set[str] = set()
        rank = 0
        for doc_id in rankings[name]:
            if doc_id in seen:
                continue  # a retriever ranks a document once; repeats are ignored
            seen.add(doc_id)
            rank += 1
            if rank > rank_window_size:
                break
            value = rrf_contribution(rank, rank_constant=rank_constant, weight=weight)
            scores[doc_id] = scores.get(doc_id, 0.0) + value
            ranks.setdefault(doc_id, dict.fromkeys(names))[name] = rank
            contribs.setdefault(doc_id, {})[name] = value

    return _ranked(scores, ranks, contribs, names, rank_window_size)


def confidence(scores: Sequence[float], *, top: int = 10) -> float:
    """How decisively a retriever's first hit stands out of its own top ``top``, in [0, 1].

    ``(s1 - mean(s2..s_top)) / (s1 - s_top)`` on the retriever's raw scores: scale-free, so
    BM25 and cosine scores are comparable. 1 means the first hit is alone at the top (an
    exact identifier or factoid match), values near 0 mean a flat list (no clear answer).
    No hits → 0; a single hit → 1.
    """
    head = list(scores[:top])
    if not head:
        return 0.0
    if len(head) == 1:
        return 1.0
    spread = head[0] - head[-1]
    if spread <= 0:
        return 0.0
    return max(0.0, min(1.0, (head[0] - sum(head[1:]) / (len(head) - 1)) / spread))


def confidence_weights(
    scores: Mapping[str, Sequence[float]], *, top: int = 10, floor: float = 0.0
) -> dict[str, float]:
    """Per-query RRF weights from each retriever's confidence, averaging 1.

    A retriever that is sure of its answer counts more for this query, one that returns a
    flat list counts less; with equal confidence this is plain RRF.
    """
    conf = {name: max(confidence(s, top=top), floor) for name, s in scores.items()}
    total = sum(conf.values())
    if total <= 0:
        return dict.fromkeys(scores, 1.0)
    return {name: len(conf) * c / total for name, c in conf.items()}


def zscore(
    scored: Mapping[str, Sequence[tuple[str, float]]],
    *,
    rank_window_size: int = 50,
    weights: Mapping[str, float] | None = None,
    log_scores: Collection[str] = (),
) -> list[Fused]:
    """Weighted mean of z-normalised scores, measured from each list's last place.

    Each retriever's scores over its top ``rank_window_size`` become standard deviations
    from their mean (a flat list: all 0). A document a retriever did not return counts as
    that retriever's last place (its lowest z), not as its mean, which would reward being
    missed; and each z is taken from that floor (``z - z_min``), which ranks exactly as
    the plain z does but keeps every share and every fused score non-negative, as search
    scores are in Elasticsearch. Unlike min-max, one outlying top score does not squash the
    rest of the list. Ties break as in :func:`rrf`.

    The retrievers named in ``log_scores`` have each score taken as ``log(1 + score)``
    first. A z-score reads a list as if its scores were spread symmetrically about their
    mean; BM25's top 100 are not (a few long-tailed high scores above a dense shoulder), so
    its best hits stood further from the mean than kNN's similarities did, for the same
    confidence, and BM25 outvoted a kNN list that was right. The logarithm evens that
    skew; the searcher asks it for BM25 (chosen on 7 of 7 folds of a leave-one-collection-out
    choice: README, "BM25's scores as logarithms before the z-score").
    """
    weights = dict(weights or {})
    names = list(scored)
    total = sum(weights.get(n, 1.0) for n in names) or 1.0
    normalised: dict[str, dict[str, float]] = {}
    floors: dict[str, float] = {}
    ranks: dict[str, dict[str, int | None]] = {}
    for name in names:
        seen = _window(scored[name], rank_window_size)
        if not seen:
            continue
        if name in log_scores:
            seen = {d: math.log1p(max(v, 0.0)) for d, v in seen.items()}
        mean = sum(seen.values()) / len(seen)
        std = (sum((v - mean) ** 2 for v in seen.values()) / len(seen)) ** 0.5
        z = {d: (v - mean) / std if std > 0 else 0.0 for d, v in seen.items()}
        normalised[name], floors[name] = z, min(z.values())
        for rank, doc_id in enumerate(seen, start=1):
            ranks.setdefault(doc_id, dict.fromkeys(names))[name] = rank
    scores: dict[str, float] = {}
    contribs: dict[str, dict[str, float]] = {}
    for doc_id in ranks:
        parts = {
            n: weights.get(n, 1.0) / total * (normalised[n].get(doc_id, floors[n]) - floors[n])
            for n in normalised
        }
        scores[doc_id] = sum(parts.values())
        contribs[doc_id] = parts
    return _ranked(scores, ranks, contribs, names, rank_window_size)


def linear(
    scored: Mapping[str, Sequence[tuple[str, float]]],
    *,
    rank_window_size: int = 50,
    weights: Mapping[str, float] | None = None,
) -> list[Fused]:
    """Convex combination of min-max normalised scores (Bruch, Gai & Ingber, TOIS 2023).

    Each retriever's scores over its top ``rank_window_size`` are mapped to [0, 1]
    (best = 1; a single hit, or all equal, = 1) and combined as
    ``Σ_r w_r · norm_r(d) / Σ_r w_r``; a document a retriever did not return gets 0 from
    it. This is what Elasticsearch's ``linear`` retriever computes with the ``minmax``
    normalizer. Ties break as in :func:`rrf`.
    """
    weights = dict(weights or {})
    names = list(scored)
    total = sum(weights.get(n, 1.0) for n in names) or 1.0
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int | None]] = {}
    contribs: dict[str, dict[str, float]] = {}
    for name in names:
        seen = _window(scored[name], rank_window_size)
        if not seen:
            continue
        lo, hi = min(seen.values()), max(seen.values())
        w = weights.get(name, 1.0) / total
        for rank, (doc_id, value) in enumerate(seen.items(), start=1):
            norm = (value - lo) / (hi - lo) if hi > lo else 1.0
            scores[doc_id] = scores.get(doc_id, 0.0) + w * norm
            ranks.setdefault(doc_id, dict.fromkeys(names))[name] = rank
            contribs.setdefault(doc_id, {})[name] = w * norm
    return _ranked(scores, ranks, contribs, names, rank_window_size)
