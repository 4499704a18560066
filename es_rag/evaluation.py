"""Retrieval metrics and significance tests: the metric core behind ``es-rag eval``.

Every metric is a pure function of one query's ranked document ids (best first, no
duplicates; see :func:`dedupe`) and its judgments ``qrels = {doc_id: grade}``. A document
is *relevant* when its grade is ``> 0``; unjudged documents count as non-relevant.

The definitions are those of trec_eval (the reference implementation of TREC, used by
BEIR and ir_measures through pytrec_eval), and ``tests/unit/test_evaluation.py`` checks
them query by query against ``pytrec_eval`` to 1e-6 on random graded runs:

========================  ==========================  ================================
es-rag                    trec_eval measure           note
========================  ==========================  ================================
``ndcg_at_k``             ``ndcg_cut_k``              linear gain (see below)
``recall_at_k``           ``recall_k``
``precision_at_k``        ``P_k``                     denominator is k, not len(run)
``hit_at_k``              ``success_k``
``mrr_at_k``              ``recip_rank`` on a run     trec_eval's ``recip_rank`` is not
                          cut at k                    cut; es-rag cuts at k
``average_precision``     ``map`` (per query)         uncut, over the whole ranking
========================  ==========================  ================================

**nDCG gain convention.** nDCG (Järvelin & Kekäläinen, TOIS 2002) leaves the gain open.
trec_eval's ``ndcg``/``ndcg_cut`` use the *linear* gain ``gain = grade`` (negative grades
clamp to 0), with discount ``log2(rank + 1)`` and the ideal ranking built from all
judged documents, cut at k. This was verified empirically: for qrels ``{a: 3, b: 1,
c: 2}`` and ranking ``[b, x, a]``, pytrec_eval's ``ndcg_cut_3`` is 0.52500, the linear
value, not 0.47909 (the exponential ``2^grade - 1`` gain of Burges et al., ICML 2005,
which an earlier version of this module used by default). es-rag's default is linear so
its numbers are comparable with published BEIR/TREC results; ``exponential=True``
selects the ``2^grade - 1`` gain. With binary judgments the two coincide.

**Aggregation.** :func:`evaluate` macro-averages over queries with at least one relevant
judgment; others are skipped (nDCG, recall and AP are undefined for them) and counted. A
judged query missing from the run scores 0, as ``trec_eval -c`` does: retrieving nothing
is a failure, not an absence.

**Significance.** :func:`paired_randomization_test` (Fisher's randomization test, the
test recommended for IR by Smucker, Allan & Carterette, CIKM 2007) and
:func:`bootstrap_ci` (percentile bootstrap, Efron & Tibshirani 1993; Sakai, SIGIR 2006)
compare two strategies on the same queries through their per-query scores
(:func:`per_query`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

Run = Mapping[str, Sequence[str]]
Qrels = Mapping[str, Mapping[str, float]]

_GAIN_CLAMP = 0.0  # trec_eval gives non-positive grades zero gain


def dcg(gains: Sequence[float], *, exponential: bool = False) -> float:
    """Discounted cumulative gain of graded gains in rank order (rank 1 first).

    Linear gain by default, as trec_eval's ``ndcg_cut``; ``exponential=True`` uses
    ``2^g - 1`` (Burges et al., ICML 2005).
    """
    if exponential:
        return sum((2.0**g - 1.0) / math.log2(i + 2) for i, g in enumerate(gains))
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains))


def ndcg_at_k(
    ranked: Sequence[str], qrels: Mapping[str, float], k: int = 10, *, exponential: bool = False
) -> float:
    """nDCG@k (trec_eval ``ndcg_cut_k``): DCG of the top k over DCG of the ideal top k.

    The ideal ranking uses every judged document, retrieved or not, so missing a relevant
    document costs. Negative grades give zero gain, as in trec_eval.
    """
    positive = sorted((g for g in qrels.values() if g > _GAIN_CLAMP), reverse=True)[:k]
    ideal = dcg(positive, exponential=exponential)
    if ideal == 0:
        return 0.0
    gains = [max(qrels.get(d, 0.0), _GAIN_CLAMP) for d in ranked[:k]]
    return dcg(gains, exponential=exponential) / ideal


def _relevant(qrels: Mapping[str, float]) -> set[str]:
    return {d for d, g in qrels.items() if g > 0}


def recall_at_k(ranked: Sequence[str], qrels: Mapping[str, float], k: int = 10) -> float:
    """Fraction of the relevant documents found in the top k (trec_eval ``recall_k``)."""
    relevant = _relevant(qrels)
    if not relevant:
        return 0.0
    return len(relevant & set(ranked[:k])) / len(relevant)


def precision_at_k(ranked: Sequence[str], qrels: Mapping[str, float], k: int = 10) -> float:
    """Relevant documents in the top k over k (trec_eval ``P_k``: short runs are not
    rewarded for returning fewer than k)."""
    if k <= 0:
        return 0.0
    relevant = _relevant(qrels)
    return sum(1 for d in ranked[:k] if d in relevant) / k


def hit_at_k(ranked: Sequence[str], qrels: Mapping[str, float], k: int = 10) -> float:
    """1.0 if any relevant document is in the top k, else 0.0 (trec_eval ``success_k``).

    The RAG-relevant question: did the context handed to the generator hold any evidence?
    """
    return 1.0 if any(qrels.get(d, 0.0) > 0 for d in ranked[:k]) else 0.0


def mrr_at_k(ranked: Sequence[str], qrels: Mapping[str, float], k: int = 10) -> float:
    """Reciprocal rank of the first relevant document within the top k, else 0.

    Equals trec_eval's ``recip_rank`` on the run truncated to k (trec_eval never cuts).
    """
    for i, d in enumerate(ranked[:k], start=1):
        if qrels.get(d, 0.0) > 0:
            return 1.0 / i
    return 0.0


def average_precision(ranked: Sequence[str], qrels: Mapping[str, float]) -> float:
    """Average precision over the whole ranking (per-query MAP, trec_eval ``map``).

    Sum of precision at the rank of each relevant document retrieved, divided by the
    number of relevant documents judged (not retrieved), so unretrieved relevant
    documents count as precision 0.
    """
    relevant = _relevant(qrels)
    if not relevant:
        return 0.0
    hits = 0
    total = 0.0
    for i, d in enumerate(ranked, start=1):
        if d in relevant:
            hits += 1
            total += hits / i
    return total / len(relevant)


def dedupe(ids: Sequence[str]) -> list[str]:
    """Chunk hits → document ranking: a document ranks where its best chunk does."""
    seen: set[str] = set()
    return [d for d in ids if not (d in seen or seen.add(d))]  # type: ignore[func-returns-value]


# --- aggregation -----------------------------------------------------------------------

_Metric = Callable[[Sequence[str], Mapping[str, float], int], float]

METRICS: dict[str, _Metric] = {
    "ndcg": ndcg_at_k,
    "recall": recall_at_k,
    "precision": precision_at_k,
    "hit": hit_at_k,
    "mrr": mrr_at_k,
    "map": lambda ranked, qrels, _k: average_precision(ranked, qrels),
}
"""Per-query metrics by base name; all take ``(ranked, qrels, k)`` (``map`` ignores k)."""

_NAME = re.compile(r"^(?P<base>[a-z]+)(?:@(?P<k>\d+))?$")


def _parse_metric(metric: str, k: int) -> tuple[_Metric, int]:
    m = _NAME.match(metric.strip().lower())
    if m is None or m["base"] not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {sorted(METRICS)}")
    return METRICS[m["base"]], int(m["k"]) if m["k"] else k


def _judged_queries(run: Run, qrels: Qrels) -> tuple[list[str], list[str]]:
    """(evaluated, skipped) query ids, each sorted: evaluated ones have a relevant doc."""
    evaluated: list[str] = []
    skipped: list[str] = []
    for qid in sorted(set(run) | set(qrels)):
        (evaluated if _relevant(qrels.get(qid, {})) else skipped).append(qid)
    return evaluated, skipped


def _rankings(run: Run, qids: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
    for qid in qids:
        yield qid, dedupe(run.get(qid, ()))


def format_trec_run(run: Run, *, tag: str) -> str:
    """A run in TREC format (``qid Q0 docid rank score tag``), for trec_eval and others.

    Only the order is known, so the score is descending from the list's length.
    """
    lines = []
    for qid in sorted(run):
        ranked = dedupe(run[qid])
        for rank, doc_id in enumerate(ranked, start=1):
            lines.append(f"{qid} Q0 {doc_id} {rank} {len(ranked) - rank + 1} {tag}")
    return "\n".join(lines) + ("\n" if lines else "")


def parse_trec_run(text: str) -> dict[str, list[str]]:
    """``{qid: [doc ids best first]}`` from a TREC run (ranked by score, then by rank)."""
    rows: dict[str, list[tuple[float, int, str]]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) < 6:
            raise ValueError(f"line {number}: expected 'qid Q0 docid rank score tag'")
        qid, _, doc_id, rank, score = parts[:5]
        rows.setdefault(qid, []).append((-float(score), int(rank), doc_id))
    return {qid: [d for _, _, d in sorted(items)] for qid, items in rows.items()}


def per_query(run: Run, qrels: Qrels, metric: str, k: int = 10) -> dict[str, float]:
    """``{qid: score}`` of one metric, for significance tests between two runs.

    ``metric`` is a base name from :data:`METRICS` (``"ndcg"``, ``"recall"``, ``"hit"``,
    ``"mrr"``, ``"map"``, ``"precision"``) or carries its own cut (``"ndcg@10"``, which
    overrides ``k``). Same query set as :func:`evaluate`: queries without a relevant
    judgment are left out; judged queries missing from the run score 0.
    """
    fn, cut = _parse_metric(metric, k)
    evaluated, _ = _judged_queries(run, qrels)
    return {qid: fn(ranked, qrels[qid], cut) for qid, ranked in _rankings(run, evaluated)}


def _mean_block(scores: Sequence[Mapping[str, float]], names: Sequence[str]) -> dict[str, Any]:
    n = len(scores)
    out: dict[str, Any] = {
        name: (math.fsum(s[name] for s in scores) / n if n else 0.0) for name in names
    }
    out["queries"] = n
    return out


def evaluate(
    run: Run,
    qrels: Qrels,
    *,
    k: int = 10,
    types: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Macro-averaged metrics of a run, overall and per query type.

    ``run`` maps query id → ranked doc ids (duplicates are collapsed to their best rank);
    ``qrels`` maps query id → {doc_id: grade}. Returns::

        {"ndcg@10": .., "recall@10": .., "recall@100": .., "hit@10": .., "mrr@10": ..,
         "map": .., "ndcg@10_exp": .., "queries": n, "skipped": m,
         "by_type": {type: {same metrics.., "queries": n}}}

    with the actual ``k`` in the names. ``recall@100`` is always reported because it
    bounds what a reranker over the first-stage top 100 can recover. Queries with no
    relevant judgment are skipped (counted in ``skipped``); a judged query absent from
    the run scores 0 (``trec_eval -c``). ``by_type`` groups by ``types[qid]`` (queries
    without a type go under ``"untyped"``) and is empty when ``types`` is None. Means
    over zero queries are reported as 0.0 with ``queries: 0``.
    """
    if k <= 0:
        raise ValueError("k must be positive")
    names = [
        f"ndcg@{k}",
        f"recall@{k}",
        "recall@100",
        f"hit@{k}",
        f"mrr@{k}",
        "map",
        f"ndcg@{k}_exp",
    ]
    evaluated, skipped = _judged_queries(run, qrels)
    scores: dict[str, dict[str, float]] = {}
    for qid, ranked in _rankings(run, evaluated):
        rel = qrels[qid]
        scores[qid] = {
            names[0]: ndcg_at_k(ranked, rel, k),
            names[1]: recall_at_k(ranked, rel, k),
            "recall@100": recall_at_k(ranked, rel, 100),
            names[3]: hit_at_k(ranked, rel, k),
            names[4]: mrr_at_k(ranked, rel, k),
            "map": average_precision(ranked, rel),
            # The exponential gain (2^grade - 1) of Burges et al., which many libraries
            # and papers use: graded collections score higher with it than with trec_eval's
            # linear gain, so a comparison must name its gain.
            names[6]: ndcg_at_k(ranked, rel, k, exponential=True),
        }
    result = _mean_block(list(scores.values()), names)
    result["skipped"] = len(skipped)
    by_type: dict[str, dict[str, Any]] = {}
    if types is not None:
        groups: dict[str, list[dict[str, float]]] = {}
        for qid in evaluated:
            groups.setdefault(types.get(qid, "untyped"), []).append(scores[qid])
        by_type = {t: _mean_block(groups[t], names) for t in sorted(groups)}
    result["by_type"] = by_type
    return result


