#!/usr/bin/env python3
"""Does folding Traditional Chinese to Simplified before jieba help BM25? One run, one table.

    python scripts/han_fold_study.py DATASET --format FMT [--queries N]

A Simplified Chinese judged collection is also written in Traditional characters (OpenCC
``s2twp``: Taiwan forms and phrases, as a Taiwanese writer would put it), then ranked by
BM25 (k1 1.2, b 0.75, documents whole) over es-rag's terms with and without the
Traditional-to-Simplified folding of ``es_rag.analysis``, in four layouts: the original,
both sides Traditional, and each script asking the other. No server and no model: the
analyzer is the only variable. Prints one JSON object of nDCG@10 (linear gain).

Jieba's dictionary is Simplified. Without folding, Traditional text falls back to single
characters where a word is missing (臺灣大學 -> 臺, 灣大學), which costs BM25 on a Traditional
collection and makes a question in one script miss passages in the other.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_rag.analysis import TextAnalyzer  # noqa: E402
from es_rag.datasets import FORMATS, Dataset, load  # noqa: E402
from es_rag.evaluation import ndcg_at_k  # noqa: E402


def bm25_rankings(docs: list[list[str]], queries: list[list[str]], k: int = 10) -> list[list[int]]:
    """Top-k document positions per query, BM25 with Lucene's idf."""
    n = len(docs)
    tfs = [Counter(terms) for terms in docs]
    df: Counter[str] = Counter()
    for tf in tfs:
        df.update(tf.keys())
    lengths = np.array([len(terms) for terms in docs], dtype=float)
    norm = 1.2 * (1 - 0.75 + 0.75 * lengths / max(lengths.mean(), 1.0))
    postings: dict[str, list[tuple[int, int]]] = {}
    for i, tf in enumerate(tfs):
        for term, f in tf.items():
            postings.setdefault(term, []).append((i, f))
    out = []
    for terms in queries:
        scores = np.zeros(n)
        for term in terms:
            if term not in df:
                continue
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            for i, f in postings[term]:
                scores[i] += idf * f * 2.2 / (f + norm[i])
        out.append([int(i) for i in np.argsort(-scores, kind="stable")[:k] if scores[i] > 0])
    return out


def score(
    data: Dataset,
    qids: list[str],
    analyzer: TextAnalyzer,
    doc_text: Callable[[str], str],
    query_text: Callable[[str], str],
) -> float:
    ids = list(data.corpus)
    docs = [analyzer.terms(doc_text(f"{t}\n{x}")) for t, x in data.corpus.values()]
    queries = [analyzer.terms(query_text(data.queries[q])) for q in qids]
    total = 0.0
    for q, ranked in zip(qids, bm25_rankings(docs, queries), strict=True):
        total += ndcg_at_k([ids[i] for i in ranked], data.qrels[q], 10)
    return total / len(qids)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--format", choices=FORMATS, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--queries", type=int, help="the first N judged queries only")
    args = parser.parse_args()

    import opencc

    to_traditional = opencc.OpenCC("s2twp").convert
    data = load(args.dataset, args.format, split=args.split)
    qids = list(data.queries)[: args.queries]
    folded, plain = TextAnalyzer(), TextAnalyzer(han_fold=False)

    def same(text: str) -> str:
        return text

    layouts = {
        "simplified": (same, same),
        "traditional": (to_traditional, to_traditional),
        "traditional_passages_simplified_questions": (to_traditional, same),
        "simplified_passages_traditional_questions": (same, to_traditional),
    }
    result: dict[str, object] = {
        "dataset": data.name,
        "documents": len(data.corpus),
        "queries": len(qids),
        "metric": "ndcg@10",
    }
    for name, (doc_text, query_text) in layouts.items():
        result[name] = {
            "without_folding": round(score(data, qids, plain, doc_text, query_text), 4),
            "with_folding": round(score(data, qids, folded, doc_text, query_text), 4),
        }
    print(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
