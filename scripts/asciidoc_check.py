"""es-rag's AsciiDoc reader against the HTML that AsciiDoc made of the same sources.

    python scripts/asciidoc_check.py [FOLDER] [--details]

FOLDER holds AsciiDoc sources with their HTML rendering beside them (``x.txt`` or
``x.adoc`` and ``x.html``); by default Debian's git-doc, downloaded with ``apt-get
download`` into ``ES_RAG_DEBIAN_DOCS``. For every source that es-rag reads as AsciiDoc and
that includes no other file (``include::`` is not followed), compares its headings, in
order (es_rag.headings.heading_key), with the HTML's ``h1``-``h6`` read with lxml, once as
es-rag reads the file now and once as plain text (how it read before AsciiDoc was
recognised). ``markup_titles`` counts headings that are AsciiDoc markup (an anchor, an
attribute entry or reference, a block attribute line, a labelled-list term). Prints one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

from es_rag import detect
from es_rag.config import Settings
from es_rag.headings import heading_key
from es_rag.parsing import Parser, cleaned
from es_rag.parsing.child import partition_file
from es_rag.structure_check import debian_package, html_headings

_MARKUP = re.compile(r"\[\[|\{\w[\w-]*\}|^:\w|::$|^\[")
DEBIAN = Path(os.environ.get("ES_RAG_DEBIAN_DOCS", Path.home() / ".cache/es-rag/debian-docs"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", type=Path)
    ap.add_argument("--details", action="store_true", help="list the pages that differ")
    args = ap.parse_args()
    root = args.folder or debian_package(("git-doc",), DEBIAN) / "usr/share/doc/git-doc"
    parser = Parser(Settings())
    pages, same, same_as_text, markup, markup_as_text = 0, 0, 0, 0, 0
    differ = []
    try:
        for source in sorted(p for p in root.rglob("*") if p.suffix in {".txt", ".adoc"}):
            data = source.read_bytes()
            html = source.with_suffix(".html")
            sniffed = detect.sniff(data[: detect.SNIFF_BYTES], name=source.name, size=len(data))
            if sniffed != detect.ASCIIDOC or not html.exists():
                continue
            if re.search(rb"^include::", data, re.M):
                continue
            theirs = [
                heading_key(re.sub(r" Manual Page$", "", h))
                for h in html_headings(html.read_bytes())
            ]
            ours = [e.text for e in parser.parse(source).elements if e.kind == "title"]
            as_text = cleaned(partition_file(str(source), detect.TEXT, parser.options))
            before = [e.text for e in as_text if e.kind == "title"]
            pages += 1
            if [heading_key(t) for t in ours] == theirs:
                same += 1
            else:
                differ.append(str(source.relative_to(root)))
            same_as_text += [heading_key(t) for t in before] == theirs
            markup += sum(bool(_MARKUP.search(t)) for t in ours)
            markup_as_text += sum(bool(_MARKUP.search(t)) for t in before)
    finally:
        parser.close()
    result = {
        "check": "asciidoc",
        "folder": str(root),
        "pages": pages,
        "same_headings": same,
        "same_headings_read_as_text": same_as_text,
        "markup_titles": markup,
        "markup_titles_read_as_text": markup_as_text,
    }
    if args.details:
        result["differ"] = differ
    print(json.dumps(result))


if __name__ == "__main__":
    main()
