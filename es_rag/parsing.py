"""Files → es-rag :class:`~es_rag.types.Element` lists, with Unstructured, in a sandbox.

:class:`Parser` is the caller's side: it checks the size, sniffs the type from the bytes
(:mod:`es_rag.detect`), sends the file to a limited child (:mod:`es_rag.sandbox`), cleans
what comes back (:mod:`es_rag.cleaning`) and insists on text: a file that should hold text
but parses to nothing is an error, never an empty success. Everything that reads the
file's bytes with a real parser (:func:`partition_file`) runs in the child.

Per format (Unstructured 0.27): PDF with a text layer uses the ``fast`` strategy; a PDF
without one, and images, are OCRed with Tesseract (see :func:`_ocr`); DOCX, PPTX (speaker
notes kept, after their slide), XLSX (a table per sheet, headed by the sheet's name),
CSV/TSV, HTML (``<header>``/``<footer>``/``<nav>`` left out), Markdown, plain text and EML
(subject as title, sender and recipients kept) use their Unstructured partitioners.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache, partial
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, Literal

from es_rag import detect
from es_rag.cleaning import clean
from es_rag.config import Settings
from es_rag.errors import (
    ConfigurationError,
    CorruptDocumentError,
    DocumentTooLargeError,
    EmptyDocumentError,
    EncryptedDocumentError,
    InputError,
    ParseLimitError,
    UnsupportedFormatError,
)
from es_rag.sandbox import Limits, Sandbox
from es_rag.types import Element

log = logging.getLogger(__name__)

PdfStrategy = Literal["auto", "fast", "ocr_only"]
ES_RAG_PARSING = "1"
# Unstructured must never phone home or print its banner from a worker.
SANDBOX_ENV = {
    "DO_NOT_TRACK": "true",
    "SCARF_NO_ANALYTICS": "true",
    "UNSTRUCTURED_DISABLE_NOTICE": "1",
}
_OCR_DEFAULT = ("eng", "chi_sim", "chi_tra")
MAX_IMAGE_PIXELS = 89_478_485  # Pillow's default (~ a 9,500 x 9,500 image)
_LAYOUT = frozenset({detect.PDF, *detect.IMAGES})
_GUESSED_TITLES = frozenset({detect.PDF, detect.TEXT, detect.EMAIL, *detect.IMAGES})
_JUNK_TITLE = re.compile(
    r"^(untitled|microsoft (word|powerpoint|excel) - .*|powerpoint presentation|"
    r"document\d*|slide \d+|presentation\d*|book\d*|sheet\d*)$",
    re.IGNORECASE,
)


@cache
def parser_version() -> str:
    """Goes into every row and the index's _meta: a new parser can mean new chunks."""
    try:
        unstructured = importlib_metadata.version("unstructured")
    except importlib_metadata.PackageNotFoundError:  # pragma: no cover - it is a dependency
        unstructured = "absent"
    return f"unstructured-{unstructured}+es-rag-{ES_RAG_PARSING}"


@dataclass(frozen=True)
class ParseOptions:
    """What the child needs to know; plain values, so it pickles."""

    pdf_strategy: PdfStrategy = "auto"
    ocr: bool = True
    ocr_languages: tuple[str, ...] = ()  # Tesseract codes; (): eng/chi_sim/chi_tra if installed
    ocr_dpi: int = 300
    max_unzipped_bytes: int = 1 << 30


@dataclass
class ParsedFile:
    """One file's elements in reading order, its type and the title it names itself by."""

    mime: str
    elements: list[Element]
    title: str | None = None
    pages: int | None = None
    ocr: bool = False
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n\n".join(e.text for e in self.elements)


