#!/usr/bin/env python3
"""Query latency per stage, with and without a cross-encoder reranker, on Cranfield.

    python scripts/bench_query.py --es-url http://127.0.0.1:9201 \\
        [--queries 100] [--rerank-window 50] [--rerank-backend cross-encoder] [--output FILE]

Method. All of Cranfield (1,398 non-empty abstracts) is ingested through the real pipeline
(bench_foundation's ingest path) into a fresh, uniquely named index, deleted afterwards.
Each of the first ``--queries`` queries then goes through ContextBuilder.build (client-side
RRF by default, parent expansion, the default 20 context candidates) twice: once without
and once with reranking, the order alternating per query so that machine noise hits both
configurations alike. The query-embedding cache is off, so both pay for the embedding.
Stages are the Searcher's own timings (embed, search, fuse, rerank, total) plus "context":
the wall time of build() beyond the search's total (judging, parent fetch, selection,
prompt). "end_to_end" is the wall time of build(). Prints p50/p95/mean per stage and
configuration, the ratio of the end-to-end figures with/without rerank, and the rerank cost
per 100 candidates, both from the pipeline (rerank stage / candidates actually scored) and
from direct Reranker.score calls on exactly 100 candidates.

The reranker. No reranker weights can be downloaded here, so the cross-encoder is built with
the REAL size of a common one: all-MiniLM-L6-v2's BertConfig (6 layers, 384 hidden, the
shape of cross-encoder/ms-marco-MiniLM-L-6-v2) with a 1-label classification head and
RANDOM weights (fixed seed), saved with MiniLM's tokenizer to a temporary folder and loaded
through es_rag's own reranker (``rerank_model=<folder>``, ``rerank_backend``). Its scores
are meaningless: only the timings are. A larger reranker (bge-reranker-v2-m3, XLM-R large)
costs far more per candidate.

Without --es-url (or ES_RAG_ES_URL) it starts a throwaway Elasticsearch with
scripts/search-server.sh and stops it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_foundation import load_cranfield, pct  # noqa: E402
from calibrate_evidence import (  # noqa: E402
    cranfield_documents,
    default_model,
    drop_index,
    ingest,
    load_average,
    model_label,
    with_server,
)

from es_rag.acl import make_caller  # noqa: E402
from es_rag.config import Settings  # noqa: E402
from es_rag.embedding import build_embedder  # noqa: E402
from es_rag.pipeline import Ingestor  # noqa: E402
from es_rag.query.context import ContextBuilder  # noqa: E402
from es_rag.query.search import Searcher  # noqa: E402
from es_rag.types import Hit  # noqa: E402

CONFIGS = ("no-rerank", "rerank")
STAGES = ("embed", "search", "fuse", "rerank", "search_total", "context", "end_to_end")


def build_random_cross_encoder(minilm_path: str, folder: Path, seed: int) -> dict[str, Any]:
    """MiniLM-L6-sized BERT sequence classifier (1 label), random init, MiniLM's tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig.from_pretrained(minilm_path, num_labels=1)
    model = BertForSequenceClassification(config)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(folder)
    return {
        "architecture": "BertForSequenceClassification",
        "layers": config.num_hidden_layers,
        "hidden": config.hidden_size,
        "parameters": sum(p.numel() for p in model.parameters()),
        "weights": f"RANDOM (torch seed {seed}): scores are meaningless, only timings count",
    }


def rerank_text(hit: Hit) -> str:
    """What Searcher._rerank gives the reranker for one hit."""
    return f"{' > '.join(hit.title_path)}\n{hit.text}" if hit.title_path else hit.text


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": round(pct(list(values), 0.5), 2),
        "p95": round(pct(list(values), 0.95), 2),
        "mean": round(statistics.fmean(values), 2),
    }


def run(args: argparse.Namespace, es_url: str) -> dict[str, Any]:
    import torch

    model = default_model()
    docs, queries, _ = load_cranfield(args.data)
    queries = queries[: args.queries]
    documents = cranfield_documents(docs)
    with tempfile.TemporaryDirectory(prefix="es-rag-random-ce-") as tmp:
        reranker_info = build_random_cross_encoder(model, Path(tmp), args.seed)
        settings = Settings(
            es_url=es_url,
            index=f"benchq-{os.getpid()}-{int(time.time())}",
            embedding_model=model,
            device="cpu",
            strategy=args.strategy,
            query_cache_size=0,  # both configurations must pay for the query embedding
            rerank_model=tmp,
            rerank_backend=args.rerank_backend,
            rerank_window=args.rerank_window,
            rerank_timeout=300.0,  # never cut a measurement short
        )
        embedder = build_embedder(settings)
        ingestor = Ingestor(settings, embedder=embedder)
        try:
            t0 = time.perf_counter()
            chunks = ingest(ingestor, documents)
            ingest_s = time.perf_counter() - t0
            result = measure(args, settings, ingestor, queries)
        finally:
            drop_index(ingestor)
    return {
        "benchmark": "query",
        "note": "reranker weights are RANDOM: only the timings are meaningful, not the ranking",
        "environment": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "load_average_after": load_average(),
            "es_url": es_url,
            "model": model_label(model),
            "embedding_version": embedder.embedding_version,
            "device": "cpu",
        },
        "corpus": {
            "documents": len(documents),
            "chunks": chunks,
            "ingest_s": round(ingest_s, 1),
            "queries": len(queries),
        },
        "setup": {
            "strategy": args.strategy,
            "context_candidates": settings.context_candidates,
            "context_expand": settings.context_expand,
            "rerank_window": settings.rerank_window,
            "rerank_backend": settings.rerank_backend,
            "rerank_batch_size": settings.rerank_batch_size,
            "rerank_max_length": settings.rerank_max_length,
            "reranker": reranker_info,
        },
        **result,
    }


