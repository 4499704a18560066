"""``es-rag eval``: ingest a dataset through the normal path, run strategies side by side.

Every strategy answers every query against the same index with the same model; documents
are ranked where their best chunk ranks. Results are written as JSON
(``{strategy: {"ndcg@10", "recall@10", "recall@100", "mrr@10", "map", "hit@10",
"latency_ms": {"p50", "p95"}, "by_type": {...}, "queries", "vs_<baseline>": {...}}}``),
a markdown table and a PNG chart.

Strategy names: ``bm25``, ``knn``, ``hybrid`` (what the searcher picks for this cluster),
``client-rrf``, ``native-rrf``, ``opensearch-hybrid``, each optionally ``+rerank``. Fusion
sweeps (``rank_constant``, window, weights) expand each fused strategy into variants named
like ``client-rrf[rc=20,win=100,w=2:1]``. A strategy this cluster cannot run is reported
with its reason instead of figures.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from es_rag.acl import make_acl, make_caller
from es_rag.cache import LRU
from es_rag.config import Settings
from es_rag.datasets import Dataset
from es_rag.errors import ConfigurationError, EsRagError
from es_rag.evaluation import (
    bootstrap_ci,
    dedupe,
    evaluate,
    paired_randomization_test,
    per_query,
)
from es_rag.parts import Parts
from es_rag.pipeline import Ingestor
from es_rag.query.search import Searcher
from es_rag.types import Document

BASES = (
    "bm25",
    "knn",
    "hybrid",
    "client-rrf",
    "client-linear",
    "client-zscore",
    "native-rrf",
    "opensearch-hybrid",
)
FUSED = (
    "hybrid",
    "client-rrf",
    "client-linear",
    "client-zscore",
    "native-rrf",
    "opensearch-hybrid",
)
EVAL_TENANT = "es-rag-eval"  # its rows are removed after a run in a live alias
DEPTH = 100  # documents ranked per query (recall@100); the fusion window follows it


@dataclass(frozen=True)
class Variant:
    """One strategy to run: its base, rerank flag and setting overrides."""

    name: str
    base: str
    rerank: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)


def parse_strategies(
    spec: str,
    *,
    rank_constants: Sequence[int] = (),
    windows: Sequence[int] = (),
    weights: Sequence[tuple[float, float]] = (),
    feedbacks: Sequence[int] = (),
    sentences: Sequence[int] = (),
) -> list[Variant]:
    variants: list[Variant] = []
    for raw in [s.strip() for s in spec.split(",") if s.strip()]:
        base, _, suffix = raw.partition("+")
        if base not in BASES or suffix not in ("", "rerank"):
            raise ConfigurationError(
                f"unknown strategy {raw!r}; expected one of {BASES}, optionally with +rerank"
            )
        rerank = suffix == "rerank"
        rcs: Sequence[int | None] = rank_constants or [None]
        wins: Sequence[int | None] = windows or [None]
        wts: Sequence[tuple[float, float] | None] = weights or [None]
        fbs: Sequence[int | None] = feedbacks or [None]
        sts: Sequence[int | None] = sentences or [None]
        grid = list(itertools.product(rcs, wins, wts, fbs, sts))
        if base not in FUSED or grid == [(None, None, None, None, None)]:
            variants.append(Variant(raw, base, rerank))
            continue
        for rc, win, wt, fb, st in grid:
            overrides: dict[str, Any] = {}
            label = []
            if rc is not None:
                overrides["rank_constant"] = rc
                label.append(f"rc={rc}")
            if win is not None:
                overrides["rank_window_size"] = win
                label.append(f"win={win}")
            if wt is not None:
                overrides["bm25_weight"], overrides["knn_weight"] = wt
                label.append(f"w={wt[0]:g}:{wt[1]:g}")
            if fb is not None:
                overrides["feedback_chunks"] = fb
                label.append(f"fb={fb}")
            if st is not None:  # (only the client-side fusions ask sentences)
                overrides["question_sentences"] = st
                label.append(f"sent={st}")
            variants.append(Variant(f"{raw}[{','.join(label)}]", base, rerank, overrides))
    return variants


def parse_weights(text: str) -> list[tuple[float, float]]:
    """``"1:1,2:1"`` → [(1, 1), (2, 1)] (BM25 weight : kNN weight)."""
    out = []
    for part in [p for p in text.split(",") if p.strip()]:
        a, sep, b = part.partition(":")
        if not sep:
            raise ConfigurationError(f"weights look like BM25:KNN, e.g. 2:1 (got {part!r})")
        out.append((float(a), float(b)))
    return out


def eval_index_name(settings: Settings, dataset: Dataset) -> str:
    """Deterministic per dataset and model, so a kept index is found again."""
    key = f"{dataset.name}\x00{len(dataset.corpus)}\x00{settings.embedding_model}"
    key += f"\x00{settings.chunk_size}\x00{settings.chunk_overlap}"
    key += f"\x00{settings.context_header_prefix}\x00{settings.embedding_backend}"
    if settings.embedding_runtime != "torch":  # (torch adds nothing: earlier names stay)
        key += f"\x00{settings.embedding_runtime}"
    return f"{settings.index}-eval-{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def ingest_dataset(
    ingestor: Ingestor, dataset: Dataset, *, progress: Callable[[int], None] | None = None
) -> dict[str, Any]:
    acl = make_acl(EVAL_TENANT, public=True)
    docs = [
        Document(doc_id=d, title=title or d, text=text or title, acl=acl)
        for d, (title, text) in dataset.corpus.items()
    ]
    t0 = time.perf_counter()
    counts: dict[str, float] = {"indexed": 0, "skipped": 0, "failed": 0, "chunks": 0}
    for start in range(0, len(docs), 64):
        for r in ingestor.ingest_many(docs[start : start + 64]):
            counts[r.status] += 1
            counts["chunks"] += r.chunks
        if progress:
            progress(min(64, len(docs) - start))
    ingestor.index.refresh()
    counts["seconds"] = round(time.perf_counter() - t0, 2)
    return counts


def run(
    settings: Settings,
    dataset: Dataset,
    variants: Sequence[Variant],
    *,
    k: int = 10,
    parts: Parts | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, list[str]]]]:
    """Run every variant on every query: the results object (see module doc) and each
    variant's run (``{qid: [doc ids best first]}``), for ``--runs`` and outside tools."""
    parts = parts or Parts(settings)
    vectors: LRU[str, list[float]] = LRU(None)  # each query embedded once per run
    caller = make_caller(EVAL_TENANT, users=["user:eval"])
    results: dict[str, Any] = {}
    runs: dict[str, dict[str, list[str]]] = {}
    for variant in variants:
        searcher = Searcher(
            settings.model_copy(update=variant.overrides),
            client=parts.engine,
            embedder=parts.embedder,
            analyzer=parts.analyzer,
            query_cache=vectors,
        )
        strategy = "auto" if variant.base == "hybrid" else variant.base
        ranked: dict[str, list[str]] = {}
        latencies: list[float] = []
        try:
            ran = None
            for qid, text in dataset.queries.items():
                t0 = time.perf_counter()
                response = searcher.search(
                    text, caller=caller, k=DEPTH, strategy=strategy, rerank=variant.rerank
                )
                latencies.append((time.perf_counter() - t0) * 1000)
                ranked[qid] = dedupe([h.doc_id for h in response.hits])
                ran = response.strategy
                if progress:
                    progress(1)
        except EsRagError as exc:
            results[variant.name] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        metrics = evaluate(ranked, dataset.qrels, k=k, types=dataset.types or None)
        metrics["latency_ms"] = {
            "p50": round(_pct(latencies, 0.5), 2),
            "p95": round(_pct(latencies, 0.95), 2),
        }
        metrics["strategy_run"] = ran
        results[variant.name] = metrics
        runs[variant.name] = ranked
    _significance(results, runs, dataset, k)
    return results, runs


