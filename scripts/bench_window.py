#!/usr/bin/env python3
"""Search time against the fusion window, pseudo-relevance feedback and the question's
sentences, side by side.

    python scripts/bench_window.py DATASET --format FMT --index ALIAS [--windows 50,100]
        [--feedback 0,3] [--sentences 0,4] [--queries 150]

ALIAS is an index `es-rag eval --keep-index` built (tenant es-rag-eval). Each query is
asked once first (its embeddings are then cached, so what is timed is the search, the
fusion and the feedback round), then under every variant (window × feedback chunks ×
sentences asked) in turn, in alternating order over two rounds, k = 10. Prints one JSON
object: p50/p95 ms per variant (`window_W_feedback_N`, with `_sentences_S` when
``--sentences`` is given), the p50 ratio of each to the first, and the share of queries
whose feedback round ran (it is skipped when the retrievers share nothing at the top).
With ``--sentences``, the first pass also times the query embeddings: the whole question's
(`embed_ms`) and what its sentences add (`sentences_embed_ms`, over the questions that
have several), and counts those questions (`questions_with_sentences`).
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
from es_rag.query import sentences  # noqa: E402
from es_rag.query.search import Searcher  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--format", required=True)
    ap.add_argument("--index", required=True)
    ap.add_argument("--windows", default="50,100")
    ap.add_argument("--feedback", default=None, help="feedback chunks (default: the setting)")
    ap.add_argument("--sentences", default=None, help="sentences asked (default: the setting)")
    ap.add_argument("--queries", type=int, default=150)
    args = ap.parse_args()
    settings = Settings(index=args.index)
    feedback = args.feedback or str(settings.feedback_chunks)
    asked = args.sentences or str(settings.question_sentences)
    variants = [
        (int(w), int(n), int(m))
        for w in args.windows.split(",")
        for n in feedback.split(",")
        for m in asked.split(",")
    ]
    texts = list(load(args.dataset, args.format).queries.values())[: args.queries]
    who = make_caller(EVAL_TENANT, users=["user:eval"])
    searcher = Searcher(settings)
    most = max(m for _, _, m in variants)
    whole_ms, parts_ms = [], []
    for text in texts:  # the whole question first, then what its sentences add
        for m in (0, most):
            searcher.settings = settings.model_copy(update={"question_sentences": m})
            embed = searcher.search(text, caller=who, k=10).timings_ms.get("embed", 0.0)
            if m == 0:
                whole_ms.append(embed)
            elif sentences.split(text, m):
                parts_ms.append(embed)
    took: dict[tuple[int, int, int], list[float]] = {v: [] for v in variants}
    ran: dict[tuple[int, int, int], int] = dict.fromkeys(variants, 0)
    for rnd in range(2):
        for text in texts:
            for w, n, m in variants if rnd == 0 else variants[::-1]:
                update = {"rank_window_size": w, "feedback_chunks": n, "question_sentences": m}
                searcher.settings = settings.model_copy(update=update)
                t0 = time.perf_counter()
                got = searcher.search(text, caller=who, k=10)
                took[w, n, m].append((time.perf_counter() - t0) * 1000)
                ran[w, n, m] += "feedback" in got.timings_ms
    out: dict[str, object] = {"strategy": searcher.resolve_strategy(None)[0]}
    if args.sentences:
        out["questions_with_sentences"] = len(parts_ms)
        out["embed_ms"] = round(statistics.median(whole_ms), 1)
        out["sentences_embed_ms"] = round(statistics.median(parts_ms), 1) if parts_ms else None
    first = statistics.median(took[variants[0]])
    for (w, n, m), ms in took.items():
        label = f"window_{w}_feedback_{n}" + (f"_sentences_{m}" if args.sentences else "")
        out[label] = {
            "p50_ms": round(statistics.median(ms), 1),
            "p95_ms": round(statistics.quantiles(ms, n=20)[18], 1),
            "p50_ratio": round(statistics.median(ms) / first, 3),
            "feedback_ran": round(ran[w, n, m] / len(ms), 3),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
