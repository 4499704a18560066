#!/usr/bin/env python3
"""How GNU Info manuals and manual pages read: headings, and markup left in the text.

    python scripts/manual_check.py [--info DIR] [--man DIR] [--sample 300] [--seed 7]

Parses every Info file under ``--info`` (default ``/usr/share/info``) and ``--sample``
manual pages drawn at random from ``--man`` (default ``/usr/share/man``) with es-rag's
``Parser`` (the sandbox, the cleaning: what ingestion reads), and counts per format the
files read, refused and skipped, the headings, and what should never be text: Info node
headers and menu entries outside ``contents``, troff font escapes and macro lines. For
the "before" side, run a copy of it from outside the checkout with ``PYTHONPATH`` set to a
worktree of the older commit. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from es_rag.config import Settings
from es_rag.errors import EsRagError
from es_rag.parsing import Parser

MARKUP = {
    "info": {
        "node_headers": re.compile(r"File: [^,\n]+,\s+Node:"),
        "menu_entries": re.compile(r"\w::(?:\s|$)"),
    },
    "man": {
        "font_escapes": re.compile(r"\\f"),
        "macro_lines": re.compile(r"(?m)^\.[A-Za-z]{1,3}\b"),
    },
}


def measure(parser: Parser, files: list[Path], kind: str) -> dict[str, float]:
    counts: Counter[str] = Counter()
    t0 = time.perf_counter()
    for path in files:
        try:
            parsed = parser.parse(path)
        except EsRagError as exc:
            counts[f"not_read:{type(exc).__name__}"] += 1
            continue
        counts["read"] += 1
        counts["headings"] += sum(e.kind == "title" for e in parsed.elements)
        text = "\n".join(e.text for e in parsed.elements if e.kind != "contents")
        for name, pattern in MARKUP[kind].items():
            counts[name] += len(pattern.findall(text))
    return {**counts, "files": len(files), "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--info", type=Path, default=Path("/usr/share/info"))
    ap.add_argument("--man", type=Path, default=Path("/usr/share/man"))
    ap.add_argument("--sample", type=int, default=300, help="manual pages drawn at random")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    parser = Parser(Settings())
    info = sorted(p for p in args.info.glob("*.info*") if p.is_file())
    pages = sorted(p for p in args.man.glob("man*/*") if p.is_file())
    random.Random(args.seed).shuffle(pages)
    out = {
        "info": measure(parser, info, "info"),
        "man": measure(parser, pages[: args.sample], "man"),
    }
    parser.close()
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
