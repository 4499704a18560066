"""What the caller and the sandboxed child share: options in, a parsed file out (both
plain values, so they pickle), and Unstructured's elements turned into es-rag's."""

from __future__ import annotations

import os
import re
import textwrap
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

from es_rag.outline import OutlineEntry
from es_rag.types import Element

PdfStrategy = Literal["auto", "fast", "ocr_only"]
# Unstructured must never phone home or print its banner from a worker.
SANDBOX_ENV = {
    "DO_NOT_TRACK": "true",
    "SCARF_NO_ANALYTICS": "true",
    "UNSTRUCTURED_DISABLE_NOTICE": "1",
}

# Titles that tools write for every file ("Untitled", "Microsoft Word - x.docx"): no title.
JUNK_TITLE = re.compile(
    r"^(untitled|microsoft (word|powerpoint|excel) - .*|powerpoint presentation|"
    r"document\d*|slide \d+|presentation\d*|book\d*|sheet\d*)$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ParseOptions:
    """What the child needs to know; plain values, so it pickles."""

    pdf_strategy: PdfStrategy = "auto"
    ocr: bool = True
    ocr_languages: tuple[str, ...] = ()  # Tesseract codes; (): eng/chi_sim/chi_tra if installed
    ocr_dpi: int = 300
    max_unzipped_bytes: int = 1 << 30
    max_input_bytes: int = 200 << 20  # a document as parsed (inflated, where compressed)
    max_text_bytes: int = 20 << 20  # a text-format document (txt, md, html, csv, eml)
    mail_attachments: bool = True  # read a mail's attachments after its body
    # How deep in attached mails this file is: an attached mail's own attachments are
    # named, not read.
    attachment_depth: int = 0


def check_size(mime: str, size: int, options: ParseOptions) -> None:
    """Refuse a document over the input limit, or a text one over the text limit (text
    costs far more to parse per byte than a PDF or a DOCX)."""
    from es_rag.detect import TEXT_FAMILY
    from es_rag.errors import DocumentTooLargeError

    if size > options.max_input_bytes:
        raise DocumentTooLargeError(
            f"{size / 2**20:,.1f} MB is over the input limit of "
            f"{options.max_input_bytes / 2**20:,.0f} MB"
        )
    if mime in TEXT_FAMILY and size > options.max_text_bytes:
        raise DocumentTooLargeError(
            f"{size / 2**20:,.1f} MB of text is over the limit of "
            f"{options.max_text_bytes / 2**20:,.0f} MB for text formats"
        )


def sniff_file(path: Path, options: ParseOptions) -> str:
    """A file's type from its first bytes and name, after the size checks: the one
    sequence for a file as given (``Parser.sniff``) and for what a gzip file holds (in the
    parse child). ``OSError`` is the caller's to word."""
    from es_rag import detect

    size = path.stat().st_size
    # The input limit first: a file too large to parse is refused whatever it is.
    check_size("", size, options)
    with path.open("rb") as fh:
        head = fh.read(detect.SNIFF_BYTES)
    mime = detect.sniff(head, name=path.name, size=size)
    check_size(mime, size, options)
    return mime


@dataclass
class ParsedFile:
    """One file's elements in reading order, its type and the title it names itself by."""

    mime: str
    elements: list[Element]
    title: str | None = None
    pages: int | None = None
    ocr: bool = False
    stats: dict[str, float] = field(default_factory=dict)
    outline: list[OutlineEntry] = field(default_factory=list)  # a PDF's bookmarks

    @property
    def text(self) -> str:
        return "\n\n".join(e.text for e in self.elements)


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


def to_elements(raw: list[Any]) -> list[Element]:
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


# The child inherits the server's environment; make sure a direct call (tests, scripts) is
# just as quiet.
for _key, _value in SANDBOX_ENV.items():
    os.environ.setdefault(_key, _value)


def mark_code(elements: list[Element], *, titles: bool = False) -> list[Element]:
    """Listings in a Word or PowerPoint file become code elements, which keep their lines
    and indentation (es_rag.cleaning) and stay whole in one chunk (es_rag.chunking).

    Neither format marks code: a "Source Code" style or a monospace font is the author's
    habit, and Unstructured reports neither. A listing is one paragraph of several lines
    (soft line breaks, as pandoc writes it) that reads as code (es_rag.headings.
    is_code_block), or, as pasting from an editor writes it, a run of one-line paragraphs
    that read as code or are indented, opening and ending at a line of code and half code
    or more; indented prose stays prose.
    ``titles``: the lines may be ones Unstructured took for titles (it does, in slides);
    a Word heading is declared by its style and stays one.
    """
    from es_rag.headings import is_code_block, looks_like_code

    kinds = ("text", "title") if titles else ("text",)

    def line(el: Element) -> bool:
        text = el.text.strip("\n")
        return (
            el.kind in kinds
            and "\n" not in text
            and bool(text.strip())
            and (text[:1] in (" ", "\t") or looks_like_code(text))
        )

    def coded(el: Element) -> bool:
        return looks_like_code(el.text.strip())

    out: list[Element] = []
    i = 0
    while i < len(elements):
        el = elements[i]
        end = i
        if line(el) and coded(el):  # a run opens at a line of code, not at indented prose
            while end < len(elements) and line(elements[end]) and elements[end].page == el.page:
                end += 1
            while end - 1 > i and not coded(elements[end - 1]):
                end -= 1  # and ends at one: indented prose after a listing is prose
        run = elements[i:end]
        if len(run) >= 2 and 2 * sum(map(coded, run)) >= len(run):
            merged = "\n".join(e.text.strip("\n") for e in run)
            out.append(replace(el, kind="code", level=None, text=merged))
            i = end
            continue
        if el.kind in ("text", "title") and is_code_block(el.text):
            el = replace(el, kind="code", level=None)
        out.append(el)
        i += 1
    return out


# A line that opens a list item: a bullet glyph or a short number or letter, then a space.
_ITEM = re.compile(
    r"^(?:[-*+\u2022\u25cf\u25cb\u25e6\u25aa\u2023\u2043\u2219\u00b7]|\d{1,3}[.)]|[a-z][.)])\s+\S"
)
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
# A setext heading's underline (as in Markdown and many READMEs): "=====" or "-----".
_UNDERLINE = re.compile(r"^(=|-)\1{2,}\s*$")


class Paragraph(NamedTuple):
    text: str
    kind: Literal["text", "code", "title"]
    level: int | None = None  # a title's: 1 under "=====", 2 under "-----"


def paragraphs(text: str) -> list[Paragraph]:
    """Plain text (a .txt file, a mail body) as its paragraphs: prose, code blocks (lines
    and relative indentation kept) and underlined headings.

    Unstructured's own grouper cuts a paragraph of short lines at every ``*``, ``·`` or
    ``•`` wherever it stands and drops the glyph ("Speed = d * t" became the two headings
    "Speed = d" and "t"), and joins a listing's lines into one. This one keeps its layout
    rules and no more: where blank lines separate paragraphs, a paragraph's wrapped lines
    are joined, a paragraph of short lines ("Apache License / Version 2.0") keeps its
    lines apart, a list keeps its items apart (each with its wrapped lines), a line over
    an underline of "=" or "-" is a heading, and a block that reads as code once its
    margin is gone (es_rag.headings.is_code_block) is kept as it is; where there are
    almost no blank lines, a line is a paragraph. A clear-signed message's PGP armour goes.
    """
    text = _PGP_ARMOR.sub("", text.replace("\r\n", "\n"))
    lines = text.split("\n")
    head = lines[:2000]
    if sum(not line.strip() for line in head) < 0.1 * len(head):
        return [Paragraph(line.strip(), "text") for line in lines if line.strip()]
    out: list[Paragraph] = []
    for block in _BLANK_LINE.split(text):
        raw = [line.rstrip() for line in block.split("\n") if line.strip()]
        start = 0
        for i in range(1, len(raw)):
            if _UNDERLINE.match(raw[i].strip()) and not _UNDERLINE.match(raw[i - 1].strip()):
                out += _block(raw[start : i - 1])
                level = 1 if raw[i].strip()[0] == "=" else 2
                out.append(Paragraph(" ".join(raw[i - 1].split()), "title", level))
                start = i + 1
        out += _block(raw[start:])
    return out


def _block(raw: list[str]) -> list[Paragraph]:
    """One block's paragraphs (``paragraphs``): code, short lines, list items or prose."""
    from es_rag.headings import is_code_block

    if not raw:
        return []
    body = textwrap.dedent("\n".join(raw))
    if is_code_block(body):
        return [Paragraph(body, "code")]
    rows = [line.strip() for line in raw]
    if all(len(row.split()) < 5 for row in rows):
        return [Paragraph(row, "text") for row in rows]
    out: list[Paragraph] = []
    para: list[str] = []
    listing = False
    for row in rows:
        item = bool(_ITEM.match(row)) and (listing or not para or para[-1].endswith(":"))
        if item and para:
            out.append(Paragraph(_joined(para), "text"))
            para = []
        listing = listing or item
        para.append(row)
    out.append(Paragraph(_joined(para), "text"))
    return out


# A clear-signed message's armour (RFC 4880): its header and its signature block are
# base64 and checksums, not text anyone would search.
_PGP_ARMOR = re.compile(
    r"^-----BEGIN PGP SIGNED MESSAGE-----\n(?:Hash: [^\n]*\n)?"
    r"|^-----BEGIN PGP SIGNATURE-----$.*?^-----END PGP SIGNATURE-----$",
    re.M | re.S,
)
_LINE_END_HYPHEN = re.compile(r"[^\W\d_]-$")


def _joined(rows: list[str]) -> str:
    """Wrapped lines as one: a word hyphenated at a line's end is joined whole ("in-" and
    "vite" → "invite"), as es_rag.cleaning joins a PDF's lines."""
    out = rows[0]
    for row in rows[1:]:
        if _LINE_END_HYPHEN.search(out) and row[:1].islower():
            out = out[:-1] + row
        else:
            out += " " + row
    return out
