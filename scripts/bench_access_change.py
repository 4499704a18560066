#!/usr/bin/env python3
"""An ACL change through ``ingest`` against the document's first ingest, side by side.

    python scripts/bench_access_change.py [--es-url URL] [--sections 300] [--repeat 3]

Method. A Markdown file of ``--sections`` sections (a few sentences each) is written to a
temporary folder and ingested the way ``es-rag ingest FILE`` does it (``ingest_paths``:
parsed in the sandbox, chunked, embedded, written) into a fresh index. Then, ``--repeat``
times in turn: the same file with another ``--allow`` (parsed again to learn the content is
unchanged, then only access fields rewritten), the same file unchanged (a skip), and the
first ingest again into another fresh index, so that machine noise hits every kind alike.
Embedding calls are counted by wrapping the real embedder. Prints JSON: seconds per kind
(median), the ratios to the first ingest, and the embedding calls of each kind.

Without --es-url (or ES_RAG_ES_URL) it starts a throwaway Elasticsearch with
scripts/search-server.sh and stops it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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

from calibrate_evidence import default_model, drop_index, load_average, with_server  # noqa: E402

from es_rag.acl import make_acl  # noqa: E402
from es_rag.config import Settings  # noqa: E402
from es_rag.embedding import Embedder, build_embedder  # noqa: E402
from es_rag.pipeline import Ingestor  # noqa: E402

WORDS = [
    "refund",
    "ledger",
    "payment",
    "card",
    "bank",
    "settlement",
    "reversal",
    "merchant",
    "payout",
    "fee",
]


class Counted(Embedder):
    """The real embedder, with its calls and texts counted."""

    backend = "st"

    def __init__(self, inner: Embedder) -> None:
        super().__init__(model=inner.model, batch_size=inner.batch_size)
        self.inner = inner
        self.calls = 0
        self.texts = 0

    def embed_batch(self, texts: list[str], *, kind: Any) -> Any:
        self.calls += 1
        self.texts += len(texts)
        return self.inner.embed_batch(texts, kind=kind)

    def token_counter(self) -> Any:
        return self.inner.token_counter()

    @property
    def embedding_version(self) -> str:
        return self.inner.embedding_version


def write_document(folder: Path, sections: int) -> Path:
    parts = []
    for i in range(sections):
        sentence = " ".join(WORDS[(i * 3 + j) % len(WORDS)] for j in range(40))
        parts.append(f"## Section {i}\n\n{sentence} in section {i}. The rule {i} applies.")
    path = folder / "handbook.md"
    path.write_text("# Handbook\n\n" + "\n\n".join(parts) + "\n")
    return path


def run(args: argparse.Namespace, es_url: str) -> dict[str, Any]:
    model = default_model()
    base = Settings(es_url=es_url, embedding_model=model, device="cpu")
    embedder = Counted(build_embedder(base))
    times: dict[str, list[float]] = {"first": [], "access_change": [], "unchanged": []}
    calls: dict[str, int] = {}
    embedded: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="es-rag-access-") as tmp:
        path = write_document(Path(tmp), args.sections)
        acls = [make_acl("acme", allow=["group:a"]), make_acl("acme", allow=["group:b"])]
        made: list[Ingestor] = []

        def fresh() -> Ingestor:
            s = base.model_copy(update={"index": f"bench-acl-{os.getpid()}-{len(made)}"})
            ingestor = Ingestor(s, embedder=embedder)
            made.append(ingestor)
            return ingestor

        def timed(kind: str, ingestor: Ingestor, acl_index: int) -> str:
            before, texts = embedder.calls, embedder.texts
            t0 = time.perf_counter()
            (result,) = ingestor.ingest_paths([path], acl=acls[acl_index])
            times[kind].append(time.perf_counter() - t0)
            calls[kind] = embedder.calls - before
            embedded[kind] = embedder.texts - texts
            return f"{result.status}/{result.reason}"

        try:
            main = fresh()
            outcomes = {"first": timed("first", main, 0)}
            for r in range(args.repeat):
                outcomes["access_change"] = timed("access_change", main, (r + 1) % 2)
                outcomes["unchanged"] = timed("unchanged", main, (r + 1) % 2)
                outcomes["first"] = timed("first", fresh(), 0)
        finally:
            for ingestor in made:
                drop_index(ingestor)
    median = {k: statistics.median(v) for k, v in times.items()}
    return {
        "benchmark": "access-change",
        "sections": args.sections,
        "seconds_median": {k: round(v, 3) for k, v in median.items()},
        "ratio_to_first": {k: round(v / median["first"], 3) for k, v in median.items()},
        "embedding_calls": calls,
        "texts_embedded": embedded,
        "outcomes": outcomes,
        "repeat": args.repeat,
        "load_average": load_average(),
        "model": model,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--es-url", default=os.environ.get("ES_RAG_ES_URL"))
    parser.add_argument("--port", type=int, default=9281, help="throwaway server's port")
    parser.add_argument("--sections", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(with_server(args, lambda url: run(args, url)), indent=2))


if __name__ == "__main__":
    main()
