#!/usr/bin/env python3
"""Sufficiency study: answerable and unanswerable questions from a judged collection.

    python scripts/sufficiency_study.py DATASET --format FMT --output features.jsonl \\
        [--unanswerable 0.4] [--seed 0] [--index NAME] [--keep-index] [--max-queries 300]

A seeded share (``--unanswerable``) of the judged queries is made unanswerable by leaving
every document judged relevant to them out of the index; the other queries are answerable
when at least one of their relevant documents is still in it (the few that lost all of
theirs are dropped). The rest of the corpus is ingested through the normal pipeline, every
query is asked as ``es-rag context`` would ask it (the default strategy, k =
``context_candidates``), and each query's judge signals (es_rag.query.sufficiency) are
written as one JSON line with its label, followed by one line with the index's own
self-calibration. ``--analyse FILE...`` reads such files and prints, per collection, the
balanced accuracy of the self-calibrated judge (no labels used) and of each single signal
at its best threshold (labels used: an upper bound, not a result), the judge's two signals
and the list-shape ones (``list_signals``: how far each retriever's top hit stands out of
its own top 100, how much the two retrievers' top documents agree); and, across the
collections, a logistic regression over each set of signals trained on the other
collections (leave one collection out; features standardised per collection, which needs
no labels), scored at its best cut and at its own decision boundary.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_rag import eval_runner as er  # noqa: E402
from es_rag.acl import make_caller  # noqa: E402
from es_rag.config import Settings  # noqa: E402
from es_rag.datasets import Dataset, load  # noqa: E402
from es_rag.parts import Parts  # noqa: E402
from es_rag.pipeline import Ingestor  # noqa: E402
from es_rag.query import sufficiency  # noqa: E402
from es_rag.query.search import Searcher  # noqa: E402


def split(
    data: Dataset, share: float, seed: int, max_queries: int, sample: float | None
) -> tuple[Dataset, dict]:
    qids = sorted(data.queries)
    rng = random.Random(seed)
    rng.shuffle(qids)
    qids = qids[:max_queries]
    labels: dict[str, bool] = {}
    if sample is not None:  # a seeded share of the corpus; the judgments decide the labels
        docs = sorted(data.corpus)
        rng.shuffle(docs)
        corpus = {d: data.corpus[d] for d in docs[: round(len(docs) * sample)]}
        for q in qids:
            labels[q] = any(g > 0 and d in corpus for d, g in data.qrels[q].items())
    else:
        cut = round(len(qids) * share)
        gone_for = qids[:cut]
        removed = {d for q in gone_for for d, g in data.qrels[q].items() if g > 0}
        corpus = {d: v for d, v in data.corpus.items() if d not in removed}
        labels = dict.fromkeys(gone_for, False)
        for q in qids[cut:]:
            if any(g > 0 and d in corpus for d, g in data.qrels[q].items()):
                labels[q] = True
    kept = Dataset(
        name=f"{data.name}-suff-{seed}-{share}-{sample}",
        corpus=corpus,
        queries={q: data.queries[q] for q in labels},
        qrels={q: data.qrels[q] for q in labels},
    )
    return kept, labels


def study(args: argparse.Namespace) -> None:
    data = load(Path(args.dataset), args.format)
    kept, labels = split(data, args.unanswerable, args.seed, args.max_queries, args.sample)
    base = Settings()
    key = f"{kept.name}\0{len(kept.corpus)}\0{base.embedding_model}\0{base.embedding_backend}"
    alias = args.index or f"es-rag-suff-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    settings = base.model_copy(update={"index": alias})
    parts = Parts(settings)
    ingestor = Ingestor(
        settings, client=parts.engine, embedder=parts.embedder, analyzer=parts.analyzer
    )
    if not ingestor.index.exists():
        print(json.dumps({"ingest": er.ingest_dataset(ingestor, kept)}), file=sys.stderr)
    searcher = Searcher(
        settings, client=parts.engine, embedder=parts.embedder, analyzer=parts.analyzer
    )
    caller = make_caller(er.EVAL_TENANT, users=["user:eval"])
    calibration = sufficiency.calibrate(searcher, seed=args.seed)
    with open(args.output, "w", encoding="utf-8") as out:
        for qid, text in kept.queries.items():
            response = searcher.search(text, caller=caller, k=settings.context_candidates)
            signals = sufficiency.signals(searcher, text, response, caller)
            # Each retriever's top 100 and the fused hits as [doc id, score]: the shape of
            # the lists is what the --analyse study of further signals reads.
            lists = {
                name: [
                    [h.doc_id, h.scores.get(name)]
                    for h in searcher.search(text, caller=caller, k=100, strategy=name).hits
                ]
                for name in ("knn", "bm25")
            }
            lists["fused"] = [[h.doc_id, h.score] for h in response.hits]
            row = {"qid": qid, "answerable": labels[qid], "signals": signals, "lists": lists}
            out.write(json.dumps(row) + "\n")
        row = {"calibration": calibration.to_meta(), "negatives": calibration.negatives}
        out.write(json.dumps(row) + "\n")
    if not args.keep_index:
        for name in ingestor.index.concrete_indices():
            parts.engine.delete_index(name)


DEFAULTS = {
    "strictness": Settings().sufficiency_strictness,
    "min_coverage": Settings().sufficiency_min_coverage,
}


def balanced(labels: list[bool], decisions: list[bool]) -> float:
    pos = [d for lab, d in zip(labels, decisions, strict=True) if lab]
    neg = [not d for lab, d in zip(labels, decisions, strict=True) if not lab]
    return (sum(pos) / max(1, len(pos)) + sum(neg) / max(1, len(neg))) / 2


def best_cut(labels: list[bool], values: list[float]) -> tuple[float, float]:
    best = (0.0, 0.0)
    for cut in sorted(set(values)):
        ba = balanced(labels, [v >= cut for v in values])
        if ba > best[0]:
            best = (ba, cut)
    return best


def other_collections(names: Iterable[str], name: str) -> list[str]:
    """The files of every other collection: two constructions of one collection
    (``NAME@remove40``, ``NAME@sample20``) share its questions, so a fold leaves out both."""
    family = name.split("@")[0]
    return [n for n in names if n.split("@")[0] != family]


def analyse(paths: list[str]) -> None:
    """Per file (``COLLECTION@CONSTRUCTION.jsonl``): the judge with the default settings,
    each signal at its best cut (labels used: an upper bound), and the strictness chosen
    on the other collections (leave one collection out)."""
    data: dict[str, tuple[list[dict[str, Any]], sufficiency.Calibration]] = {}
    for path in paths:
        rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line]
        labels = {r["answerable"] for r in rows[:-1]}
        if len(labels) == 2:  # a construction that left one class empty says nothing
            cal = sufficiency.from_probes(rows[-1]["negatives"], model="", rows=0)
            for r in rows[:-1]:
                r["features"] = {
                    "best_knn": float(r["signals"].get("best_knn") or 0.0),
                    "coverage": float(r["signals"].get("coverage") or 0.0),
                    **list_signals(r["lists"]),
                }
            data[Path(path).stem] = (rows[:-1], cal)

    def accuracy(name: str, strictness: float) -> float:
        rows, cal = data[name]
        settings = {**DEFAULTS, "strictness": strictness}
        judged = [sufficiency.decide(r["signals"], cal, **settings).sufficient for r in rows]
        return balanced([r["answerable"] for r in rows], judged)

    grid = [round(0.1 * i, 1) for i in range(31)]
    report: dict[str, Any] = {}
    for name, (rows, _) in data.items():
        labels = [r["answerable"] for r in rows]
        others = other_collections(data, name)
        chosen = max(grid, key=lambda t: sum(accuracy(n, t) for n in others)) if others else None
        entry: dict[str, Any] = {
            "answerable": sum(labels),
            "unanswerable": len(labels) - sum(labels),
            "default": round(accuracy(name, DEFAULTS["strictness"]), 3),
            "held_out": None if chosen is None else [chosen, round(accuracy(name, chosen), 3)],
        }
        for signal in rows[0]["features"]:
            values = [r["features"][signal] for r in rows]
            ba, cut = best_cut(labels, values)
            entry[f"oracle:{signal}"] = [round(ba, 3), round(cut, 4)]
        report[name] = entry
    defaults = [e["default"] for e in report.values()]
    held = [e["held_out"][1] for e in report.values() if e["held_out"]]
    report["mean"] = {
        "default": round(sum(defaults) / max(1, len(defaults)), 3),
        "held_out": round(sum(held) / max(1, len(held)), 3),
    }
    report["combined_leave_one_out"] = combined({n: rows for n, (rows, _) in data.items()})
    print(json.dumps(report, indent=1))


def list_signals(lists: dict[str, list[list[Any]]]) -> dict[str, float]:
    """Signals read from the shape of the ranked lists, not from the evidence's text: a
    question the index can answer should have a top hit that stands out, and retrievers
    that agree on it."""
    knn = [float(s) for _, s in lists["knn"] if s is not None]
    bm25 = [float(s) for _, s in lists["bm25"] if s is not None]

    def z_top(v: list[float]) -> float:
        return (v[0] - statistics.mean(v)) / (statistics.pstdev(v) or 1.0) if len(v) > 2 else 0.0

    def docs(ranked: list[list[Any]], n: int) -> list[str]:
        return list(dict.fromkeys(d for d, _ in ranked))[:n]

    knn10, bm10, fused = docs(lists["knn"], 10), docs(lists["bm25"], 10), docs(lists["fused"], 1)
    return {
        "knn_z": z_top(knn),
        "bm25_z": z_top(bm25),
        "knn_gap": knn[0] - knn[min(9, len(knn) - 1)] if knn else 0.0,
        "knn_over_median": knn[0] - statistics.median(knn) if knn else 0.0,
        "bm25_gap": (bm25[0] - bm25[min(9, len(bm25) - 1)]) / (bm25[0] or 1.0) if bm25 else 0.0,
        "agree10": len(set(knn10) & set(bm10)) / 10,
        "agree5": len(set(knn10[:5]) & set(bm10[:5])) / 5,
        "top_in_both": float(bool(fused) and fused[0] in knn10[:3] and fused[0] in bm10[:3]),
    }


SIGNAL_SETS = {
    "judge": ["best_knn", "coverage"],
    "judge+gaps": ["best_knn", "coverage", "knn_gap", "bm25_gap"],
    "judge+shape": ["best_knn", "coverage", "knn_over_median", "bm25_gap", "agree10"],
    "all": [
        "best_knn", "coverage", "knn_z", "bm25_z", "knn_gap", "knn_over_median",
        "bm25_gap", "agree10", "agree5", "top_in_both",
    ],
}  # fmt: skip


def combined(data: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Leave one collection (family) out: a balanced logistic regression over each signal
    set, trained on the others, scored on it."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    def matrix(rows: list[dict[str, Any]], names: list[str]) -> Any:
        x = np.array([[float(r["features"][n]) for n in names] for r in rows])
        return (x - x.mean(0)) / (x.std(0) + 1e-9)

    out: dict[str, Any] = {}
    for set_name, names in SIGNAL_SETS.items():
        per: dict[str, Any] = {}
        for name, rows in data.items():
            train = other_collections(data, name)
            if not train:
                continue
            x = np.vstack([matrix(data[n], names) for n in train])
            y = [r["answerable"] for n in train for r in data[n]]
            model = LogisticRegression(class_weight="balanced", max_iter=1000).fit(x, y)
            scores = [float(v) for v in model.decision_function(matrix(rows, names))]
            labels = [r["answerable"] for r in rows]
            per[name] = {
                "best_cut": round(best_cut(labels, scores)[0], 3),
                "boundary": round(balanced(labels, [v >= 0 for v in scores]), 3),
            }
        if per:
            out[set_name] = {
                "mean_best_cut": round(statistics.mean(v["best_cut"] for v in per.values()), 3),
                "mean_boundary": round(statistics.mean(v["boundary"] for v in per.values()), 3),
                "per_collection": per,
            }
    return out


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("dataset", nargs="?")
    p.add_argument("--format", default="beir")
    p.add_argument("--output", default="sufficiency.jsonl")
    p.add_argument("--unanswerable", type=float, default=0.4)
    p.add_argument("--sample", type=float, help="index this share of the corpus instead")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-queries", type=int, default=300)
    p.add_argument("--index")
    p.add_argument("--keep-index", action="store_true")
    p.add_argument("--analyse", nargs="+", metavar="FILE")
    args = p.parse_args()
    if args.analyse:
        analyse(args.analyse)
    else:
        study(args)


if __name__ == "__main__":
    main()
