#!/usr/bin/env python3
"""Search time against the fusion window and pseudo-relevance feedback, side by side.

    python scripts/bench_window.py DATASET --format FMT --index ALIAS [--windows 50,100]
        [--feedback 0,3] [--queries 150]

ALIAS is an index `es-rag eval --keep-index` built (tenant es-rag-eval). Each query is
asked once first (its embedding is then cached, so what is timed is the search, the
fusion and the feedback round), then under every variant (window × feedback chunks) in
turn, in alternating order over two rounds, k = 10. Prints one JSON object: p50/p95 ms per
variant (`window_W_feedback_N`), the p50 ratio of each to the first, and the share of
queries whose feedback round ran (it is skipped when the retrievers share nothing at the
top).
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
    ap.add_argument("--feedback", default=None, help="feedback chunks (default: the setting)")
    ap.add_argument("--queries", type=int, default=150)
    args = ap.parse_args()
    settings = Settings(index=args.index)
    feedback = args.feedback or str(settings.feedback_chunks)
    variants = [(int(w), int(n)) for w in args.windows.split(",") for n in feedback.split(",")]
    texts = list(load(args.dataset, args.format).queries.values())[: args.queries]
    who = make_caller(EVAL_TENANT, users=["user:eval"])
    searcher = Searcher(settings)
    for text in texts:
        searcher.search(text, caller=who, k=10)
    took: dict[tuple[int, int], list[float]] = {v: [] for v in variants}
    ran: dict[tuple[int, int], int] = dict.fromkeys(variants, 0)
    for rnd in range(2):
        for text in texts:
            for w, n in variants if rnd == 0 else variants[::-1]:
                update = {"rank_window_size": w, "feedback_chunks": n}
                searcher.settings = settings.model_copy(update=update)
                t0 = time.perf_counter()
                got = searcher.search(text, caller=who, k=10)
                took[w, n].append((time.perf_counter() - t0) * 1000)
                ran[w, n] += "feedback" in got.timings_ms
    out: dict[str, object] = {"strategy": searcher.resolve_strategy(None)[0]}
    first = statistics.median(took[variants[0]])
    for (w, n), ms in took.items():
        out[f"window_{w}_feedback_{n}"] = {
            "p50_ms": round(statistics.median(ms), 1),
            "p95_ms": round(statistics.quantiles(ms, n=20)[18], 1),
            "p50_ratio": round(statistics.median(ms) / first, 3),
            "feedback_ran": round(ran[w, n] / len(ms), 3),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
