"""OCR of scans and images with Tesseract (in the sandboxed child).

Pages are rendered with pdfium at the resolution they were scanned at, read with
Unstructured's Tesseract wrapper (eng, chi_sim and chi_tra when installed), and their
paragraphs classified with Unstructured's text rules.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import cache
from typing import Any

from es_rag.errors import (
    ConfigurationError,
    CorruptDocumentError,
    DocumentTooLargeError,
    EmptyDocumentError,
)
from es_rag.parsing.common import ParsedFile, ParseOptions, to_elements
from es_rag.types import Element

OCR_DEFAULT = ("eng", "chi_sim", "chi_tra")
MAX_IMAGE_PIXELS = 89_478_485  # Pillow's default (~ a 9,500 x 9,500 image)


def pdf_pages(path: str, dpi: int) -> Any:
    """(page number, PIL image) for each page, rendered with pdfium.

    A scanned page is rendered at the resolution it was scanned at (its largest image's):
    Tesseract reads an upscaled scan worse, not better (verified: a 200-dpi Chinese scan
    rendered at 300 dpi loses whole lines). Pages without an image use ``dpi``.
    """
    import pypdfium2

    pdf = pypdfium2.PdfDocument(path)
    try:
        for index in range(len(pdf)):
            page = pdf[index]
            try:
                native = _scan_dpi(page)
                scale = (native or dpi) / 72
                yield index + 1, page.render(scale=scale).to_pil()
            finally:
                page.close()
    finally:
        pdf.close()


def _scan_dpi(page: Any) -> float | None:
    """The resolution of the page's largest image, within 150-600 dpi; None without one."""
    import pypdfium2.raw as pdfium_c

    best: tuple[int, float] | None = None
    for obj in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=2):
        try:
            width_px, _ = obj.get_px_size()
            left, _, right, _ = obj.get_bounds()
        except Exception:  # an image pdfium cannot measure: fall back to the default
            continue
        if right - left > 1 and (best is None or width_px > best[0]):
            best = (width_px, width_px / ((right - left) / 72))
    return None if best is None else min(600.0, max(150.0, best[1]))


def image_file(path: str, options: ParseOptions, *, mime: str) -> ParsedFile:
    from PIL import Image, ImageSequence, UnidentifiedImageError

    if not options.ocr:
        raise EmptyDocumentError(
            "an image: its text needs OCR, which is off (ES_RAG_OCR=true)", needs_ocr=True
        )
    # Unstructured's PDF module raises Pillow's pixel limit when it is imported (for its
    # page renders); a parse server that has seen a PDF would pass that on. Images get
    # Pillow's own default back: past twice this many pixels, a decompression bomb.
    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
    try:
        image = Image.open(path)
        image.load()
    except Image.DecompressionBombError as exc:
        raise DocumentTooLargeError(f"an image too large to OCR: {exc}") from None
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise CorruptDocumentError(f"a damaged image: {exc}") from None
    frames = ((n, f.convert("RGB")) for n, f in enumerate(ImageSequence.Iterator(image), 1))
    return ParsedFile(mime=mime, elements=ocr(frames, options), ocr=True)


def ocr_languages(options: ParseOptions) -> tuple[str, ...]:
    if options.ocr_languages:
        return options.ocr_languages
    return tuple(lang for lang in OCR_DEFAULT if lang in _installed_languages())


@cache
def _installed_languages() -> frozenset[str]:
    import unstructured_pytesseract

    try:
        return frozenset(unstructured_pytesseract.get_languages(config=""))
    except Exception:  # no tesseract binary
        return frozenset()


def ocr(pages: Any, options: ParseOptions) -> list[Element]:
    """OCR each page with Tesseract, then classify its paragraphs like plain text.

    Unstructured's own ``ocr_only`` strategy is not used: in 0.27 it matches the words of
    the page text against Tesseract's word boxes by whitespace, and Chinese lines have no
    whitespace, so every Chinese paragraph is dropped (verified). The page text and the
    element heuristics are the same ones it uses.
    """
    import unstructured_pytesseract
    from unstructured.partition.text import element_from_text

    languages = ocr_languages(options)
    if not languages:
        raise EmptyDocumentError(
            "the file needs OCR but Tesseract is not installed (apt-get install tesseract-ocr"
            " tesseract-ocr-chi-sim)",
            needs_ocr=True,
        )
    missing = set(languages) - _installed_languages()
    if missing:
        raise ConfigurationError(
            f"OCR languages not installed for Tesseract: {', '.join(sorted(missing))}"
        )
    out: list[Element] = []
    for number, image in pages:
        text = unstructured_pytesseract.image_to_string(image, lang="+".join(languages))
        for paragraph in re.split(r"\n\s*\n", text):
            if paragraph.strip():
                item = element_from_text(paragraph.strip())
                out += [replace(e, page=number) for e in to_elements([item])]
    return out
