#!/usr/bin/env python3
"""Choose a fusion across collections: leave one collection out, report it on that one.

    python scripts/fusion_across.py LISTS.json [LISTS.json ...]

Each file is what ``scripts/fusion_study.py --lists-out`` kept for one collection: every
query's BM25 and kNN top-100 chunks with their scores, which document each chunk belongs
to, and the judgments. Every candidate fuses exactly those lists: RRF (k = 60), the convex
combination of min-max normalised scores (``cc``) and of z-scores (``z``), each with the
BM25 share alpha, on chunks (then documents at their best chunk, as the searcher does) or
on documents (each retriever's documents at their best chunk, then fused); z-score fusion
over each retriever's top 50 (the searcher's default window) as well as its top 100, RRF
over the top 50 too; and two query-adaptive z-score fusions: weights from each retriever's
top z (``z-top``, power p) and a bonus for chunks both retrievers returned (``z-mnz``); and
kNN, RRF and z-score with the kNN list of the question's sentences (``knn_sentences`` of
``fusion_study.py``: each chunk at its best similarity to the question or one of its
sentences; files without it use the kNN list); and z-score fusion with each BM25 score
taken as log(1 + score) first (``z-log``, the searcher's), with each list's skewness (the
median over queries) that motivates it. For each
collection the candidate with the best mean nDCG@10 relative to RRF on the *other*
collections is chosen and reported on this one. Prints one JSON object.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import fusion_study as fs  # noqa: E402

from es_rag.evaluation import dedupe, ndcg_at_k  # noqa: E402

Method = Callable[[fs.Lists], list[str]]


def candidates() -> dict[str, Method]:
    out: dict[str, Method] = {
        "bm25": lambda x: [d for d, _ in x["bm25"]],
        "knn": lambda x: [d for d, _ in x["knn"]],
        "rrf": lambda x: fs.fuse_rrf(x, k=60, w=1.0, window=100),
        "rrf-doc": lambda x: fs.fuse_rrf(fs.doc_level(x), k=60, w=1.0, window=100),
    }
    for a in (0.3, 0.4, 0.5, 0.6, 0.7):
        out[f"cc a={a:g}"] = lambda x, a=a: fs.fuse_cc(x, alpha=a)
        out[f"cc-doc a={a:g}"] = lambda x, a=a: fs.fuse_cc(fs.doc_level(x), alpha=a)
        out[f"z a={a:g}"] = lambda x, a=a: fs.fuse_z(x, alpha=a)
        out[f"z-doc a={a:g}"] = lambda x, a=a: fs.fuse_z(fs.doc_level(x), alpha=a)
        out[f"z-log a={a:g}"] = lambda x, a=a: fs.fuse_z(fs.log_bm25(x), alpha=a)
    out["rrf window=50"] = lambda x: fs.fuse_rrf(x, k=60, w=1.0, window=50)
    out["z window=50"] = lambda x: fs.fuse_z_top(x, power=0.0, window=50)
    for p in (0.5, 1.0, 2.0, 3.0):
        out[f"z-top p={p:g}"] = lambda x, p=p: fs.fuse_z_top(x, power=p)
    for bonus in (0.25, 0.5, 1.0):
        out[f"z-mnz b={bonus:g}"] = lambda x, bonus=bonus: fs.fuse_z_mnz(x, bonus=bonus)
    out["knn sentences"] = lambda x: [d for d, _ in x["knn_sentences"]]
    out["rrf sentences"] = lambda x: fs.fuse_rrf(by_sentence(x), k=60, w=1.0, window=100)
    out["z sentences"] = lambda x: fs.fuse_z(by_sentence(x), alpha=0.5)
    out["z-log sentences"] = lambda x: fs.fuse_z(fs.log_bm25(by_sentence(x)), alpha=0.5)
    out["z sentences window=50"] = lambda x: fs.fuse_z_top(by_sentence(x), power=0.0, window=50)
    out["z-log sentences window=50"] = lambda x: fs.fuse_z_top(
        fs.log_bm25(by_sentence(x)), power=0.0, window=50
    )
    return out


def by_sentence(lists: fs.Lists) -> fs.Lists:
    """The lists with the kNN side taken from the question's sentences."""
    return {"bm25": lists["bm25"], "knn": lists["knn_sentences"]}


def skews(lists: dict[str, fs.Lists]) -> dict[str, float]:
    """The median over queries of each list's skewness (of its top 100 scores): how far
    the list is from the symmetric spread a z-score reads it as having."""
    from scipy.stats import skew

    out = {}
    for name, pick in (
        ("bm25", lambda x: x["bm25"]),
        ("knn", lambda x: x["knn"]),
        ("log bm25", lambda x: fs.log_bm25(x)["bm25"]),
    ):
        values = [[v for _, v in pick(ls)[:100]] for ls in lists.values()]
        out[name] = statistics.median(float(skew(v)) for v in values if len(v) >= 20)
    return out


def evaluate(
    path: Path, methods: dict[str, Method]
) -> tuple[str, dict[str, float], dict[str, float]]:
    saved = json.loads(path.read_text())
    fs.DOC_OF.clear()
    fs.DOC_OF.update(saved["doc_of"])
    fs.DOC_OF.update({d: d for d in set(saved["doc_of"].values())})  # doc-level ids
    lists = {
        q: {n: [tuple(p) for p in v] for n, v in ls.items()} for q, ls in saved["lists"].items()
    }
    for ls in lists.values():  # files kept before the sentences' list
        ls.setdefault("knn_sentences", ls["knn"])
    qrels = saved["qrels"]
    scores = {}
    for name, fn in methods.items():
        per_query = [
            ndcg_at_k(dedupe([fs.DOC_OF[i] for i in fn(lists[q])]), qrels[q], 10) for q in lists
        ]
        scores[name] = statistics.fmean(per_query)
    return saved["name"], scores, skews(lists)


def main() -> None:
    methods = candidates()
    evaluated = [evaluate(Path(p), methods) for p in sys.argv[1:]]
    table = {name: scores for name, scores, _ in evaluated}
    skew = {name: s for name, _, s in evaluated}
    fused = [m for m in methods if m not in ("bm25", "knn", "knn sentences")]
    report: dict[str, Any] = {}
    for name, scores in table.items():
        others = [n for n in table if n != name]
        chosen = max(
            fused, key=lambda m: statistics.fmean(table[o][m] / table[o]["rrf"] for o in others)
        )
        best_single = max(scores["bm25"], scores["knn"])
        report[name] = {
            "bm25": round(scores["bm25"], 4),
            "knn": round(scores["knn"], 4),
            "rrf": round(scores["rrf"], 4),
            "chosen_elsewhere": chosen,
            "held_out": round(scores[chosen], 4),
            "vs_rrf": round(scores[chosen] / scores["rrf"], 4),
            "vs_best_single": round(scores[chosen] - best_single, 4),
            "skew": {k: round(v, 2) for k, v in skew[name].items()},
            "all": {m: round(v, 4) for m, v in scores.items()},
        }
    overall = max(fused, key=lambda m: statistics.fmean(t[m] / t["rrf"] for t in table.values()))
    report["chosen_on_all"] = overall
    report["mean_vs_rrf"] = {
        m: round(statistics.fmean(t[m] / t["rrf"] for t in table.values()), 4) for m in fused
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
