"""es-rag's AsciiDoc and reStructuredText readers against the HTML made of the same sources.

    python scripts/markup_check.py [--format asciidoc|rst] [FOLDER] [--details]

AsciiDoc: FOLDER holds sources with their HTML rendering beside them (``x.txt`` or
``x.adoc`` and ``x.html``); by default Debian's git-doc. reStructuredText: FOLDER is a
Sphinx site, whose ``_sources/**/*.rst.txt`` are the sources of its pages; by default
the HTML of Debian's python3.11-doc (or a later one). Packages are downloaded with
``apt-get download`` into ``ES_RAG_DEBIAN_DOCS``. For every source that es-rag reads in
that format and that includes no other file (``include::`` is not followed), compares its
headings, in
order (es_rag.headings.heading_key), with the HTML's ``h1``-``h6`` read with lxml, once as
es-rag reads the file now and once as plain text (how it read before AsciiDoc was
recognised). ``markup_titles`` counts headings that are markup (an anchor, an attribute
entry or reference, a block attribute line, a labelled-list term; a directive or a role).
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from es_rag import detect
from es_rag.config import Settings
from es_rag.errors import InputError
from es_rag.headings import heading_key
from es_rag.parsing import Parser, cleaned
from es_rag.parsing.child import partition_file
from es_rag.structure_check import (
    MARKUP_TITLE,
    beside_html,
    debian_package,
    html_heading_keys,
    read_alone,
    sphinx_sources,
)

PYTHON_DOC = ("python3.11-doc", "python3.13-doc", "python3.12-doc")
DEBIAN = Path(os.environ.get("ES_RAG_DEBIAN_DOCS", Path.home() / ".cache/es-rag/debian-docs"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", type=Path)
    ap.add_argument("--format", choices=("asciidoc", "rst"), default="asciidoc")
    ap.add_argument("--details", action="store_true", help="list the pages that differ")
    args = ap.parse_args()
    if args.format == "rst":
        pairs = sphinx_sources(
            args.folder
            or next(debian_package(PYTHON_DOC, DEBIAN).glob("usr/share/doc/python3.*/html"))
        )
        mime = detect.RST
    else:
        pairs = beside_html(
            args.folder or debian_package(("git-doc",), DEBIAN) / "usr/share/doc/git-doc"
        )
        mime = detect.ASCIIDOC
    parser = Parser(Settings())
    pages, same, same_as_text, markup, markup_as_text = 0, 0, 0, 0, 0
    differ: list[str] = []
    refused: list[str] = []
    try:
        for source, html in read_alone(pairs, mime):
            theirs = html_heading_keys(html)
            try:
                ours = [e.text for e in parser.parse(source).elements if e.kind == "title"]
            except InputError as exc:  # a page of nothing but a toctree, say
                refused.append(f"{source}: {exc}")
                continue
            as_text = cleaned(partition_file(str(source), detect.TEXT, parser.options))
            before = [e.text for e in as_text if e.kind == "title"]
            pages += 1
            if [heading_key(t) for t in ours] == theirs:
                same += 1
            else:
                differ.append(str(source))
            same_as_text += [heading_key(t) for t in before] == theirs
            markup += sum(bool(MARKUP_TITLE.search(t)) for t in ours)
            markup_as_text += sum(bool(MARKUP_TITLE.search(t)) for t in before)
    finally:
        parser.close()
    result = {
        "check": args.format,
        "pages": pages,
        "same_headings": same,
        "same_headings_read_as_text": same_as_text,
        "markup_titles": markup,
        "markup_titles_read_as_text": markup_as_text,
    }
    result["refused"] = len(refused)
    if args.details:
        result["differ"] = differ
        result["refused_pages"] = refused
    print(json.dumps(result))


if __name__ == "__main__":
    main()
