"""What the caller and the sandboxed child share: options in, a parsed file out (both
plain values, so they pickle), and Unstructured's elements turned into es-rag's."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Literal

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
