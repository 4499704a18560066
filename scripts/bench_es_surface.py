#!/usr/bin/env python3
"""The Elasticsearch-compatible ``_search`` against ``/v1/search``, same questions, one run;
and the leak count of the canary suite through the surface.

    python scripts/bench_es_surface.py [--es-url URL] [--engine elasticsearch|opensearch]
                                       [--docs 400] [--requests 200]

Method. The first ``--docs`` Cranfield abstracts (../shared/data/cranfield, or
``--cranfield DIR``) are ingested into a fresh index; a real ``es-rag serve`` is started on
a loopback port with an API key made for the run. Each Cranfield question is then asked,
one request at a time over one keep-alive connection, three ways in turn (so that drift in
the machine's load touches all three alike):

- ``v1``: ``POST /v1/search`` ``{"query": q, "k": 10}``;
- ``es``: ``POST /{alias}/_search`` with a ``multi_match`` of ``q``, ``size`` 10;
- ``search-ui``: the body Elastic's Search UI sends (four ``multi_match`` clauses, a
  highlight on ``content``, ``_source`` includes and a facet aggregation on ``mime_type``).

The query-vector cache is off, so every request embeds its question. Prints one JSON object
per way (p50/p95 in ms) and a summary with each ES way's p50 over ``v1``'s p50: the cost of
translation, of the page fetch (``_source``, highlight) and of the aggregation.

Then the canary suite (scripts/es_surface_canaries.py): two tenants' documents with every
ACL shape go into the same index, and every caller's probes run through ``_search``,
``_msearch``, ``_count`` and aggregations; the summary reports probes and leaks (must be 0).

Without --es-url (or ES_RAG_ES_URL) it starts a throwaway server with
scripts/search-server.sh and stops it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import es_surface_canaries as canaries  # noqa: E402
import httpx  # noqa: E402
from bench_serve import Service, percentile  # noqa: E402
from calibrate_evidence import (  # noqa: E402
    cranfield_documents,
    default_model,
    drop_index,
    ingest,
    load_average,
    with_server,
)

from es_rag.config import Settings  # noqa: E402
from es_rag.datasets import load  # noqa: E402
from es_rag.pipeline import Ingestor  # noqa: E402
from es_rag.serve.keys import KeyStore  # noqa: E402


def search_ui_body(q: str) -> dict[str, Any]:
    """What @elastic/search-ui-elasticsearch-connector 1.24.2 posts (tests/fixtures/es_bodies)."""
    fields = ["title^3", "title_path^2", "content^1"]
    kinds = [("best_fields", {"operator": "and"}), ("cross_fields", {}), ("phrase", {})]
    kinds.append(("phrase_prefix", {}))
    return {
        "size": 10,
        "_source": {"includes": ["title", "title_path", "content", "source_uri"]},
        "from": 0,
        "sort": "_score",
        "highlight": {"fields": {"content": {}}},
        "aggs": {
            "facet_bucket_all": {
                "aggs": {"mime_type": {"terms": {"field": "mime_type", "size": 10}}},
                "filter": {"bool": {"must": []}},
            }
        },
        "query": {
            "bool": {
                "must": [
                    {
                        "bool": {
                            "minimum_should_match": 1,
                            "should": [
                                {"multi_match": {"query": q, "fields": fields, "type": t, **o}}
                                for t, o in kinds
                            ],
                        }
                    }
                ]
            }
        },
    }


def run(args: argparse.Namespace, es_url: str) -> dict[str, Any]:
    data = load(Path(args.cranfield), "cranfield")
    docs = sorted(data.corpus.items(), key=lambda kv: int(kv[0]))[: args.docs]
    documents = cranfield_documents([(d, t, w) for d, (t, w) in docs])
    questions = list(data.queries.values())[: args.requests]
    model = default_model()
    index = f"bench-surface-{os.getpid()}"
    common: dict[str, Any] = {
        "es_url": es_url,
        "engine": args.engine,
        "index": index,
        "keys_index": f"{index}-keys",
        "embedding_model": model,
        "query_cache_size": 0,
    }
    settings = Settings(**common)
    ingestor = Ingestor(settings)
    chunks = ingest(ingestor, documents)
    store = KeyStore(ingestor.engine, settings.keys_index)
    key = store.create(tenant="bench", principals=["user:bench"], rate_limit=1e6)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ES_RAG_")}
    env.update({f"ES_RAG_{k.upper()}": str(v) for k, v in common.items()})
    service = Service(env, Path(tempfile.mkdtemp()) / "serve.log")
    auth = {"Authorization": f"ApiKey {key.encoded}"}
    ways = {
        "v1": lambda q: ("/v1/search", {"query": q, "k": 10}),
        "es": lambda q: (
            f"/{index}/_search",
            {"query": {"multi_match": {"query": q, "fields": ["title", "content"]}}, "size": 10},
        ),
        "search-ui": lambda q: (f"/{index}/_search", search_ui_body(q)),
    }
    latencies: dict[str, list[float]] = {w: [] for w in ways}
    errors: dict[str, int] = dict.fromkeys(ways, 0)
    leaks = canaries.Leaks()
    try:
        with httpx.Client(base_url=service.url, timeout=60, headers=auth) as http:
            for i, q in enumerate([f"warm up {j}" for j in range(8)] + questions):
                for way, make in ways.items():
                    path, body = make(q)
                    t0 = time.perf_counter()
                    r = http.post(path, json=body)
                    ms = (time.perf_counter() - t0) * 1000
                    if r.status_code != 200:
                        errors[way] += 1
                    elif i >= 8:
                        latencies[way].append(ms)
            docs_ = canaries.canaries()
            canaries.ingest(ingestor, docs_)
            rows = canaries.row_counts(ingestor.engine, index, docs_)
            for tenant, people in canaries.callers():
                made = store.create(tenant=tenant, principals=[f"user:{p}" for p in people])
                headers = {"Authorization": f"ApiKey {made.encoded}"}

                def call(
                    method: str, path: str, body: Any, headers: dict[str, str] = headers
                ) -> Any:
                    if isinstance(body, list):
                        raw = "".join(json.dumps(line) + "\n" for line in body)
                        kind = {"content-type": "application/x-ndjson"}
                        r = http.request(method, path, content=raw, headers={**headers, **kind})
                    else:
                        r = http.request(method, path, json=body, headers=headers)
                    if r.status_code != 200:
                        raise SystemExit(f"{path}: {r.status_code} {r.text[:300]}")
                    return r.json()

                canaries.check(call, index, tenant, people, docs_, rows, leaks)
    finally:
        service.stop()
        store.engine.delete_index(settings.keys_index)
        drop_index(ingestor)

    cells = {
        way: {
            "way": way,
            "p50_ms": round(percentile(v, 0.5), 2),
            "p95_ms": round(percentile(v, 0.95), 2),
            "requests": len(v),
            "errors": errors[way],
        }
        for way, v in latencies.items()
    }
    for cell in cells.values():
        print(json.dumps(cell), flush=True)
    base = cells["v1"]["p50_ms"]
    return {
        "bench": "es-surface",
        "engine": args.engine,
        "docs": len(documents),
        "chunks": chunks,
        "model": model,
        "cpus": os.cpu_count(),
        "load_average": load_average(),
        "summary": {
            "es_p50_over_v1_p50": round(cells["es"]["p50_ms"] / base, 3),
            "search_ui_p50_over_v1_p50": round(cells["search-ui"]["p50_ms"] / base, 3),
            "canary_probes": leaks.probes,
            "canary_leaks": len(leaks.found),
            "first_leaks": leaks.found[:5],
        },
        "cells": list(cells.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--es-url", default=os.environ.get("ES_RAG_ES_URL"))
    parser.add_argument(
        "--engine", default="elasticsearch", choices=["elasticsearch", "opensearch"]
    )
    parser.add_argument("--port", type=int, default=9298, help="throwaway server's port")
    parser.add_argument("--cranfield", default=str(ROOT.parent / "shared/data/cranfield"))
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    result = with_server(args, lambda url: run(args, url))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
