#!/usr/bin/env python3
"""Fusion study: which way of combining BM25 and kNN generalises across collections?

    python scripts/fusion_study.py DATASET --format FMT --index ALIAS [--output study.json]

Runs BM25 and kNN once per query against an index that `es-rag eval --keep-index` built
(same settings), keeps each retriever's top 100 chunks with scores, and then fuses them
offline with each candidate method, so every method sees exactly the same evidence.
Queries are split in two halves by a seeded shuffle: parameters are chosen on one half
(A) and reported on the other (B), and the other way round, so that nothing is scored
on the queries it was tuned on. Prints one JSON object.

Methods: RRF (rank constant, weights), convex combination of min-max normalised scores
(CC, Bruch et al., TOIS 2023), and confidence-weighted RRF: each retriever's weight for a
query comes from how decisively its own top hit stands out of its top 10, measured on its
own normalised scores, so a retriever that is sure of its answer (an exact factoid match
for BM25) is followed, and one that is not is damped.

``--lists-out`` also keeps ``knn_sentences`` for ``scripts/fusion_across.py``: for a
question of two or more sentences (es_rag.query.sentences, as the searcher splits it),
each chunk's best similarity to the whole question or to any one of its sentences, each
asked as a kNN search of its own (a question that is one sentence keeps its kNN list).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_rag.acl import acl_filter, make_caller  # noqa: E402
from es_rag.config import Settings  # noqa: E402
from es_rag.datasets import load  # noqa: E402
from es_rag.eval_runner import EVAL_TENANT  # noqa: E402
from es_rag.evaluation import dedupe, ndcg_at_k, recall_at_k  # noqa: E402
from es_rag.query import build, sentences  # noqa: E402
from es_rag.query.fusion import confidence_weights, rrf  # noqa: E402
from es_rag.query.search import Searcher  # noqa: E402

Lists = dict[str, list[tuple[str, float]]]  # retriever → [(chunk id, score)] best first
DOC_OF: dict[str, str] = {}  # chunk id → doc id


def gather(searcher: Searcher, queries: dict[str, str], depth: int) -> dict[str, Lists]:
    caller = make_caller(EVAL_TENANT, users=["user:eval"])
    acl = acl_filter(caller)
    out: dict[str, Lists] = {}
    for qid, text in queries.items():
        lists: Lists = {}
        for name in ("bm25", "knn"):
            hits = searcher.search(text, caller=caller, k=depth, strategy=name).hits
            # Chunk level, as the searcher fuses; documents rank where their best chunk does.
            lists[name] = [(h.chunk_id, float(h.scores.get(name) or 0.0)) for h in hits]
            DOC_OF.update({h.chunk_id: h.doc_id for h in hits})
        best = dict(lists["knn"])
        for part in sentences.split(text, Settings().question_sentences):
            for h in searcher.search(part, caller=caller, k=depth, strategy="knn").hits:
                DOC_OF[h.chunk_id] = h.doc_id
                score = float(h.scores.get("knn") or 0.0)
                best[h.chunk_id] = max(best.get(h.chunk_id, score), score)
        lists["knn_sentences"] = sorted(best.items(), key=lambda kv: -kv[1])[:depth]
        # The server's own `standard` analyzer over `content` (what a bare cluster offers),
        # to compare with es-rag's Python analysis in `content_terms`.
        body = {
            "size": depth,
            "_source": ["doc_id"],
            "track_total_hits": False,
            "query": {
                "bool": {
                    "must": [
                        {
                            "multi_match": {
                                "query": text,
                                "type": "most_fields",
                                "fields": ["content^1", "title_path^0.5"],
                            }
                        }
                    ],
                    "filter": build.retrieval_filters(acl),
                }
            },
        }
        raw = searcher.engine.search(searcher.settings.index, body)["hits"]["hits"]
        lists["bm25_standard"] = [(h["_id"], float(h["_score"])) for h in raw]
        DOC_OF.update({h["_id"]: h["_source"]["doc_id"] for h in raw})
        out[qid] = lists
    return out


def minmax(items: list[tuple[str, float]]) -> dict[str, float]:
    if not items:
        return {}
    lo, hi = min(s for _, s in items), max(s for _, s in items)
    return {d: (s - lo) / (hi - lo) if hi > lo else 1.0 for d, s in items}


def fuse_rrf(lists: Lists, *, k: int, w: float, window: int) -> list[str]:
    ranks = {n: [d for d, _ in lists[n]] for n in ("bm25", "knn")}
    return [
        f.doc_id
        for f in rrf(
            ranks, rank_constant=k, rank_window_size=window, weights={"bm25": w, "knn": 1.0}
        )
    ]


def fuse_cc(lists: Lists, *, alpha: float) -> list[str]:
    b, v = minmax(lists["bm25"]), minmax(lists["knn"])
    docs = set(b) | set(v)
    return sorted(docs, key=lambda d: -(alpha * b.get(d, 0.0) + (1 - alpha) * v.get(d, 0.0)))


def zscore(items: list[tuple[str, float]]) -> tuple[dict[str, float], float]:
    """Scores as standard deviations from the list's mean; and the floor a document the
    retriever did not return gets (the list's lowest z, as if last in the window)."""
    if not items:
        return {}, 0.0
    values = [s for _, s in items]
    mean, std = statistics.fmean(values), statistics.pstdev(values)
    z = {d: (s - mean) / std if std > 0 else 0.0 for d, s in items}
    return z, min(z.values())


def log_bm25(lists: Lists) -> Lists:
    """The lists with each BM25 score taken as log(1 + score), as the searcher's z-score
    fusion takes them (es_rag.query.fusion.zscore)."""
    return {**lists, "bm25": [(d, math.log1p(max(s, 0.0))) for d, s in lists["bm25"]]}


def fuse_z(lists: Lists, *, alpha: float) -> list[str]:
    (b, b0), (v, v0) = zscore(lists["bm25"]), zscore(lists["knn"])
    docs = set(b) | set(v)
    return sorted(docs, key=lambda d: -(alpha * b.get(d, b0) + (1 - alpha) * v.get(d, v0)))


def fuse_z_top(lists: Lists, *, power: float, window: int = 100) -> list[str]:
    """Z-score fusion whose per-query weights follow how far each retriever's first hit
    stands above its own window (its top z, to the power ``power``; 0 is plain z-score):
    a retriever with one clear answer counts more, one with a flat list less."""
    (b, b0), (v, v0) = zscore(lists["bm25"][:window]), zscore(lists["knn"][:window])
    wb = max(b.values()) ** power if b else 0.0
    wv = max(v.values()) ** power if v else 0.0
    total = (wb + wv) or 1.0

    def fused(d: str) -> float:
        return (wb * (b.get(d, b0) - b0) + wv * (v.get(d, v0) - v0)) / total

    return sorted(set(b) | set(v), key=lambda d: -fused(d))


def fuse_z_mnz(lists: Lists, *, bonus: float) -> list[str]:
    """Z-score fusion (from each list's floor) times ``1 + bonus`` for a chunk both
    retrievers returned: agreement between them as evidence (CombMNZ's idea)."""
    (b, b0), (v, v0) = zscore(lists["bm25"]), zscore(lists["knn"])

    def fused(d: str) -> float:
        both = d in b and d in v
        return ((b.get(d, b0) - b0) + (v.get(d, v0) - v0)) * (1 + bonus * both)

    return sorted(set(b) | set(v), key=lambda d: -fused(d))


def doc_level(lists: Lists) -> Lists:
    """Each retriever's list of documents (at their best chunk), ids replaced by doc ids:
    fusion of documents rather than of chunks."""
    out: Lists = {}
    for name, items in lists.items():
        seen: dict[str, float] = {}
        for chunk, value in items:
            seen.setdefault(DOC_OF[chunk], value)
        out[name] = list(seen.items())
    return out


def fuse_conf(lists: Lists, *, k: int, window: int) -> list[str]:
    pair = {n: lists[n] for n in ("bm25", "knn")}
    weights = confidence_weights({n: [s for _, s in v] for n, v in pair.items()})
    ranks = {n: [d for d, _ in v] for n, v in pair.items()}
    return [f.doc_id for f in rrf(ranks, rank_constant=k, rank_window_size=window, weights=weights)]


def score(
    runs: dict[str, list[str]], qrels: dict[str, dict[str, float]], qids: Sequence[str]
) -> dict[str, float]:
    return {
        "ndcg@10": round(statistics.fmean(ndcg_at_k(runs[q], qrels[q], 10) for q in qids), 4),
        "recall@10": round(statistics.fmean(recall_at_k(runs[q], qrels[q], 10) for q in qids), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--format", required=True)
    ap.add_argument("--split", default="test")
    ap.add_argument("--index", required=True, help="alias of an index built by es-rag eval")
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", type=Path)
    ap.add_argument("--lists-out", type=Path, help="keep the retrieved lists for --across")
    args = ap.parse_args()
    data = load(args.dataset, args.format, split=args.split)
    settings = Settings(index=args.index)
    lists = gather(Searcher(settings), data.queries, args.depth)
    qids = sorted(lists)
    random.Random(args.seed).shuffle(qids)
    halves = {"A": qids[: len(qids) // 2], "B": qids[len(qids) // 2 :]}
    window = args.depth
    methods: dict[str, Callable[[Lists], list[str]]] = {
        "bm25": lambda x: [d for d, _ in x["bm25"]],
        "knn": lambda x: [d for d, _ in x["knn"]],
        "bm25_standard": lambda x: [d for d, _ in x["bm25_standard"]],
    }
    grid: dict[str, dict[str, Callable[[Lists], list[str]]]] = {"rrf": {}, "cc": {}, "conf-rrf": {}}
    for k in (10, 20, 40, 60, 100):
        for w in (0.5, 1.0, 2.0, 3.0):
            grid["rrf"][f"k={k},w={w:g}"] = lambda x, k=k, w=w: fuse_rrf(x, k=k, w=w, window=window)
        grid["conf-rrf"][f"k={k}"] = lambda x, k=k: fuse_conf(x, k=k, window=window)
    for a in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
        grid["cc"][f"alpha={a:g}"] = lambda x, a=a: fuse_cc(x, alpha=a)
    for a in (0.3, 0.4, 0.5, 0.6, 0.7):
        grid.setdefault("z", {})[f"alpha={a:g}"] = lambda x, a=a: fuse_z(x, alpha=a)
    grid["rrf-default"] = {"k=60,w=1": lambda x: fuse_rrf(x, k=60, w=1.0, window=window)}
    grid["conf-rrf-default"] = {"k=60": lambda x: fuse_conf(x, k=60, window=window)}

    if args.lists_out:
        saved = {"name": data.name, "lists": lists, "doc_of": DOC_OF, "qrels": data.qrels}
        args.lists_out.write_text(json.dumps(saved))

    def run_all(fn: Callable[[Lists], list[str]]) -> dict[str, list[str]]:
        return {q: dedupe([DOC_OF[c] for c in fn(lists[q])]) for q in qids}

    report: dict[str, Any] = {"dataset": data.name, "queries": len(qids)}
    for name, fn in methods.items():
        report[name] = score(run_all(fn), data.qrels, qids)
    for family, options in grid.items():
        runs = {label: run_all(fn) for label, fn in options.items()}
        entry: dict[str, Any] = {}
        for tune, test in (("A", "B"), ("B", "A")):
            best = max(runs, key=lambda lab: score(runs[lab], data.qrels, halves[tune])["ndcg@10"])
            entry[f"tuned_on_{tune}"] = {
                "choice": best,
                "held_out": score(runs[best], data.qrels, halves[test]),
            }
        entry["all"] = {lab: score(r, data.qrels, qids)["ndcg@10"] for lab, r in runs.items()}
        report[family] = entry
    for name in ("bm25", "knn", "bm25_standard"):
        report[name]["halves"] = {
            h: score(run_all(methods[name]), data.qrels, q)["ndcg@10"] for h, q in halves.items()
        }
    text = json.dumps(report, indent=1)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