# --- significance ----------------------------------------------------------------------


def _paired_differences(a: Mapping[str, float], b: Mapping[str, float]) -> np.ndarray:
    """a - b per query, in sorted query order; the two must score the same queries."""
    if set(a) != set(b):
        missing = sorted(set(a) ^ set(b))
        raise ValueError(
            f"paired test needs the same queries in both runs; {len(missing)} differ, "
            f"e.g. {missing[:3]}"
        )
    if not a:
        raise ValueError("paired test needs at least one query")
    qids = sorted(a)
    return np.array([a[q] for q in qids], dtype=np.float64) - np.array(
        [b[q] for q in qids], dtype=np.float64
    )


def paired_randomization_test(
    a: Mapping[str, float],
    b: Mapping[str, float],
    *,
    trials: int = 10000,
    seed: int = 0,
) -> float:
    """Two-sided p-value that two strategies' mean per-query scores differ.

    Fisher's randomization (permutation) test, as recommended for IR evaluation by
    Smucker, Allan & Carterette (CIKM 2007): under the null hypothesis the labels "a" and
    "b" are exchangeable within each query, so each per-query difference keeps or flips
    its sign with probability 1/2. It assumes no distribution of the scores, which for
    bounded, skewed IR metrics is why it is preferred over the t-test.

    ``scipy.stats.permutation_test`` with paired samples: exact (every sign assignment)
    when ``2^n <= trials``, else ``trials`` seeded random assignments with the
    ``(hits + 1) / (trials + 1)`` estimate that never reports an impossible p = 0
    (Phipson & Smyth 2010). Identical inputs give p = 1.
    """
    if trials <= 0:
        raise ValueError("trials must be positive")
    d = _paired_differences(a, b)
    if not np.any(d):
        return 1.0
    result = stats.permutation_test(
        (d, np.zeros_like(d)),
        _mean_difference,
        permutation_type="samples",
        vectorized=True,
        n_resamples=trials,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    return float(min(1.0, result.pvalue))


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return np.mean(x - y, axis=axis)


def bootstrap_ci(
    a: Mapping[str, float],
    b: Mapping[str, float],
    *,
    trials: int = 10000,
    seed: int = 0,
    alpha: float = 0.05,
) -> tuple[float, float]:
    """``(low, high)``: a (1 - alpha) confidence interval of mean(a - b) over queries.

    Paired percentile bootstrap (Efron & Tibshirani, *An Introduction to the Bootstrap*,
    1993; applied to IR metrics by Sakai, SIGIR 2006) with ``scipy.stats.bootstrap``:
    queries are resampled with replacement, which keeps each query's two scores paired.
    It complements the p-value with the size of the effect; an interval that excludes 0
    agrees with a significant difference. Seeded, so deterministic.
    """
    if trials <= 0:
        raise ValueError("trials must be positive")
    if not 0.0 < alpha < 1.0:
        raise ValueError("alpha must be in (0, 1)")
    d = _paired_differences(a, b)
    if np.all(d == d[0]):  # one value resampled is that value (scipy would warn)
        return float(d[0]), float(d[0])
    result = stats.bootstrap(
        (d,),
        np.mean,
        n_resamples=trials,
        confidence_level=1.0 - alpha,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)
