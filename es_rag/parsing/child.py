"""The parse itself, in the sandboxed child: every byte of the file is read here.

Per format (Unstructured 0.27): PDF with a text layer uses the ``fast`` strategy; a PDF
without one, and images, are OCRed (es_rag.parsing.ocr); DOCX, PPTX (speaker notes kept,
after their slide), XLSX (a table per sheet, headed by the sheet's name), CSV/TSV, HTML
(``<header>``/``<footer>``/``<nav>`` left out), Markdown, plain text and EML (subject as
title, sender and recipients kept) use their Unstructured partitioners. The warm-ups run
in the sandbox's server before it forks, so that children share the loaded libraries.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from es_rag import detect
from es_rag.errors import (
    ConfigurationError,
    CorruptDocumentError,
    DocumentTooLargeError,
    EmptyDocumentError,
    EncryptedDocumentError,
    ParseLimitError,
    UnsupportedFormatError,
)
from es_rag.parsing.common import ParsedFile, ParseOptions, to_elements
from es_rag.parsing.ocr import image_file, ocr, ocr_languages, pdf_pages
from es_rag.types import Element


def _warm_nlp() -> None:
    """Load what every partitioner loads lazily on first use (spaCy, language profiles)."""
    from unstructured.partition.text import partition_text

    partition_text(text="Warm-up Title\n\nA first sentence for the parser. 一个中文句子。")


def warm_pdf() -> None:
    import pypdfium2  # noqa: F401
    import unstructured.partition.pdf
    import unstructured.partition.text  # noqa: F401

    _warm_nlp()


def warm_image() -> None:
    import PIL.Image  # noqa: F401
    import unstructured.partition.text  # noqa: F401
    import unstructured_pytesseract  # noqa: F401

    _warm_nlp()


def warm_office() -> None:
    import msoffcrypto  # noqa: F401
    import unstructured.partition.docx
    import unstructured.partition.pptx
    import unstructured.partition.xlsx  # noqa: F401

    _warm_nlp()


def warm_text() -> None:
    import unstructured.partition.csv
    import unstructured.partition.email
    import unstructured.partition.html
    import unstructured.partition.md
    import unstructured.partition.text  # noqa: F401

    _warm_nlp()


def partition_file(path: str, sniffed: str, options: ParseOptions) -> ParsedFile:
    """Parse one file (runs in the sandbox child: every byte of the file is read here)."""
    from unstructured.errors import DecompressedSizeExceededError, UnprocessableEntityError

    mime = detect.resolve(path, sniffed, max_unzipped_bytes=options.max_unzipped_bytes)
    try:
        return _PARTITIONERS[mime](path, options)
    except RuntimeError as exc:
        if "spaCy model" in str(exc):
            raise ConfigurationError(
                "Unstructured needs spaCy's en_core_web_sm, which is not installed here "
                "(and cannot be downloaded): run scripts/setup.sh, see the README"
            ) from exc
        raise
    except DecompressedSizeExceededError as exc:
        raise DocumentTooLargeError(f"over the parser's decompressed-size limit: {exc}") from None
    except UnprocessableEntityError as exc:
        message = str(exc)
        if "exceeds the maximum" in message:
            raise DocumentTooLargeError(message) from None
        if "password" in message.lower():
            raise EncryptedDocumentError(message) from None
        raise CorruptDocumentError(message) from None


def _ooxml_title(path: str) -> str | None:
    """``dc:title`` from an OOXML package's core properties."""
    import zipfile

    from lxml import etree

    try:
        with zipfile.ZipFile(path) as archive:
            if "docProps/core.xml" not in archive.namelist():
                return None
            root = etree.fromstring(archive.read("docProps/core.xml"))
    except Exception:
        return None
    for el in root.iter("{http://purl.org/dc/elements/1.1/}title"):
        return (el.text or "").strip() or None
    return None


def _docx(path: str, options: ParseOptions) -> ParsedFile:
    from unstructured.partition.docx import partition_docx

    raw = partition_docx(filename=path, infer_table_structure=True)
    return ParsedFile(mime=detect.DOCX, elements=to_elements(raw), title=_ooxml_title(path))