class Parser:
    """Parses files in a sandbox; one per process (the sandbox's server is reused)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.options = ParseOptions(
            pdf_strategy=settings.pdf_strategy,
            ocr=settings.ocr,
            ocr_languages=tuple(x for x in settings.ocr_languages.split("+") if x.strip()),
            ocr_dpi=settings.ocr_dpi,
            max_unzipped_bytes=settings.parse_max_unzipped_mb * 2**20,
        )
        self.sandbox = Sandbox(
            Limits(
                memory_mb=settings.parse_memory_mb,
                cpu_seconds=settings.parse_cpu_seconds,
                wall_seconds=settings.parse_timeout,
            ),
            # Tesseract's OpenMP threads fight each other (and the worker's other parses):
            # one thread per parse ran 6x faster here (1.8 s against 10.3 s for a page).
            env={**SANDBOX_ENV, "OMP_THREAD_LIMIT": os.environ.get("OMP_THREAD_LIMIT", "1")},
        )

    def parse(self, path: str | Path) -> ParsedFile:
        """The file's cleaned elements; raises an ``InputError`` subclass on bad input."""
        path = Path(path)
        mime = self.sniff(path)
        parsed: ParsedFile = self.sandbox.call(
            "es_rag.parsing:partition_file",
            str(path),
            mime,
            self.options,
            warm=f"es_rag.parsing:warm_{_family(mime)}",
        )
        parsed.stats = dataclasses.asdict(self.sandbox.last)
        elements = clean(
            parsed.elements,
            layout=parsed.mime in _LAYOUT or parsed.ocr,
            guessed_titles=parsed.mime in _GUESSED_TITLES or parsed.ocr,
        )
        if not any(e.text.strip() for e in elements):
            raise EmptyDocumentError("empty document: no text to index (only whitespace)")
        parsed.elements = elements
        # A spreadsheet's first heading is its first sheet's name, not the workbook's title.
        opening = elements if parsed.mime != detect.XLSX else []
        parsed.title = _title(parsed.title, opening) or path.stem
        return parsed

    def sniff(self, path: Path) -> str:
        """The type from the first bytes, after the size checks (in this process)."""
        problem = file_problem(path)
        if problem:
            raise InputError(problem)
        try:
            size = path.stat().st_size
            with path.open("rb") as fh:
                head = fh.read(detect.SNIFF_BYTES)
        except OSError as exc:
            raise InputError(f"cannot read the file: {exc.strerror or exc}") from exc
        limit = self.settings.parse_max_mb * 2**20
        if size > limit:
            raise DocumentTooLargeError(
                f"{size / 2**20:,.1f} MB is over the input limit of {self.settings.parse_max_mb} MB"
            )
        mime = detect.sniff(head, name=path.name, size=size)
        text_limit = self.settings.parse_max_text_mb * 2**20
        if mime in detect.TEXT_FAMILY and size > text_limit:
            raise DocumentTooLargeError(
                f"{size / 2**20:,.1f} MB of text is over the limit of "
                f"{self.settings.parse_max_text_mb} MB for text formats"
            )
        return mime

    def close(self) -> None:
        self.sandbox.close()


def file_problem(path: Path) -> str | None:
    """Why ``path`` is not a regular file to parse, or None.

    Checked before it is opened: opening a named pipe would block until someone writes.
    """
    if path.is_symlink():
        try:
            path.resolve(strict=True)
        except RuntimeError:  # Python < 3.13 reports a loop this way
            return "a symbolic link loop"
        except OSError as exc:
            return "a symbolic link loop" if exc.errno == errno.ELOOP else "a broken symbolic link"
        if path.is_dir():
            return "a link to a folder (not followed); give the folder itself"
    if path.is_dir():
        return "a directory, not a file"
    if not path.exists():
        return "no such file or directory"
    if not path.is_file():
        return "not a regular file (a device, socket or pipe)"
    return None


def _family(mime: str) -> str:
    if mime == detect.PDF:
        return "pdf"
    if mime in detect.IMAGES:
        return "image"
    if mime in (detect.ZIP, detect.OLE):
        return "office"
    return "text"


def _title(meta_title: str | None, elements: list[Element]) -> str | None:
    """The file's own title when it is a real one, else a heading that opens the document."""
    if meta_title:
        meta_title = " ".join(meta_title.split())
        if meta_title and not _JUNK_TITLE.match(meta_title):
            return meta_title
    for el in elements[:3]:
        if el.kind == "title" and el.level == 1:  # a declared top heading, not a guess
            return " ".join(el.text.split())
        if el.kind not in ("title", "header"):
            break
    return None


# --- in the child: warm-ups (run by the sandbox server before it forks) ----------------------
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


# --- in the child: the parse itself ----------------------------------------------------------
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


_KINDS: dict[str, str | None] = {
    "Title": "title",
    "NarrativeText": "text",
    "UncategorizedText": "text",
    "Text": "text",
    "Address": "text",
    "EmailAddress": "text",
    "ListItem": "list_item",
    "Table": "table",
    "CodeSnippet": "code",
    "FigureCaption": "caption",
    "Formula": "formula",
    "Image": "image",
    "Picture": "image",
    "Header": "header",
    "Footer": "footer",
    "PageHeader": "header",
    "PageFooter": "footer",
    "PageNumber": "page_number",
    "PageBreak": None,
}


