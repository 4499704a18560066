#!/usr/bin/env python3
"""Sufficiency's calibration on a small index: one span per chunk against several.

    python scripts/small_index_calibration.py DATASET --format FMT --sample 0.03 \\
        [--seeds 0,1,2,3] [--calibration-seeds 5] [--spans 1,4]

For each seed, a seeded share of the corpus is indexed (``sufficiency_study.split``: a
question is answerable when one of its judged documents is in the sample), every
question's judge signals are read once, and the index is calibrated again and again, with
each ``--spans`` value and ``--calibration-seeds`` seeds, on the very same index and
questions. One JSON line per seed: the chunks, the probes each setting drew, the balanced
accuracy of the default judge under each calibration and the spread (standard deviation)
of its threshold over the calibration seeds. With fewer chunks than probes, one span per
chunk makes the 90th percentile rest on two or three probes; this measures what asking
each chunk again buys.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import sufficiency_study as study  # noqa: E402

from es_rag import eval_runner as er  # noqa: E402
from es_rag.acl import make_caller  # noqa: E402
from es_rag.config import Settings  # noqa: E402
from es_rag.datasets import Dataset, load  # noqa: E402
from es_rag.parts import Parts  # noqa: E402
from es_rag.pipeline import Ingestor  # noqa: E402
from es_rag.query import sufficiency  # noqa: E402
from es_rag.query.search import Searcher  # noqa: E402


def one(args: argparse.Namespace, data: Dataset, seed: int) -> dict:
    kept, labels = study.split(data, 0.4, seed, args.max_queries, args.sample)
    base = Settings()
    settings = base.model_copy(update={"index": f"es-rag-small-{data.name}-{seed}".lower()})
    parts = Parts(settings)
    ingestor = Ingestor(
        settings, client=parts.engine, embedder=parts.embedder, analyzer=parts.analyzer
    )
    try:
        if not ingestor.index.exists():
            er.ingest_dataset(ingestor, kept)
        searcher = Searcher(
            settings, client=parts.engine, embedder=parts.embedder, analyzer=parts.analyzer
        )
        caller = make_caller(er.EVAL_TENANT, users=["user:eval"])
        asked = []
        for qid, text in kept.queries.items():
            response = searcher.search(text, caller=caller, k=settings.context_candidates)
            asked.append((labels[qid], sufficiency.signals(searcher, text, response, caller)))
        truth = [answerable for answerable, _ in asked]
        out: dict = {
            "seed": seed,
            "docs": len(kept.corpus),
            "answerable": sum(truth),
            "unanswerable": len(truth) - sum(truth),
        }
        for spans in args.spans:
            accuracy, thresholds = [], []
            for cseed in range(args.calibration_seeds):
                cal = sufficiency.calibrate(searcher, seed=cseed, spans=spans)
                verdicts = [
                    sufficiency.decide(
                        found,
                        cal,
                        strictness=settings.sufficiency_strictness,
                        min_coverage=settings.sufficiency_min_coverage,
                    ).sufficient
                    for _, found in asked
                ]
                accuracy.append(study.balanced(truth, verdicts))
                thresholds.append(cal.knn_threshold(settings.sufficiency_strictness) or 0.0)
                out["chunks"], out[f"probes@{spans}"] = cal.rows, cal.probes
            out[f"balanced_accuracy@{spans}"] = round(statistics.mean(accuracy), 4)
            out[f"threshold_sd@{spans}"] = round(statistics.pstdev(thresholds), 4)
            out[f"thresholds@{spans}"] = [round(t, 4) for t in thresholds]
        return out
    finally:
        for name in ingestor.index.concrete_indices():
            parts.engine.delete_index(name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset")
    p.add_argument("--format", default="beir")
    p.add_argument("--sample", type=float, required=True, help="share of the corpus indexed")
    p.add_argument("--seeds", default="0", help="comma-separated: one sample each")
    p.add_argument("--calibration-seeds", type=int, default=5)
    p.add_argument("--spans", default="1,4", help="comma-separated spans per chunk to compare")
    p.add_argument("--max-queries", type=int, default=300)
    args = p.parse_args()
    args.spans = [int(s) for s in args.spans.split(",")]
    data = load(Path(args.dataset), args.format)
    for seed in (int(s) for s in args.seeds.split(",")):
        print(json.dumps(one(args, data, seed)), flush=True)


if __name__ == "__main__":
    main()
