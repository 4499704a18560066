#!/usr/bin/env python3
"""Title paths on real documents nobody here wrote, measured against the documents' own
outlines and headings (es_rag.structure_check).

    python scripts/eval_structure.py [--cache DIR] [--only NAME] [--markdown]
    python scripts/eval_structure.py --word-margins      # pdfminer's word_margin, measured

Downloads Debian documentation packages with ``apt-get download`` (cached under
``~/.cache/es-rag/debian-docs``): the C++ Annotations book (LaTeX, 1,151 pages, with a
bookmark outline), the Auto Multiple Choice manual (DocBook through LaTeX, English and its
Japanese translation), the Gri manual (Texinfo), pages of the Python 3 library reference
(Sphinx HTML) and of MkDocs' user guide (MkDocs HTML). Each file
goes through es-rag's own parser (the sandbox, the default settings) and chunker, as
``es-rag ingest`` would send it; one JSON line per document, then a Markdown table with
``--markdown``. Parsing the book takes about two minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from es_rag.chunking import chunk_elements
from es_rag.config import Settings
from es_rag.parsing import Parser
from es_rag.structure_check import (
    StructureReport,
    debian_package,
    html_headings,
    html_report,
    pdf_report,
    pdf_text,
)

PYTHON_DOC = ("python3.11-doc", "python3.13-doc", "python3.12-doc")
AMC = "usr/share/doc/auto-multiple-choice"
# (name, Debian package candidates, path inside the package)
PDFS = [
    ("cplusplus.pdf", ("c++-annotations-pdf",), "usr/share/doc/c++-annotations/cplusplus.pdf"),
    (
        "auto-multiple-choice.en.pdf",
        ("auto-multiple-choice-doc-pdf",),
        f"{AMC}/auto-multiple-choice.en.pdf",
    ),
    (
        "auto-multiple-choice.ja.pdf",
        ("auto-multiple-choice-doc-pdf",),
        f"{AMC}/auto-multiple-choice.ja.pdf",
    ),
    ("gri.pdf", ("gri-pdf-doc",), "usr/share/doc/gri/gri.pdf.gz"),
]
# (Debian package candidates, glob of a page inside it): Sphinx (Python's library
# reference) and MkDocs (MkDocs' own user guide).
HTML_PAGES = [
    *(
        (PYTHON_DOC, f"usr/share/doc/python3*/html/library/{page}")
        for page in ("json.html", "argparse.html", "functools.html", "sqlite3.html", "os.path.html")
    ),
    (("mkdocs-doc",), "usr/share/doc/mkdocs/html/user-guide/configuration.html"),
    (("mkdocs-doc",), "usr/share/doc/mkdocs/html/user-guide/writing-your-docs.html"),
]
DEFAULT_CACHE = Path.home() / ".cache" / "es-rag" / "debian-docs"


def unpacked(path: Path) -> Path:
    """A gzipped document (Debian compresses large ones) next to itself, once."""
    if path.suffix != ".gz":
        return path
    import gzip
    import shutil

    plain = path.with_suffix("")
    if not plain.exists():
        with gzip.open(path) as fin, plain.open("wb") as fout:
            shutil.copyfileobj(fin, fout)
    return plain


def chunks_of(settings: Settings, elements: list, title: str) -> list:
    return chunk_elements(
        elements,
        title=title,
        size=settings.chunk_size,
        overlap=settings.chunk_overlap,
        parent_size=settings.parent_chunk_size,
    )


def evaluate(cache: Path, only: str | None = None) -> list[StructureReport]:
    settings = Settings()
    parser = Parser(settings)
    reports: list[StructureReport] = []
    try:
        for name, packages, inner in PDFS:
            if only and only not in name:
                continue
            path = unpacked(debian_package(packages, cache) / inner)
            t0 = time.perf_counter()
            parsed = parser.parse(path)
            title = parsed.title or path.stem
            chunks = chunks_of(settings, parsed.elements, title)
            text = pdf_text(path, parsed.outline)
            report = pdf_report(name, title, parsed.pages, parsed.outline, chunks, text)
            print(json.dumps({**report.to_dict(), "seconds": round(time.perf_counter() - t0, 1)}))
            reports.append(report)
        for packages, pattern in HTML_PAGES:
            page = pattern.rsplit("/", 1)[-1]
            if only and only not in page:
                continue
            path = next(debian_package(packages, cache).glob(pattern))
            parsed = parser.parse(path)
            title = parsed.title or path.stem
            report = html_report(
                f"{packages[0].split('.')[0]}: {page}",
                title,
                html_headings(path.read_bytes()),
                chunks_of(settings, parsed.elements, title),
            )
            print(json.dumps(report.to_dict()))
            reports.append(report)
    finally:
        parser.close()
    return reports


def markdown(reports: list[StructureReport]) -> str:
    rows = [
        "| document | title | pages | headings | children | covered | code in paths "
        "| running headers | parents/child | TOC/index children |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in reports:
        rows.append(
            f"| {r.document} | {r.title} | {r.pages or ''} | {r.headings} | {r.children} "
            f"| {r.covered:.1%} | {r.code_elements} | {r.running_header_share:.1%} "
            f"| {r.parents_per_child:.2f} | {r.navigation_children} |"
        )
    return "\n".join(rows)


# (package candidates, file inside, 0-based pages) for the word_margin study: two parts of
# the book, a 1990s pdfTeX manual, a DocBook reference, the Gri manual, AMC in French and
# Japanese.
MARGIN_SAMPLES = [
    (("c++-annotations-pdf",), "usr/share/doc/c++-annotations/cplusplus.pdf", range(100, 150)),
    (("c++-annotations-pdf",), "usr/share/doc/c++-annotations/cplusplus.pdf", range(600, 650)),
    (("camlidl-doc",), "usr/share/doc/camlidl/camlidl-1.04.doc.pdf", range(0, 26)),
    (
        ("docbook-xsl-doc-pdf",),
        "usr/share/doc/docbook-xsl-doc-pdf/doc/reference.pdf.gz",
        range(0, 50),
    ),
    (("gri-pdf-doc",), "usr/share/doc/gri/gri.pdf.gz", range(30, 80)),
    (("auto-multiple-choice-doc-pdf",), f"{AMC}/auto-multiple-choice.fr.pdf", range(10, 60)),
    (("auto-multiple-choice-doc-pdf",), f"{AMC}/auto-multiple-choice.ja.pdf", range(10, 40)),
]


def word_margins(cache: Path, margins: tuple[float, ...] = (0.185, 0.1, 0.05)) -> None:
    """Words that pdfminer glues (pdfium reads two) or splits (pdfium reads one), per
    sample and ``word_margin`` (Unstructured's default is 0.185, pdfminer's own 0.1)."""
    import shutil
    import tempfile

    import pypdfium2
    from unstructured.partition.pdf import partition_pdf

    from es_rag.cleaning import page_words
    from es_rag.structure_check import _UNSPACED, _WORDS

    work = Path(tempfile.mkdtemp(prefix="es-rag-margins-"))
    try:
        for packages, inner, pages in MARGIN_SAMPLES:
            source = unpacked(debian_package(packages, cache) / inner)
            sample = work / f"{source.stem}-{pages.start}.pdf"
            pdf = pypdfium2.PdfDocument(str(source))
            new = pypdfium2.PdfDocument.new()
            new.import_pages(pdf, list(pages))
            new.save(str(sample))
            new.close()
            words = {}
            for i in range(len(new := pypdfium2.PdfDocument(str(sample)))):
                textpage = new[i].get_textpage()
                words[i + 1] = page_words(textpage.get_text_range())
                textpage.close()
            new.close()
            pdf.close()
            for margin in margins:
                total = glued = split = 0
                for el in partition_pdf(
                    filename=str(sample), strategy="fast", pdfminer_word_margin=margin
                ):
                    known = words.get(el.metadata.page_number, set())
                    tokens = [
                        w.casefold() for w in _WORDS.findall(el.text) if not _UNSPACED.search(w)
                    ]
                    for j, t in enumerate(tokens):
                        total += 1
                        if t in known:
                            continue
                        if j + 1 < len(tokens) and t + tokens[j + 1] in known:
                            split += 1
                        elif len(t) >= 5 and any(
                            t[:k] in known and t[k:] in known for k in range(2, len(t) - 1)
                        ):
                            glued += 1
                row = {"sample": sample.name, "pages": len(pages), "word_margin": margin}
                print(json.dumps({**row, "words": total, "glued": glued, "split": split}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--only", help="only documents whose name contains this")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table too")
    ap.add_argument(
        "--word-margins", action="store_true", help="measure pdfminer's word_margin instead"
    )
    args = ap.parse_args()
    if args.word_margins:
        word_margins(args.cache)
        return 0
    reports = evaluate(args.cache, args.only)
    if args.markdown:
        print(markdown(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