def _elements(raw: list[Any]) -> list[Element]:
    """Unstructured elements → es-rag elements (kinds, heading levels, pages, tables)."""
    out = []
    for item in raw:
        kind = _KINDS.get(item.category, "text")
        if kind is None:
            continue
        meta = item.metadata
        depth = getattr(meta, "category_depth", None)
        coords = getattr(meta, "coordinates", None)
        points = getattr(coords, "points", None) if coords is not None else None
        points = _relative(points, getattr(coords, "system", None))
        out.append(
            Element(
                kind=kind,  # type: ignore[arg-type]
                text=str(item.text or ""),
                level=(depth + 1) if kind == "title" and depth is not None else None,
                page=getattr(meta, "page_number", None),
                html=getattr(meta, "text_as_html", None) if kind == "table" else None,
                coordinates=points,
            )
        )
    return out


def _relative(points: Any, system: Any) -> tuple[tuple[float, float], ...] | None:
    """Points as fractions of the page, (0, 0) top left, whatever system the parser used."""
    width = getattr(system, "width", None)
    height = getattr(system, "height", None)
    if not points or not width or not height:
        return None
    flip = getattr(getattr(system, "orientation", None), "name", "SCREEN") == "CARTESIAN"
    return tuple(
        (float(x) / width, 1.0 - float(y) / height if flip else float(y) / height)
        for x, y in points
    )


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
    return ParsedFile(mime=detect.DOCX, elements=_elements(raw), title=_ooxml_title(path))


def _pptx(path: str, options: ParseOptions) -> ParsedFile:
    from pptx import Presentation
    from unstructured.partition.pptx import partition_pptx

    raw = _elements(
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
        out += _elements([item])
    return ParsedFile(mime=detect.XLSX, elements=out, title=_ooxml_title(path))


def _csv(path: str, options: ParseOptions) -> ParsedFile:
    from unstructured.partition.csv import partition_csv

    mime = detect.TSV if path.lower().endswith((".tsv", ".tab")) else detect.CSV
    kwargs: dict[str, Any] = {"delimiter": "\t"} if mime == detect.TSV else {}
    _, encoding = _decoded(path)
    raw = partition_csv(filename=path, encoding=encoding, infer_table_structure=True, **kwargs)
    return ParsedFile(mime=mime, elements=_elements(raw))


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
    return ParsedFile(mime=detect.HTML, elements=_elements(raw), title=_html_title(path))


def _markdown(path: str, options: ParseOptions) -> ParsedFile:
    import markdown
    from unstructured.partition.md import partition_md

    text, _ = _decoded(path)
    # Markdown nests too (block quotes, lists), and becomes HTML before it is parsed.
    _check_depth(markdown.markdown(text, extensions=["tables", "fenced_code"]).encode())
    return ParsedFile(mime=detect.MARKDOWN, elements=_elements(partition_md(text=text)))


def _text(path: str, options: ParseOptions) -> ParsedFile:
    from unstructured.partition.text import partition_text

    text, _ = _decoded(path)
    raw = partition_text(text=text)
    return ParsedFile(mime=detect.TEXT, elements=_elements(raw))


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
    elements = _elements(raw)
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
            filename=path, strategy="fast", languages=list(_ocr_languages(options) or ["eng"])
        )
        elements = _elements(raw)
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
        elements=_ocr(_pdf_pages(path, options.ocr_dpi), options),
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


def _pdf_pages(path: str, dpi: int) -> Any:
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


def _image(path: str, options: ParseOptions, *, mime: str) -> ParsedFile:
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
    return ParsedFile(mime=mime, elements=_ocr(frames, options), ocr=True)


def _ocr_languages(options: ParseOptions) -> tuple[str, ...]:
    if options.ocr_languages:
        return options.ocr_languages
    return tuple(lang for lang in _OCR_DEFAULT if lang in _installed_languages())


@cache
def _installed_languages() -> frozenset[str]:
    import unstructured_pytesseract

    try:
        return frozenset(unstructured_pytesseract.get_languages(config=""))
    except Exception:  # no tesseract binary
        return frozenset()


def _ocr(pages: Any, options: ParseOptions) -> list[Element]:
    """OCR each page with Tesseract, then classify its paragraphs like plain text.

    Unstructured's own ``ocr_only`` strategy is not used: in 0.27 it matches the words of
    the page text against Tesseract's word boxes by whitespace, and Chinese lines have no
    whitespace, so every Chinese paragraph is dropped (verified). The page text and the
    element heuristics are the same ones it uses.
    """
    import unstructured_pytesseract
    from unstructured.partition.text import element_from_text

    languages = _ocr_languages(options)
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
                out += [replace(e, page=number) for e in _elements([item])]
    return out


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
    **{mime: partial(_image, mime=mime) for mime in detect.IMAGES},
}

# The child inherits the server's environment; make sure a direct call (tests, scripts) is
# just as quiet.
for _key, _value in SANDBOX_ENV.items():
    os.environ.setdefault(_key, _value)
