#!/usr/bin/env python3
"""How much of the exact nearest-neighbour list the approximate kNN search finds.

    python scripts/knn_recall.py DATASET --format FMT --index ALIAS [--candidates 100,200,500]

Against an index that `es-rag eval --keep-index` built: every query's top 100 chunks by
exact cosine over the stored float vectors (read once from ``_source``; what a
brute-force reference computes) and by the approximate kNN search at each ``num_candidates``
(es-rag's default is the fusion window, 100 at eval depth). Prints, per setting, the
share of the exact top 10 / 50 / 100 the approximate search returns, and nDCG@10 of both
document rankings (documents at their best chunk). One JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_rag.config import Settings  # noqa: E402
from es_rag.datasets import load  # noqa: E402
from es_rag.evaluation import dedupe, ndcg_at_k  # noqa: E402
from es_rag.parts import Parts  # noqa: E402
from es_rag.query import build  # noqa: E402

DEPTH = 100


def all_vectors(engine: Any, index: str) -> tuple[list[str], list[str], np.ndarray]:
    """Every searchable chunk's stored float vector (``_source``), normalised."""
    body = {
        "_source": {"exclude_vectors": False, "includes": [build.VECTOR_FIELD, "doc_id"]},
        "query": {"bool": {"filter": [build.CHILDREN_ONLY]}},
    }
    ids, docs, rows = [], [], []
    for hit in engine.scan(index, body):
        ids.append(hit["_id"])
        docs.append(hit["_source"]["doc_id"])
        rows.append(hit["_source"][build.VECTOR_FIELD])
    matrix = np.asarray(rows, dtype=np.float32)
    return ids, docs, matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def approx_body(vector: list[float], candidates: int) -> dict[str, Any]:
    return {
        "size": DEPTH,
        "_source": ["doc_id"],
        "knn": {
            "field": build.VECTOR_FIELD,
            "query_vector": vector,
            "k": DEPTH,
            "num_candidates": candidates,
            "filter": [build.CHILDREN_ONLY],
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--format", required=True)
    ap.add_argument("--index", required=True)
    ap.add_argument("--candidates", default="100,200,500")
    args = ap.parse_args()
    data = load(args.dataset, args.format)
    parts = Parts(Settings(index=args.index))
    index = parts.engine.alias_indices(args.index)[-1]
    settings = [int(c) for c in args.candidates.split(",")]
    recall: dict[str, dict[int, list[float]]] = {str(c): {} for c in settings}
    ndcg: dict[str, list[float]] = {"exact": [], **{str(c): [] for c in settings}}
    ids, docs, matrix = all_vectors(parts.engine, index)
    for qid, text in data.queries.items():
        vector = parts.embedder.embed_query(text)
        q = np.asarray(vector, dtype=np.float32)
        order = np.argsort(-(matrix @ (q / np.linalg.norm(q))), kind="stable")[:DEPTH]
        exact = [ids[i] for i in order]
        doc_of = {ids[i]: docs[i] for i in order}
        ndcg["exact"].append(ndcg_at_k(dedupe([doc_of[c] for c in exact]), data.qrels[qid], 10))
        for c in settings:
            got = parts.engine.search(index, approx_body(vector, c))["hits"]["hits"]
            found = [h["_id"] for h in got]
            doc_of.update({h["_id"]: h["_source"]["doc_id"] for h in got})
            for depth in (10, 50, 100):
                share = len(set(found[:depth]) & set(exact[:depth])) / max(1, len(exact[:depth]))
                recall[str(c)].setdefault(depth, []).append(share)
            ranked = dedupe([doc_of[i] for i in found])
            ndcg[str(c)].append(ndcg_at_k(ranked, data.qrels[qid], 10))
    report = {
        "dataset": data.name,
        "queries": len(data.queries),
        "recall_of_exact": {
            c: {f"@{d}": round(statistics.fmean(v), 4) for d, v in by.items()}
            for c, by in recall.items()
        },
        "ndcg@10": {name: round(statistics.fmean(v), 4) for name, v in ndcg.items()},
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
