#!/usr/bin/env python3
"""Search time against the fusion window: the default hybrid at two windows, side by side.

    python scripts/bench_window.py DATASET --format FMT --index ALIAS [--windows 50,100]
        [--queries 150]

ALIAS is an index `es-rag eval --keep-index` built (tenant es-rag-eval). Each query is
asked once first (its embedding is then cached, so what is timed is the search and the
fusion), then at every window in turn, in alternating order over two rounds, k = 10.
Prints one JSON object: p50/p95 ms per window and the p50 ratio of each to the first.
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

from es_rag.acl import make_caller  # noqa: E402
from es_rag.config import Settings  # noqa: E402
from es_rag.datasets import load  # noqa: E402
from es_rag.eval_runner import EVAL_TENANT  # noqa: E402
from es_rag.query.search import Searcher  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--format", required=True)
    ap.add_argument("--index", required=True)
    ap.add_argument("--windows", default="50,100")
    ap.add_argument("--queries", type=int, default=150)
    args = ap.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    settings = Settings(index=args.index)
    texts = list(load(args.dataset, args.format).queries.values())[: args.queries]
    who = make_caller(EVAL_TENANT, users=["user:eval"])
    searcher = Searcher(settings)
    for text in texts:
        searcher.search(text, caller=who, k=10)
    took: dict[int, list[float]] = {w: [] for w in windows}
    for rnd in range(2):
        for text in texts:
            for w in windows if rnd == 0 else windows[::-1]:
                searcher.settings = settings.model_copy(update={"rank_window_size": w})
                t0 = time.perf_counter()
                searcher.search(text, caller=who, k=10)
                took[w].append((time.perf_counter() - t0) * 1000)
    out: dict[str, object] = {"strategy": searcher.resolve_strategy(None)[0]}
    for w, ms in took.items():
        out[f"window_{w}"] = {
            "p50_ms": round(statistics.median(ms), 1),
            "p95_ms": round(statistics.quantiles(ms, n=20)[18], 1),
            "p50_ratio": round(statistics.median(ms) / statistics.median(took[windows[0]]), 3),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
