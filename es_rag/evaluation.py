"""Retrieval metrics, pure: graded nDCG@k, Recall@k, MRR@k over ranked id lists.

nDCG uses the exponential gain of Järvelin & Kekäläinen (TOIS 2002) as trec_eval's
``ndcg_cut`` does with graded judgments: gain ``2^rel - 1``, discount ``log2(rank + 1)``,
ideal ordering from the judgments. Queries without any relevant document are skipped by
the caller (their nDCG is undefined).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def dcg(gains: Sequence[float]) -> float:
    return sum((2.0**g - 1.0) / math.log2(i + 2) for i, g in enumerate(gains))


def ndcg_at_k(ranked: Sequence[str], qrels: Mapping[str, float], k: int = 10) -> float:
    ideal = dcg(sorted((g for g in qrels.values() if g > 0), reverse=True)[:k])
    if ideal == 0:
        return 0.0
    return dcg([max(qrels.get(d, 0.0), 0.0) for d in ranked[:k]]) / ideal


def recall_at_k(ranked: Sequence[str], qrels: Mapping[str, float], k: int = 10) -> float:
    relevant = {d for d, g in qrels.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant & set(ranked[:k])) / len(relevant)


def mrr_at_k(ranked: Sequence[str], qrels: Mapping[str, float], k: int = 10) -> float:
    for i, d in enumerate(ranked[:k], start=1):
        if qrels.get(d, 0.0) > 0:
            return 1.0 / i
    return 0.0


def dedupe(ids: Sequence[str]) -> list[str]:
    """Chunk hits → document ranking: a document ranks where its best chunk does."""
    seen: set[str] = set()
    return [d for d in ids if not (d in seen or seen.add(d))]  # type: ignore[func-returns-value]
