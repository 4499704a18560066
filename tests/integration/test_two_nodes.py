"""The suite's core on a two-node cluster of each engine: 3 shards, 1 replica, one node lost.

Production clusters have several nodes and shards; the other tests run on one of each.
Here two server processes of the same distribution form a cluster on loopback (node A:
master and data, node B: data only), es-rag is given both URLs, and:

- rankings on a 3-shard index agree with a 1-shard index of the same documents and
  vectors, within the tolerance stated in each assertion. BM25 statistics are per shard,
  so plain ``query_then_fetch`` scores a term differently on each shard;
  ``dfs_query_then_fetch`` (``ES_RAG_SEARCH_TYPE``) gathers them first and matches the
  single shard. kNN is approximate per shard.
- kNN returns k visible hits per query for a caller who may read half of the documents;
- node B is stopped while workers ingest through the queue and a thread keeps searching:
  nothing is lost or doubled, and no query fails once the replicas have taken over.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from es_rag.acl import make_acl, make_caller
from es_rag.analysis import TextAnalyzer
from es_rag.config import Settings
from es_rag.engine.client import make_engine
from es_rag.errors import EsRagError
from es_rag.pipeline import Ingestor
from es_rag.query.search import Searcher
from es_rag.types import Document
from tests.conftest import ROOT, missing, unique_index
from tests.integration.conftest import drop_alias
from tests.integration.test_engines_agree import Memo, queries, stdlib_docstrings
from tests.integration.test_queue import Worker, cli, settings_of

pytestmark = pytest.mark.integration


def server(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "search-server.sh"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


class Cluster:
    def __init__(self, engine: str) -> None:
        from tests.conftest import free_port

        self.engine = engine
        self.http = [free_port(), free_port()]
        self.transport = [free_port(), free_port()]
        prefix = "pytest-2n" if engine == "elasticsearch" else "pytest-2n-os"
        self.names = [f"{prefix}-a", f"{prefix}-b"]
        self.seeds = ",".join(f"127.0.0.1:{p}" for p in self.transport)
        self.urls = [f"http://127.0.0.1:{p}" for p in self.http]

    def args(self, i: int) -> list[str]:
        return ["--engine", self.engine, "--port", str(self.http[i]), "--transport-port",
                str(self.transport[i]), "--name", self.names[i]]  # fmt: skip

    def start(self, i: int) -> None:
        roles = "master,data" if i == 0 else "data"
        extra = ["--cluster", "pytest-2n", "--roles", roles, "--seed-hosts", self.seeds,
                 "--heap", "512m", "--fresh"]  # fmt: skip
        if i == 0:
            extra += ["--initial-masters", self.names[0]]
        proc = server("start", *self.args(i), *extra)
        if proc.returncode != 0:
            missing(f"could not start node {self.names[i]}: {proc.stderr[-1500:]}")

    def stop(self, i: int) -> None:
        server("stop", *self.args(i))

    def health(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.urls[0]}/_cluster/health", timeout=10).json())


@pytest.fixture(scope="module")
def cluster(engine_name: str) -> Iterator[Cluster]:
    c = Cluster(engine_name)
    c.start(0)
    c.start(1)
    deadline = time.monotonic() + 60
    while c.health().get("number_of_nodes") != 2:
        assert time.monotonic() < deadline, c.health()
        time.sleep(0.5)
    yield c
    c.stop(1)
    c.stop(0)


def cluster_settings(c: Cluster, minilm_path: str, **extra: Any) -> Settings:
    return Settings(
        es_url=",".join(c.urls),
        engine=c.engine,  # type: ignore[arg-type]
        index=unique_index("two"),
        embedding_model=minilm_path,
        number_of_shards=3,
        number_of_replicas=1,
        **extra,
    )


def test_three_shards_rank_like_one(cluster: Cluster, minilm_path: str, embedder: Any) -> None:
    memo, analyzer = Memo(embedder), TextAnalyzer("english")
    corpus = stdlib_docstrings()
    docs = [
        Document(
            doc_id=k,
            text=v,
            acl=make_acl("docs", allow=["group:a" if i % 2 == 0 else "group:b"]),
        )
        for i, (k, v) in enumerate(sorted(corpus.items()))
    ]
    sharded = cluster_settings(cluster, minilm_path)
    single = sharded.model_copy(update={"index": unique_index("one"), "number_of_shards": 1})
    engine = make_engine(sharded)
    try:
        searchers: dict[str, Searcher] = {}
        for name, s in (("sharded", sharded), ("single", single)):
            ingestor = Ingestor(s, client=engine, embedder=memo, analyzer=analyzer)
            assert all(r.status == "indexed" for r in ingestor.ingest_many(docs, refresh=True))
            searchers[name] = Searcher(s, client=engine, embedder=memo, analyzer=analyzer)
        shards = {
            name: len({h["_shard"] for h in _shards(engine, s.index)})
            for name, s in (("sharded", sharded), ("single", single))
        }
        assert shards == {"sharded": 3, "single": 1}
        everyone = make_caller("docs", groups=["a", "b"])
        figures = {}
        for label, strategy, search_type in (
            ("bm25", "bm25", "query_then_fetch"),
            ("bm25 dfs", "bm25", "dfs_query_then_fetch"),
            ("knn", "knn", "query_then_fetch"),
            ("client-rrf", "client-rrf", "query_then_fetch"),
            ("client-rrf dfs", "client-rrf", "dfs_query_then_fetch"),
        ):
            for s in searchers.values():
                s.settings = s.settings.model_copy(update={"search_type": search_type})
            identical = shared = same_scores = 0.0
            qs = queries()
            for q in qs:
                answers = [
                    s.search(q, caller=everyone, k=10, strategy=strategy).hits
                    for s in searchers.values()
                ]
                tops = [[h.chunk_id for h in hits] for hits in answers]
                identical += tops[0] == tops[1]
                shared += len(set(tops[0]) & set(tops[1])) / max(len(tops[0]), 1)
                # Equal scores rank by shard and segment order: compare the scores too.
                scores = [[round(h.score, 4) for h in hits] for hits in answers]
                same_scores += scores[0] == scores[1]
            figures[label] = (
                round(identical / len(qs), 3),
                round(shared / len(qs), 3),
                round(same_scores / len(qs), 3),
            )
        print(
            f"\n[two nodes] {cluster.engine}: identical top-10, mean overlap@10, identical "
            f"top-10 scores (3 shards vs 1): {figures}"
        )
        # dfs: the same BM25 statistics, so the same scores and the same top 10; equal
        # scores may come in another order (shard and segment order break ties).
        assert figures["bm25 dfs"][2] >= 0.95 and figures["bm25 dfs"][1] >= 0.99
        # Per-shard statistics move scores: most of the top 10 stays, the order may not.
        assert figures["bm25"][1] >= 0.8
        # Approximate per shard (int8 HNSW): near-ties may swap, the set barely moves.
        assert figures["knn"][1] >= 0.9
        assert figures["client-rrf dfs"][1] >= 0.9

        # kNN pre-filters by the ACL: k visible hits for a caller who reads half the rows.
        half = make_caller("docs", groups=["a"])
        readable = {d.doc_id for i, d in enumerate(docs) if i % 2 == 0}
        for q in queries():
            hits = searchers["sharded"].search(q, caller=half, k=10, strategy="knn").hits
            assert len(hits) == 10 and {h.doc_id for h in hits} <= readable
    finally:
        for s in (sharded, single):
            drop_alias(engine, s.index)
        engine.close()


def _shards(engine: Any, alias: str) -> list[dict[str, Any]]:
    resp = engine.search(alias, {"size": 1000, "explain": True, "query": {"match_all": {}}})
    return list(resp["hits"]["hits"])


def test_losing_a_node_mid_ingest_and_mid_queries_loses_nothing(
    cluster: Cluster, redis_url: str, minilm_path: str, tmp_path: Path, embedder: Any
) -> None:
    import os
    import uuid

    settings = cluster_settings(cluster, minilm_path, redis_url=redis_url)
    env = {
        **os.environ,
        "ES_RAG_ES_URL": settings.es_url,
        "ES_RAG_ENGINE": cluster.engine,
        "ES_RAG_REDIS_URL": redis_url,
        "ES_RAG_INDEX": settings.index,
        "ES_RAG_QUEUE": f"two-{uuid.uuid4().hex[:8]}",
        "ES_RAG_EMBEDDING_MODEL": minilm_path,
        "ES_RAG_NUMBER_OF_SHARDS": "3",
        "ES_RAG_NUMBER_OF_REPLICAS": "1",
        "ES_RAG_WORKER_LEASE_SECONDS": "6",
        "ES_RAG_TASK_RETRY_BACKOFF_MAX": "4",
        "ES_RAG_ES_REQUEST_TIMEOUT": "10",
        "HF_HUB_OFFLINE": "1",
    }
    folder = tmp_path / "docs"
    folder.mkdir()
    n = 200
    for i in range(n):
        (folder / f"d-{i:03d}.md").write_text(
            f"# Shipment {i}\n\nShipment {i} leaves dock {i % 9} with {i * 3} parcels.\n"
        )
    seed = Ingestor(settings, embedder=embedder)
    seed.init_index()  # the index exists, with its replicas, before the node goes
    engine = seed.engine
    worker = Worker(env, tmp_path / "worker.log")
    stop_searching = threading.Event()
    outcomes: list[tuple[float, str, int]] = []

    def search_loop() -> None:
        searcher = Searcher(settings, embedder=embedder)
        caller = make_caller("acme", users=["reader"])
        i = 0
        while not stop_searching.is_set():
            strategy = ("client-rrf", "knn", "bm25")[i % 3]
            i += 1
            try:
                hits = searcher.search(f"shipment dock {i % 9}", caller=caller, k=5,
                                       strategy=strategy).hits  # fmt: skip
                outcomes.append((time.monotonic(), "ok", len(hits)))
            except EsRagError as exc:
                outcomes.append((time.monotonic(), f"{type(exc).__name__}: {exc}", 0))
            time.sleep(0.05)

    searching = threading.Thread(target=search_loop, daemon=True)
    searching.start()
    try:
        proc = cli(env, "ingest", "--queue", "--no-wait", str(folder), "--tenant", "acme",
                   "--public")  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        status = Ingestor(settings_of(env)).status

        def finished() -> int:
            status.refresh()
            counts = status.counts(tenant="acme")
            return sum(counts.get(s, 0) for s in ("indexed", "skipped", "failed"))

        deadline = time.monotonic() + 300
        while finished() < n * 0.3:
            assert time.monotonic() < deadline
            time.sleep(0.3)
        stopped_at = time.monotonic()
        cluster.stop(1)  # node B: half the primaries move to their replicas on node A
        while True:
            health = cluster.health()
            # Yellow: every primary is active again (the replicas on A were promoted).
            if health["number_of_nodes"] == 1 and health["status"] in ("yellow", "green"):
                break
            assert time.monotonic() < deadline, health
            time.sleep(0.2)
        taken_over_at = time.monotonic()
        while finished() < n:
            assert time.monotonic() < deadline, finished()
            time.sleep(0.5)
        time.sleep(3)  # a few more queries on the one node left
    finally:
        stop_searching.set()
        searching.join(timeout=30)
        worker.stop()
    engine.refresh(settings.index)
    per_doc: dict[str, list[dict[str, Any]]] = defaultdict(list)
    fields = ["doc_id", "chunk_count", "chunk_type", "ordinal"]
    for hit in engine.scan(settings.index, {"query": {"match_all": {}}, "_source": fields}):
        per_doc[hit["_source"]["doc_id"]].append(hit["_source"])
    rows = status.rows(tenant="acme")
    assert {r["status"] for r in rows} == {"indexed"} and len(rows) == n
    assert len(per_doc) == n  # nothing lost
    assert all(len(r) == r[0]["chunk_count"] for r in per_doc.values())  # none half-written
    assert all(
        len(r) == len({(x["chunk_type"], x["ordinal"]) for x in r}) for r in per_doc.values()
    )  # none doubled
    failed_before = [o for o in outcomes if o[1] != "ok" and o[0] < taken_over_at]
    failed_after = [o for o in outcomes if o[1] != "ok" and o[0] >= taken_over_at]
    after = [o for o in outcomes if o[0] >= taken_over_at]
    figures = {
        "queries": len(outcomes),
        "failed_during_takeover": len(failed_before),
        "failed_after_takeover": len(failed_after),
        "queries_after_takeover": len(after),
        "takeover_s": round(taken_over_at - stopped_at, 1),
        "retried_documents": sum(1 for r in rows if (r.get("retries") or 0) > 0),
    }
    print(f"\n[two nodes] {cluster.engine}: node B stopped mid-ingest: {json.dumps(figures)}")
    for o in (failed_before + failed_after)[:3]:
        print(f"[two nodes] failed query: {o[1][:300]}")
    assert failed_after == [] and len(after) > 10
    assert all(o[2] == 5 for o in outcomes if o[1] == "ok" and o[0] >= taken_over_at)
    drop_alias(engine, settings.index)
    engine.delete_index(f"{settings.index}-status")
