"""What the parser makes of files: element kinds and the losses a reader would notice.

    python scripts/parse_stats.py FILE_OR_FOLDER... [--output stats.json]

For each file es-rag parses (the real Parser: sandbox, Unstructured, cleaning), one JSON
row: the element kinds, code blocks that kept an indented line, RTF control words left in
the text (``\\par``, ``\\f0``: markup indexed as words), and for text formats the ``*``
characters of the source against those of the parsed text (a bullet marker is dropped on
purpose; an asterisk inside a line should not be). Run it from another checkout with
``PYTHONPATH=that/checkout`` to compare parser versions on the same files
(``parser_version`` is in the output).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from es_rag.config import Settings
from es_rag.errors import EsRagError
from es_rag.parsing import Parser, parser_version

_CONTROL_WORD = re.compile(r"\\[a-z]{2,}-?\d*")
_TEXT_SUFFIXES = {".txt", ".text", ".md", ".eml", ".csv", ".tsv", ""}


def stats(parser: Parser, path: Path) -> dict[str, Any]:
    try:
        parsed = parser.parse(path)
    except EsRagError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    text = "\n".join(el.text for el in parsed.elements)
    kinds: dict[str, int] = {}
    for el in parsed.elements:
        kinds[el.kind] = kinds.get(el.kind, 0) + 1
    row: dict[str, Any] = {
        "mime": parsed.mime,
        "title": parsed.title,
        "kinds": kinds,
        "indented_code_blocks": sum(
            el.kind == "code" and bool(re.search(r"^[ \t]+\S", el.text, re.M))
            for el in parsed.elements
        ),
        "rtf_control_words": len(_CONTROL_WORD.findall(text)),
    }
    if path.suffix.lower() in _TEXT_SUFFIXES:
        source = path.read_bytes().decode("utf-8", "replace")
        row["asterisks_source_parsed"] = [source.count("*"), text.count("*")]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--output", type=Path)
    args = ap.parse_args()
    files = sorted(
        f for p in args.paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file()
    )
    parser = Parser(Settings())
    try:
        out = {
            "parser_version": parser_version(),
            "files": {str(f): stats(parser, f) for f in files},
        }
    finally:
        parser.close()
    text = json.dumps(out, ensure_ascii=False, indent=2)
    if args.output:
        args.output.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