def measure(
    args: argparse.Namespace, settings: Settings, ingestor: Ingestor, queries: list[str]
) -> dict[str, Any]:
    searcher = Searcher(
        settings, client=ingestor.engine, embedder=ingestor.embedder, analyzer=ingestor.analyzer
    )
    builder = ContextBuilder(searcher)
    caller = make_caller("bench", users=["user:bench"])
    reranker = searcher.reranker
    assert reranker is not None
    scored: list[int] = []  # candidates per rerank call, counted where the reranker is called
    original = reranker.score

    def counting(query: str, passages: Sequence[str]) -> list[float]:
        scored.append(len(passages))
        return original(query, passages)

    reranker.score = counting  # type: ignore[method-assign]

    for query in queries[:3]:  # warm-up: model loads, probe, first-call costs
        for config in CONFIGS:
            builder.build(query, caller=caller, rerank=config == "rerank")
    scored.clear()

    stages: dict[str, dict[str, list[float]]] = {c: {s: [] for s in STAGES} for c in CONFIGS}
    per_100: list[float] = []
    notes: set[str] = set()
    for n, query in enumerate(queries):
        for config in CONFIGS[n % 2 :] + CONFIGS[: n % 2]:
            rerank = config == "rerank"
            t0 = time.perf_counter()
            ctx = builder.build(query, caller=caller, rerank=rerank)
            wall = (time.perf_counter() - t0) * 1000
            if rerank and not ctx.reranked:
                notes.add(f"rerank did not apply: {ctx.timings_ms}")
            t = ctx.timings_ms
            for stage in ("embed", "search", "fuse", "rerank"):
                if stage in t:
                    stages[config][stage].append(t[stage])
            stages[config]["search_total"].append(t["total"])
            stages[config]["context"].append(wall - t["total"])
            stages[config]["end_to_end"].append(wall)
            if rerank and scored:
                per_100.append(t["rerank"] / scored[-1] * 100)

    # Direct cost on exactly 100 candidates (no ES, no thread), a few queries.
    direct: list[float] = []
    for query in queries[: args.direct_queries]:
        hits = searcher.search(query, caller=caller, k=100, rerank=False).hits
        texts = [rerank_text(h) for h in hits[:100]]
        if len(texts) < 100:
            continue
        t0 = time.perf_counter()
        original(query, texts)
        direct.append((time.perf_counter() - t0) * 1000)

    latency = {c: {s: summary(v) for s, v in stages[c].items() if v} for c in CONFIGS}
    ratio = {
        m: round(latency["rerank"][stage][m] / latency["no-rerank"][stage][m], 2)
        for stage in ("end_to_end",)
        for m in ("p50", "p95", "mean")
    }
    return {
        "latency_ms": latency,
        "ratio_rerank_to_no_rerank_end_to_end": ratio,
        "rerank_cost": {
            "candidates_per_query": summary(scored) if scored else None,
            "pipeline_ms_per_100_candidates": summary(per_100) if per_100 else None,
            "direct_ms_per_100_candidates": summary(direct) if direct else None,
            "direct_queries": len(direct),
        },
        "notes": sorted(notes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--es-url", default=os.environ.get("ES_RAG_ES_URL"))
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "cranfield")
    parser.add_argument("--port", type=int, default=9262, help="port for a throwaway server")
    parser.add_argument("--queries", type=int, default=100, help="queries measured (max 225)")
    parser.add_argument("--rerank-window", type=int, default=50, help="candidates reranked")
    parser.add_argument(
        "--rerank-backend", choices=("cross-encoder", "flag"), default="cross-encoder"
    )
    parser.add_argument(
        "--strategy", default="client-rrf", help="search strategy (client-rrf has a fuse stage)"
    )
    parser.add_argument(
        "--direct-queries", type=int, default=10, help="queries for the direct 100-candidate cost"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random reranker")
    parser.add_argument("--output", type=Path, help="also write the JSON here")
    args = parser.parse_args()

    result = with_server(args, lambda url: run(args, url))
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
