#!/usr/bin/env python3
"""The same questions in-process (``Searcher``) and through ``es-rag serve``, side by side.

    python scripts/bench_serve.py [--es-url URL] [--docs 400] [--requests 160]
                                  [--concurrency 1,4,16] [--strategies bm25,knn,auto]
                                  [--workers 1] [--httpx] [--rounds 3]

Method. The first ``--docs`` Cranfield abstracts (../shared/data/cranfield, or
``--cranfield DIR``) are ingested into a fresh index. A real ``es-rag serve`` process is
started on a loopback port with an API key made for the run. For each strategy and each
concurrency, in turn, ``--requests`` Cranfield questions are asked in-process by that many
threads sharing one ``Searcher``, then through the service by that many threads, each with
its own keep-alive HTTP connection (the standard library's; with ``--httpx`` also through
httpx, as a third side); a warm-up of 16 requests precedes each measurement. The cells of
a strategy are measured ``--rounds`` times, round after round, and the summary takes the
median of the rounds' ratios.
The query-vector cache is off on both sides (every request embeds its question), so the
figures are those of questions never seen before. Prints one JSON object per cell
(p50/p95/p99 in ms, queries/s, errors) and a summary with the targets' ratios: service p50
at concurrency 1 over in-process p50, and service queries/s at the highest concurrency over
concurrency 1.

Without --es-url (or ES_RAG_ES_URL) it starts a throwaway Elasticsearch with
scripts/search-server.sh and stops it afterwards.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import httpx  # noqa: E402
from calibrate_evidence import (  # noqa: E402
    cranfield_documents,
    default_model,
    drop_index,
    ingest,
    load_average,
    with_server,
)

from es_rag.acl import make_caller  # noqa: E402
from es_rag.config import Settings  # noqa: E402
from es_rag.datasets import load  # noqa: E402
from es_rag.pipeline import Ingestor  # noqa: E402
from es_rag.query.search import Searcher  # noqa: E402
from es_rag.serve.keys import KeyStore  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_jiffies() -> tuple[int, int] | None:
    """(busy, total) CPU time of the whole machine so far (Linux), in clock ticks."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


