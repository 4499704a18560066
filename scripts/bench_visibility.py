"""What the refresh before every row lookup costs (es_rag.pipeline.Ingestor._see_writes).

    python scripts/bench_visibility.py --es-url URL [--rounds 8] [--docs 50]

Ingests Cranfield abstracts (one chunk each) into a throwaway index, in rounds that run
both sides one after the other (the order turning every round): with the refresh, as
es-rag runs, and without it (the lookups then miss what the last second wrote, so this
side is only a yardstick). Each side ingests ``--docs`` documents one ``Ingestor.ingest``
call at a time, then ``--docs`` more in one ``ingest_many`` call. Prints one JSON object:
documents/s per side and shape (median of the rounds) and the ratios with/without.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from es_rag.acl import make_acl
from es_rag.config import Settings
from es_rag.pipeline import Ingestor
from es_rag.types import Document

ACL = make_acl("bench", allow=["group:bench"])
CRANFIELD = Path(__file__).resolve().parents[2] / "shared" / "data" / "cranfield" / "cran.all.1400"


def abstracts(path: Path) -> list[str]:
    raw = path.read_text(encoding="utf-8", errors="replace")
    texts = (part.split(".W", 1)[-1].strip() for part in raw.split(".I ")[1:])
    return [t[:600] for t in texts if len(t) > 40]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--es-url", required=True)
    ap.add_argument("--data", type=Path, default=CRANFIELD)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--docs", type=int, default=50)
    args = ap.parse_args()

    texts = abstracts(args.data)
    index = f"bench-visibility-{int(time.time())}"
    ingestor = Ingestor(Settings(es_url=args.es_url, index=index))
    ingestor.init_index()
    ingestor.ingest(Document(doc_id="warm", text=texts[0], acl=ACL), refresh=True)
    real = Ingestor._see_writes
    rates: dict[str, dict[str, list[float]]] = {
        side: {"one call a document": [], "one call": []} for side in ("with", "without")
    }
    n = 0

    def docs() -> list[Document]:
        nonlocal n
        out = [
            Document(doc_id=f"d{n + i}", text=texts[(n + i) % len(texts)], acl=ACL)
            for i in range(args.docs)
        ]
        n += args.docs
        return out

    try:
        for rnd in range(args.rounds):
            for side in ("with", "without") if rnd % 2 == 0 else ("without", "with"):
                skip: Any = real if side == "with" else (lambda self, names: None)
                Ingestor._see_writes = skip  # type: ignore[method-assign]
                batch = docs()
                t0 = time.perf_counter()
                for doc in batch:
                    ingestor.ingest(doc)
                rates[side]["one call a document"].append(len(batch) / (time.perf_counter() - t0))
                batch = docs()
                t0 = time.perf_counter()
                ingestor.ingest_many(batch)
                rates[side]["one call"].append(len(batch) / (time.perf_counter() - t0))
    finally:
        Ingestor._see_writes = real  # type: ignore[method-assign]
        ingestor.engine.delete_index(ingestor.index.concrete_indices()[-1])
    medians = {
        side: {shape: round(statistics.median(v), 1) for shape, v in by.items()}
        for side, by in rates.items()
    }
    print(
        json.dumps(
            {
                "docs_per_s_median": medians,
                "with_over_without": {
                    shape: round(medians["with"][shape] / medians["without"][shape], 3)
                    for shape in medians["with"]
                },
                "rounds": args.rounds,
                "docs_per_round": args.docs,
            }
        )
    )


if __name__ == "__main__":
    main()
