"""es-rag's OpenDocument reader against odfpy's text extraction, file by file.

    python scripts/opendoc_check.py FOLDER [--output FILE]

For every ``.odt``, ``.ods`` and ``.odp`` file in FOLDER, parses it with es-rag's real
parser (the sandbox, default settings) and extracts the text of every paragraph and
heading with odfpy (``teletype.extractText``), an independent reader of the same XML, then
compares the two as bags of words (``\\w+``, lower-cased): ``recall`` is the share of
odfpy's words es-rag found, ``precision`` the share of es-rag's words odfpy found too.
odfpy refuses files that declare XML entities (``reference: null``). Prints one JSON
object per file, then a summary. The odfpy sources ship OpenOffice, LibreOffice and
KSpread files in their tests (``pip download --no-deps odfpy``), a real corpus for this.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

from es_rag.config import Settings
from es_rag.errors import InputError
from es_rag.parsing import Parser

_WORD = re.compile(r"\w+")


def words(text: str) -> Counter[str]:
    return Counter(_WORD.findall(text.lower()))


def reference(path: Path) -> Counter[str] | None:
    from odf import teletype
    from odf import text as odf_text
    from odf.opendocument import load

    try:
        doc = load(str(path))
    except Exception:  # odfpy's defusedxml refuses entity declarations
        return None
    found = doc.body.getElementsByType(odf_text.P) + doc.body.getElementsByType(odf_text.H)
    return words(" ".join(teletype.extractText(el) for el in found))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    reader = Parser(Settings())
    rows = []
    try:
        for path in sorted(args.folder.iterdir()):
            if path.suffix.lower() not in (".odt", ".ods", ".odp"):
                continue
            row: dict[str, object] = {"file": path.name}
            ref = reference(path)
            try:
                parsed = reader.parse(path)
            except InputError as exc:
                row.update(error=f"{type(exc).__name__}: {exc}")
                rows.append(row)
                print(json.dumps(row, ensure_ascii=False))
                continue
            mine = words(parsed.text)
            common = sum((mine & ref).values()) if ref is not None else 0
            row.update(
                mime=parsed.mime,
                title=parsed.title,
                elements=dict(Counter(e.kind for e in parsed.elements)),
                words=sum(mine.values()),
                reference=None if ref is None else sum(ref.values()),
                recall=None if not ref else round(common / sum(ref.values()), 3),
                precision=None
                if ref is None or not mine
                else round(common / sum(mine.values()), 3),
            )
            rows.append(row)
            print(json.dumps(row, ensure_ascii=False))
    finally:
        reader.close()
    scored = [r for r in rows if isinstance(r.get("recall"), float)]
    summary = {
        "files": len(rows),
        "errors": sum("error" in r for r in rows),
        "scored": len(scored),
        "recall_min": min((float(r["recall"]) for r in scored), default=None),  # type: ignore[arg-type]
        "words": sum(int(r.get("words", 0)) for r in rows),  # type: ignore[call-overload]
        "reference_words": sum(int(r.get("reference") or 0) for r in rows),  # type: ignore[call-overload]
    }
    print(json.dumps({"summary": summary}))
    if args.output:
        args.output.write_text(json.dumps({"files": rows, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