def drive(one: Callable[[str], None], questions: list[str], concurrency: int) -> dict[str, Any]:
    """Ask every question once with ``concurrency`` threads; latencies, throughput, and
    how many of the machine's cores were busy meanwhile (service, search server, model
    and load generator together: the ceiling on what more concurrency can add)."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    cursor = iter(range(len(questions)))

    def worker() -> None:
        while True:
            with lock:
                i = next(cursor, None)
            if i is None:
                return
            t0 = time.perf_counter()
            try:
                one(questions[i])
                ms = (time.perf_counter() - t0) * 1000
                with lock:
                    latencies.append(ms)
            except Exception as exc:
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    cpu0 = cpu_jiffies()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu1 = cpu_jiffies()
    busy = None
    if cpu0 and cpu1 and cpu1[1] > cpu0[1]:
        busy = round((cpu1[0] - cpu0[0]) / (cpu1[1] - cpu0[1]) * (os.cpu_count() or 1), 2)
    qps = len(latencies) / wall
    return {
        "busy_cores": busy,
        # CPU time the whole machine spent per answer: what batching can lower
        "cpu_ms_per_query": round(busy / qps * 1000, 1) if busy and qps else None,
        "p50_ms": round(percentile(latencies, 0.50), 2) if latencies else None,
        "p95_ms": round(percentile(latencies, 0.95), 2) if latencies else None,
        "p99_ms": round(percentile(latencies, 0.99), 2) if latencies else None,
        "qps": round(qps, 2),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


class Service:
    def __init__(self, env: dict[str, str], log: Path, workers: int = 1) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "es_rag.cli", "serve", "--port", str(self.port)]
        self.proc = subprocess.Popen(
            [*command, "--workers", str(workers)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
            start_new_session=True,
        )
        deadline = time.monotonic() + 180
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"es-rag serve exited: {log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise SystemExit("es-rag serve not ready in 180 s")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def run(args: argparse.Namespace, es_url: str) -> dict[str, Any]:
    data = load(Path(args.cranfield), "cranfield")
    docs = sorted(data.corpus.items(), key=lambda kv: int(kv[0]))[: args.docs]
    documents = cranfield_documents([(d, t, w) for d, (t, w) in docs])
    questions = list(data.queries.values())
    model = default_model()
    index = f"bench-serve-{os.getpid()}"
    common: dict[str, Any] = {
        "es_url": es_url,
        "index": index,
        "keys_index": f"{index}-keys",
        "embedding_model": model,
        "query_cache_size": 0,
    }
    settings = Settings(**common)
    ingestor = Ingestor(settings)
    t0 = time.perf_counter()
    chunks = ingest(ingestor, documents)
    ingest_s = time.perf_counter() - t0
    store = KeyStore(ingestor.engine, settings.keys_index)
    key = store.create(tenant="bench", principals=["user:bench"], rate_limit=1e6)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ES_RAG_")}
    env.update({f"ES_RAG_{k.upper()}": str(v) for k, v in common.items()})
    log = Path(tempfile.mkdtemp()) / "serve.log"
    service = Service(env, log, workers=args.workers)
    searcher = Searcher(settings, client=ingestor.engine)
    caller = make_caller("bench", users=["bench"])
    headers = {"Authorization": f"ApiKey {key.encoded}", "Content-Type": "application/json"}
    local = threading.local()

    def over_http(strategy: str) -> Callable[[str], None]:
        # The standard library's keep-alive connection, one per thread: the load generator
        # shares the two cores with the service and the search server, so its own cost
        # per request is kept small (--httpx adds the same cells through httpx).
        def one(q: str) -> None:
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection(
                    "127.0.0.1", service.port, timeout=60
                )
            conn.request("POST", "/v1/search", json.dumps(body(q, strategy)), headers)
            r = conn.getresponse()
            payload = r.read()
            if r.status != 200:
                raise RuntimeError(f"{r.status}: {payload[:120]!r}")

        return one

    def over_httpx(strategy: str) -> Callable[[str], None]:
        def one(q: str) -> None:
            client = getattr(local, "client", None)
            if client is None:
                client = local.client = httpx.Client(base_url=service.url, timeout=60)
            r = client.post("/v1/search", json=body(q, strategy), headers=headers)
            if r.status_code != 200:
                raise RuntimeError(f"{r.status_code}: {r.text[:120]}")

        return one

    def body(q: str, strategy: str) -> dict[str, Any]:
        out: dict[str, Any] = {"query": q, "k": 10}
        if strategy != "auto":
            out["strategy"] = strategy
        return out

    def in_process(strategy: str) -> Callable[[str], None]:
        def one(q: str) -> None:
            searcher.search(
                q, caller=caller, k=10, strategy=None if strategy == "auto" else strategy
            )

        return one

    cells: list[dict[str, Any]] = []
    levels = [int(c) for c in args.concurrency.split(",")]
    try:
        for strategy in args.strategies.split(","):
            # Rounds: every cell of the strategy once per round, so that the machine's
            # drift (these machines are noisy) touches both sides and every concurrency
            # alike; the summary takes the median of the rounds.
            for round_ in range(args.rounds):
                for c in levels:
                    sides = [("in-process", in_process), ("service", over_http)]
                    if args.httpx:
                        sides.append(("service-httpx", over_httpx))
                    for side, make in sides:
                        one = make(strategy)
                        drive(one, [f"warm up {i} {questions[i]}" for i in range(16)], c)
                        offset = (len(cells) * 37) % len(questions)
                        asked = [
                            questions[(offset + i) % len(questions)] + f" {i // len(questions)}"
                            for i in range(args.requests)
                        ]
                        cell = {
                            "strategy": strategy,
                            "side": side,
                            "concurrency": c,
                            "round": round_,
                            **drive(one, asked, c),
                        }
                        cells.append(cell)
                        print(json.dumps(cell), flush=True)
    finally:
        service.stop()
        store.engine.delete_index(settings.keys_index)
        drop_index(ingestor)

    def median(strategy: str, side: str, c: int, key: str) -> float:
        values = [
            x[key]
            for x in cells
            if (x["strategy"], x["side"], x["concurrency"]) == (strategy, side, c)
        ]
        return float(statistics.median(values))

    def per_round(strategy: str, fn: Callable[[int], float]) -> list[float]:
        return [round(fn(r), 3) for r in range(args.rounds)]

    def at(strategy: str, side: str, c: int, r: int, key: str) -> float:
        return float(
            next(
                x[key]
                for x in cells
                if (x["strategy"], x["side"], x["concurrency"], x["round"])
                == (strategy, side, c, r)
            )
        )

    low, high = min(levels), max(levels)
    summary = {}
    for strategy in args.strategies.split(","):
        p50 = per_round(
            strategy,
            lambda r, st=strategy: (
                at(st, "service", low, r, "p50_ms") / at(st, "in-process", low, r, "p50_ms")
            ),
        )
        qps = per_round(
            strategy,
            lambda r, st=strategy: (
                at(st, "service", high, r, "qps") / at(st, "service", low, r, "qps")
            ),
        )
        summary[strategy] = {
            "service_p50_over_in_process_p50_at_c1": round(statistics.median(p50), 3),
            f"service_qps_c{high}_over_c{low}": round(statistics.median(qps), 3),
            "per_round": {"p50_ratio": p50, "qps_ratio": qps},
            "errors": sum(x["errors"] for x in cells if x["strategy"] == strategy),
            # How much of the machine one request at a time already keeps busy: what is
            # left for more concurrency to use, besides what batching saves.
            f"busy_cores_c{low}": median(strategy, "service", low, "busy_cores"),
            f"cpu_ms_per_query_c{low}": median(strategy, "service", low, "cpu_ms_per_query"),
            f"cpu_ms_per_query_c{high}": median(strategy, "service", high, "cpu_ms_per_query"),
        }
    return {
        "bench": "serve",
        "docs": len(documents),
        "chunks": chunks,
        "ingest_s": round(ingest_s, 1),
        "model": model,
        "requests_per_cell": args.requests,
        "workers": args.workers,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "load_average": load_average(),
        "summary": summary,
        "cells": cells,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--es-url", default=os.environ.get("ES_RAG_ES_URL"))
    parser.add_argument("--port", type=int, default=9299, help="throwaway server's port")
    parser.add_argument("--cranfield", default=str(ROOT.parent / "shared/data/cranfield"))
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--requests", type=int, default=160)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--strategies", default="bm25,knn,auto")
    parser.add_argument("--workers", type=int, default=1, help="es-rag serve --workers")
    parser.add_argument("--httpx", action="store_true", help="also measure through httpx")
    parser.add_argument("--rounds", type=int, default=3, help="every cell once per round")
    args = parser.parse_args()
    result = with_server(args, lambda url: run(args, url))
    print(json.dumps({k: v for k, v in result.items() if k != "cells"}, indent=2))


if __name__ == "__main__":
    main()