def _pptx(path: str, options: ParseOptions) -> ParsedFile:
    from pptx import Presentation
    from unstructured.partition.pptx import partition_pptx

    raw = to_elements(
        partition_pptx(filename=path, include_slide_notes=False, infer_table_structure=True)
    )
    # A slide's heading is its title; Unstructured also guesses "titles" among the bullets.
    seen: set[int | None] = set()
    for i, el in enumerate(raw):
        if el.kind == "title":
            if el.page in seen:
                raw[i] = replace(el, kind="text", level=None)
            seen.add(el.page)
    # Unstructured puts a slide's notes before its title; they belong after its content.
    notes: dict[int, Element] = {}
    slides = Presentation(path).slides
    for number, slide in enumerate(slides, start=1):
        if slide.has_notes_slide:
            text = slide.notes_slide.notes_text_frame.text.strip()
            if text:
                notes[number] = Element(kind="notes", text=text, page=number)
    out: list[Element] = []
    current: int | None = None
    for el in raw:
        if el.page is not None and el.page != current:
            if current in notes:
                out.append(notes.pop(current))
            current = el.page
        out.append(el)
    out += [notes[n] for n in sorted(notes)]
    return ParsedFile(mime=detect.PPTX, elements=out, title=_ooxml_title(path), pages=len(slides))


def _xlsx(path: str, options: ParseOptions) -> ParsedFile:
    from unstructured.partition.xlsx import partition_xlsx

    out: list[Element] = []
    for item in partition_xlsx(filename=path, find_subtable=False, infer_table_structure=True):
        name = getattr(item.metadata, "page_name", None)
        page = getattr(item.metadata, "page_number", None)
        if name and not any(e.kind == "title" and e.page == page for e in out):
            out.append(Element(kind="title", text=str(name), level=1, page=page))
        out += to_elements([item])
    return ParsedFile(mime=detect.XLSX, elements=out, title=_ooxml_title(path))


def _csv(path: str, options: ParseOptions) -> ParsedFile:
    from unstructured.partition.csv import partition_csv

    mime = detect.TSV if path.lower().endswith((".tsv", ".tab")) else detect.CSV
    kwargs: dict[str, Any] = {"delimiter": "\t"} if mime == detect.TSV else {}
    _, encoding = _decoded(path)
    raw = partition_csv(filename=path, encoding=encoding, infer_table_structure=True, **kwargs)
    return ParsedFile(mime=mime, elements=to_elements(raw))


def _html_title(path: str) -> str | None:
    from lxml import html as lxml_html

    try:
        with open(path, "rb") as fh:
            root = lxml_html.fromstring(fh.read(256 * 1024))
        title = root.findtext(".//title")
    except Exception:
        return None
    return title.strip() if title else None


_TAG = re.compile(rb"<(/?)([A-Za-z][A-Za-z0-9:-]*)[^>]*?(/?)>")
# Void elements never nest; elements whose end tag HTML lets one omit (<p>, <li>, <td>…)
# would look ever deeper when it is omitted, so neither counts.
_FLAT = frozenset(
    b"area base br col embed hr img input link meta param source track wbr "
    b"p li dt dd td th tr thead tbody tfoot colgroup caption option optgroup rp rt".split()
)
MAX_HTML_DEPTH = 250  # libxml2, under Unstructured, drops what lies deeper than 255


def _html_depth(data: bytes) -> int:
    depth = deepest = 0
    for close, name, selfclose in _TAG.findall(data):
        if name.lower() in _FLAT or selfclose:
            continue
        depth = max(0, depth - 1) if close else depth + 1
        deepest = max(deepest, depth)
    return deepest


def _check_depth(html: bytes) -> None:
    depth = _html_depth(html)
    if depth > MAX_HTML_DEPTH:
        # The parser would silently drop everything below its depth limit.
        raise ParseLimitError(
            f"the document nests {depth:,} elements deep; the parser reads {MAX_HTML_DEPTH}",
            limit="depth",
        )


def _html(path: str, options: ParseOptions) -> ParsedFile:
    from unstructured.partition.html import partition_html

    _check_depth(Path(path).read_bytes())
    raw = partition_html(filename=path, skip_headers_and_footers=True)
    return ParsedFile(mime=detect.HTML, elements=to_elements(raw), title=_html_title(path))


def _markdown(path: str, options: ParseOptions) -> ParsedFile:
    import markdown
    from unstructured.partition.md import partition_md

    text, _ = _decoded(path)
    # Markdown nests too (block quotes, lists), and becomes HTML before it is parsed.
    _check_depth(markdown.markdown(text, extensions=["tables", "fenced_code"]).encode())
    return ParsedFile(mime=detect.MARKDOWN, elements=to_elements(partition_md(text=text)))