def _significance(
    results: dict[str, Any], runs: dict[str, dict[str, list[str]]], dataset: Dataset, k: int
) -> None:
    """Each strategy against the better single retriever, paired over queries (nDCG@k)."""
    metric = f"ndcg@{k}"
    singles = [n for n in ("bm25", "knn") if n in runs]
    if not singles:
        return
    best = max(singles, key=lambda n: results[n][metric])
    base = per_query(runs[best], dataset.qrels, "ndcg", k)
    for name, ranked in runs.items():
        if name == best:
            continue
        scores = per_query(ranked, dataset.qrels, "ndcg", k)
        low, high = bootstrap_ci(scores, base)
        results[name][f"vs_{best}"] = {
            "delta": round(statistics.fmean(scores[q] - base[q] for q in base), 4),
            "p_value": round(paired_randomization_test(scores, base), 4),
            "ci95": [round(low, 4), round(high, 4)],
        }


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def markdown_table(results: dict[str, Any], *, k: int = 10) -> str:
    cols = [f"ndcg@{k}", f"recall@{k}", "recall@100", f"mrr@{k}", "map"]
    lines = [
        "| strategy | " + " | ".join(cols) + " | p50 ms | p95 ms | vs best single |",
        "|---" * (len(cols) + 4) + "|",
    ]
    for name, r in results.items():
        if "error" in r:
            lines.append(
                f"| {name} | " + " | ".join("-" for _ in cols) + f" | - | - | {r['error']} |"
            )
            continue
        vs = next((v for key, v in r.items() if key.startswith("vs_")), None)
        vs_text = f"{vs['delta']:+.4f} (p={vs['p_value']:.3f})" if vs else ""
        lines.append(
            f"| {name} | "
            + " | ".join(f"{r.get(c, float('nan')):.4f}" for c in cols)
            + f" | {r['latency_ms']['p50']:.1f} | {r['latency_ms']['p95']:.1f} | {vs_text} |"
        )
    return "\n".join(lines)


def chart(results: dict[str, Any], path: Path, *, k: int = 10, title: str = "") -> None:
    """A bar chart of nDCG@k and Recall@k per strategy (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, r in results.items() if "error" not in r]
    ndcg = [results[n][f"ndcg@{k}"] for n in names]
    recall = [results[n][f"recall@{k}"] for n in names]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(names) + 2), 4.2))
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], ndcg, width=0.4, label=f"nDCG@{k}")
    ax.bar([x + 0.2 for x in xs], recall, width=0.4, label=f"Recall@{k}")
    ax.set_xticks(list(xs), names, rotation=30, ha="right")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