def _text(path: str, options: ParseOptions) -> ParsedFile:
    from unstructured.partition.text import partition_text

    text, _ = _decoded(path)
    raw = partition_text(text=text)
    return ParsedFile(mime=detect.TEXT, elements=to_elements(raw))


def _decoded(path: str) -> tuple[str, str]:
    """The whole file as text, and its encoding: UTF-8, or UTF-16 with a byte-order mark.

    The sniff saw only the head; a bad byte further on is the same error. Other encodings
    are refused rather than guessed (a wrong guess indexes mojibake).
    """
    data = Path(path).read_bytes()
    encoding = "utf-16" if data.startswith((b"\xff\xfe", b"\xfe\xff")) else "utf-8-sig"
    try:
        return data.decode(encoding), encoding
    except UnicodeDecodeError as exc:
        raise UnsupportedFormatError(
            f"not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8"
        ) from None


def _email(path: str, options: ParseOptions) -> ParsedFile:
    from unstructured.partition.email import partition_email

    raw = partition_email(filename=path, process_attachments=False)
    elements = to_elements(raw)
    subject = None
    if raw:
        meta = raw[0].metadata
        subject = getattr(meta, "subject", None)
        people = []
        for label, attr in (("From", "sent_from"), ("To", "sent_to"), ("Cc", "cc_recipient")):
            value = getattr(meta, attr, None)
            if value:
                people.append(f"{label}: {', '.join(value)}")
        if people:
            elements.insert(0, Element(kind="text", text="; ".join(people) + "."))
    return ParsedFile(mime=detect.EMAIL, elements=elements, title=subject)


def _pdf(path: str, options: ParseOptions) -> ParsedFile:
    import pypdfium2

    try:
        pdf = pypdfium2.PdfDocument(path)
    except pypdfium2.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise EncryptedDocumentError("a password-protected PDF; remove the password") from None
        raise CorruptDocumentError(f"a damaged PDF: {exc}") from None
    try:
        pages = len(pdf)
        title = (pdf.get_metadata_dict().get("Title") or "").strip() or None
        if pages == 0:
            raise CorruptDocumentError("a PDF without pages")
        has_text = _pdf_has_text(pdf)
    finally:
        pdf.close()
    elements: list[Element] = []
    if options.pdf_strategy != "ocr_only" and has_text:
        from unstructured.partition.pdf import partition_pdf

        raw = partition_pdf(
            filename=path, strategy="fast", languages=list(ocr_languages(options) or ["eng"])
        )
        elements = to_elements(raw)
        if not any(e.text.strip() for e in elements):
            # Unstructured returns nothing, silently, when a piece it needs is missing.
            raise CorruptDocumentError(
                "the PDF has a text layer but the parser extracted no text from it "
                + ("(pikepdf is not installed)" if not _has("pikepdf") else "(damaged?)")
            )
        return ParsedFile(mime=detect.PDF, elements=elements, title=title, pages=pages)
    if options.pdf_strategy == "fast" or not options.ocr:
        raise EmptyDocumentError(
            "the PDF has no text layer (a scan?): it needs OCR, which is off "
            "(ES_RAG_OCR=true with tesseract-ocr installed)",
            needs_ocr=True,
        )
    return ParsedFile(
        mime=detect.PDF,
        elements=ocr(pdf_pages(path, options.ocr_dpi), options),
        title=title,
        pages=pages,
        ocr=True,
    )


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _pdf_has_text(pdf: Any) -> bool:
    for index in range(len(pdf)):
        page = pdf[index]
        try:
            textpage = page.get_textpage()
            try:
                if textpage.get_text_range().strip():
                    return True
            finally:
                textpage.close()
        finally:
            page.close()
    return False


_PARTITIONERS: dict[str, Callable[[str, ParseOptions], ParsedFile]] = {
    detect.PDF: _pdf,
    detect.DOCX: _docx,
    detect.PPTX: _pptx,
    detect.XLSX: _xlsx,
    detect.CSV: _csv,
    detect.TSV: _csv,
    detect.HTML: _html,
    detect.MARKDOWN: _markdown,
    detect.TEXT: _text,
    detect.EMAIL: _email,
    # The type was sniffed already: each image type gets it rather than reading the file again.
    **{mime: partial(image_file, mime=mime) for mime in detect.IMAGES},
}
