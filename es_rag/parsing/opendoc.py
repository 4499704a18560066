"""OpenDocument (ODT, ODS, ODP, zipped or flat) → HTML, which the HTML partitioner then
reads (in the child).

Unstructured reads OpenDocument by converting it with pandoc or LibreOffice, binaries
es-rag does not ship; the format is plain XML in a zip, so es-rag writes the HTML itself.
Text (ODT): declared headings (``text:h`` with its outline level), paragraphs, lists,
tables, text boxes (captions) and footnotes (after their paragraph). Paragraphs in a code
style (LibreOffice's "Preformatted Text", pandoc's "Source Text", any style whose name
says code, source, listing or verbatim, or whose font is fixed-pitch), one after the
other, become one ``<pre>``, which keeps its lines and indentation; so does a paragraph
whose line breaks set out a listing (es_rag.headings.is_code_block), as in DOCX.
Spreadsheets (ODS): a table per sheet, named by the sheet. Presentations (ODP): per
slide, the title placeholder's text, the other shapes' text and tables in document order,
and the speaker notes apart. What a reader does not see is left out: tracked deletions,
comments, hidden text, and the generated tables of contents and indexes (their entries
repeat the headings).
"""

from __future__ import annotations

import html
import re
import zipfile
from dataclasses import dataclass, field
from typing import Any

from es_rag.errors import CorruptDocumentError, DocumentTooLargeError, EncryptedDocumentError
from es_rag.headings import is_code_block

_NS = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "style": "urn:oasis:names:tc:opendocument:xmlns:style:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
    "svg": "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0",
    "presentation": "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0",
    "dc": "http://purl.org/dc/elements/1.1/",
    "manifest": "urn:oasis:names:tc:opendocument:xmlns:manifest:1.0",
}


def _q(name: str) -> str:
    prefix, local = name.split(":")
    return f"{{{_NS[prefix]}}}{local}"


# Cells, repeats spelt out, that a file's tables may hold: a spreadsheet that declares a
# value over a million rows would otherwise be written out in full.
MAX_CELLS = 2_000_000
_SPACES = re.compile(r"[ \t\r\n]+")
_CODE_STYLE = re.compile(r"preformatted|source|code|listing|verbatim|monospace", re.IGNORECASE)
# Generated content whose text repeats the document's (or is not meant to be read).
_SKIP = frozenset(
    _q(name)
    for name in (
        "text:tracked-changes",
        "text:table-of-content",
        "text:alphabetical-index",
        "text:illustration-index",
        "text:table-index",
        "text:object-index",
        "text:user-index",
        "text:bibliography",
        "text:sequence-decls",
        "text:variable-decls",
        "text:user-field-decls",
        "text:hidden-paragraph",
        "text:hidden-text",
        "office:forms",
        "office:annotation",
        "office:annotation-end",
        "text:note-citation",
        "text:bookmark",
        "text:bookmark-start",
        "text:bookmark-end",
        "text:soft-page-break",
        "text:change",
        "text:change-start",
        "text:change-end",
        "text:reference-mark",
        "text:reference-mark-start",
        "text:reference-mark-end",
        "svg:title",
        "svg:desc",
    )
)


def xml_parser() -> Any:
    """No entities, no network, no huge trees: the XML comes from the untrusted file."""
    from lxml import etree

    return etree.XMLParser(
        resolve_entities=False, no_network=True, remove_comments=True, remove_pis=True
    )


def parse_xml(data: bytes, what: str) -> Any:
    from lxml import etree

    try:
        return etree.fromstring(data, parser=xml_parser())
    except etree.XMLSyntaxError as exc:
        raise CorruptDocumentError(f"{what} is not well-formed XML: {exc}") from None


def _package(path: str, body: str) -> tuple[Any, Any, str | None]:
    """The package's ``office:body/office:<body>`` element, its styles.xml (or None) and
    its ``dc:title``; the errors a damaged or protected package gets. A flat file (one XML
    document: .fodt, .fods, .fodp) holds all three in its root."""
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as fh:
            content = meta = parse_xml(fh.read(), "the flat OpenDocument file")
        return _parts(content, None, meta, body)
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if "META-INF/manifest.xml" in names and b"encryption-data" in archive.read(
                "META-INF/manifest.xml"
            ):
                raise EncryptedDocumentError(
                    "a password-protected OpenDocument file; remove the password"
                )
            if "content.xml" not in names:
                raise CorruptDocumentError("an OpenDocument package without content.xml")
            content = parse_xml(archive.read("content.xml"), "content.xml")
            styles = (
                parse_xml(archive.read("styles.xml"), "styles.xml")
                if "styles.xml" in names
                else None
            )
            meta = parse_xml(archive.read("meta.xml"), "meta.xml") if "meta.xml" in names else None
    except (zipfile.BadZipFile, EOFError, OSError, KeyError) as exc:
        raise CorruptDocumentError(f"a damaged OpenDocument package: {exc}") from None
    return _parts(content, styles, meta, body)


def _parts(content: Any, styles: Any, meta: Any, body: str) -> tuple[Any, Any, str | None]:
    found = content.find(f"{_q('office:body')}/{_q('office:' + body)}")
    if found is None:
        raise CorruptDocumentError(f"an OpenDocument package without its {body} body")
    title = None
    if meta is not None:
        named = meta.find(f".//{_q('dc:title')}")
        title = " ".join((named.text or "").split()) if named is not None else None
    return found, styles, title or None


def _writer(body: Any, styles: Any) -> _Writer:
    return _Writer(
        _style_kinds([x for x in (styles, body.getroottree().getroot()) if x is not None])
    )


def odt_html(path: str) -> tuple[str, str | None]:
    """The document as HTML, and its title (``dc:title`` of meta.xml, else its "Title"
    paragraph)."""
    body, styles, title = _package(path, "text")
    writer = _writer(body, styles)
    writer.blocks(body)
    return "<html><body>" + "".join(writer.out) + "</body></html>", title or writer.title


def ods_sheets(path: str) -> tuple[list[tuple[str, str]], str | None]:
    """Each sheet that holds text, as (its name, its table in HTML), and the title."""
    body, styles, title = _package(path, "spreadsheet")
    writer = _writer(body, styles)
    sheets: list[tuple[str, str]] = []
    for table in body.iter(_q("table:table")):
        if _nearest_table(table) is not None:
            continue  # a table inside a cell's text: read with its cell
        page = writer.table_html(table)
        if page:
            sheets.append((table.get(_q("table:name")) or f"Sheet{len(sheets) + 1}", page))
    return sheets, title


@dataclass
class Slide:
    """One slide: its declared title, the rest of its text as HTML, its speaker notes."""

    title: str
    html: str
    notes: str


def odp_slides(path: str) -> tuple[list[Slide], str | None]:
    """Every slide in order (an empty one too: slide numbers stay true), and the title."""
    body, styles, title = _package(path, "presentation")
    writer = _writer(body, styles)
    slides = []
    for page in body.iter(_q("draw:page")):
        out: list[str] = []
        heads: list[str] = []
        _shapes(page, writer, out, heads)
        notes: list[str] = []
        for frame in page.iterfind(f"{_q('presentation:notes')}//{_q('draw:text-box')}"):
            notes += [_text_of(p, writer) for p in frame.iter(_q("text:p"))]
        heading = " ".join(" ".join(heads).split())
        slides.append(
            Slide(
                title=heading,
                html=(f"<h1>{html.escape(heading)}</h1>" if heading else "") + "".join(out),
                notes="\n".join(n for n in notes if n.strip()),
            )
        )
    return slides, title


_BLOCKS = frozenset(_q(name) for name in ("text:p", "text:h", "text:list"))


def _shapes(parent: Any, writer: _Writer, out: list[str], heads: list[str]) -> None:
    """A slide's text in document order: the text of its shapes, frames, groups and
    tables; the title placeholder's text goes to ``heads``; the notes are read apart."""
    blocks: list[Any] = []
    for child in parent:
        tag = child.tag
        if not isinstance(tag, str) or tag in _SKIP or tag == _q("presentation:notes"):
            continue
        if tag in _BLOCKS:
            blocks.append(child)
            continue
        out += writer.apart(blocks)
        blocks = []
        if child.get(_q("presentation:class")) == "title":
            heads += [_text_of(p, writer) for p in child.iter(_q("text:p"))]
        elif tag == _q("table:table"):
            out.append(writer.table_html(child))
        else:
            _shapes(child, writer, out, heads)
    out += writer.apart(blocks)


def _text_of(paragraph: Any, writer: _Writer) -> str:
    return writer.inline(paragraph, [])


@dataclass(frozen=True)
class _Styles:
    """What a paragraph's style says about it, through its parents."""

    code: frozenset[str] = frozenset()  # a listing
    titles: frozenset[str] = frozenset({"Title"})  # the document's title
    headings: dict[str, int] = field(default_factory=dict)  # a heading, at this level


_HEADING_NAME = re.compile(r"^heading (\d)$", re.IGNORECASE)


def _style_kinds(roots: list[Any]) -> _Styles:
    """The paragraph styles that set code (by their name or their parents', or a
    fixed-pitch font), derive from "Title" (a title paragraph with direct formatting gets
    an automatic style whose parent is "Title"), or make a heading of a plain paragraph
    (an outline level, or "Heading N", which some writers set on ``text:p``)."""
    fixed = set()
    parents: dict[str, str | None] = {}
    fonts: dict[str, str | None] = {}
    shown: dict[str, str] = {}
    outline: dict[str, int] = {}
    for root in roots:
        for face in root.iter(_q("style:font-face")):
            if face.get(_q("style:font-pitch")) == "fixed":
                fixed.add(face.get(_q("style:name")))
        for st in root.iter(_q("style:style")):
            if st.get(_q("style:family")) not in ("paragraph", None):
                continue
            name = st.get(_q("style:name")) or ""
            parents[name] = st.get(_q("style:parent-style-name"))
            shown[name] = st.get(_q("style:display-name")) or name.replace("_20_", " ")
            props = st.find(_q("style:text-properties"))
            fonts[name] = props.get(_q("style:font-name")) if props is not None else None
            named = _HEADING_NAME.match(shown[name])
            level = _int(st.get(_q("style:default-outline-level")), 0) or (
                int(named.group(1)) if named else 0
            )
            if level:
                outline[name] = level
    code, titles, headings = set(), {"Title"}, {}
    for name in parents:
        seen: set[str] = set()
        at: str | None = name
        while at and at not in seen:
            seen.add(at)
            if at == "Title":
                titles.add(name)
            if at in outline and name not in headings:
                headings[name] = outline[at]
            if _CODE_STYLE.search(shown.get(at, at)) or (fonts.get(at) in fixed and fonts[at]):
                code.add(name)
                break
            at = parents.get(at)
    return _Styles(frozenset(code), frozenset(titles), headings)


class _Writer:
    """Walks ``office:text`` and writes HTML blocks; code paragraphs in a row share a
    ``<pre>``."""

    def __init__(self, styles: _Styles) -> None:
        self.styles = styles
        self.out: list[str] = []
        self.code: list[str] = []
        self.title: str | None = None
        self.cells = 0

    def blocks(self, children: Any) -> None:
        for el in children:
            if not isinstance(el.tag, str) or el.tag in _SKIP:
                continue
            self.block(el)
        self.flush()

    def apart(self, children: Any) -> list[str]:
        """The blocks of a footnote, text box or nested list, written apart from the
        paragraph (or code run) they stand in."""
        saved = self.out, self.code
        self.out, self.code = [], []
        self.blocks(children)
        out = self.out
        self.out, self.code = saved
        return out

    def flush(self) -> None:
        while self.code and not self.code[-1].strip():
            self.code.pop()
        if self.code:
            self.out.append("<pre>" + html.escape("\n".join(self.code)) + "</pre>")
        self.code = []

    def block(self, el: Any) -> None:
        tag = el.tag
        if tag == _q("text:p"):
            style = el.get(_q("text:style-name")) or ""
            after: list[str] = []
            text = self.inline(el, after)
            if style in self.styles.code:
                if text.strip() or self.code:
                    self.code.append(text)
            elif "\n" in text and is_code_block(text):
                # A listing in a body style, its lines kept apart by line breaks (as
                # Shift+Enter or pandoc write them): code, as in DOCX (es_rag.headings).
                self.flush()
                self.code.append(text)
                self.flush()
            else:
                self.flush()
                if text.strip():
                    level = self.styles.headings.get(style)
                    if style in self.styles.titles and self.title is None:
                        self.title = " ".join(text.split())
                        self.out.append(f"<h1>{_escaped(text)}</h1>")
                    elif level:
                        level = min(level, 6)
                        self.out.append(f"<h{level}>{_escaped(text)}</h{level}>")
                    else:
                        self.out.append(f"<p>{_escaped(text)}</p>")
            self.out += after
            return
        self.flush()
        if tag == _q("text:h"):
            after = []
            text = self.inline(el, after)
            level = min(6, max(1, _int(el.get(_q("text:outline-level")), 1)))
            if text.strip():
                self.out.append(f"<h{level}>{_escaped(text)}</h{level}>")
            self.out += after
        elif tag == _q("text:list") and el.find(f".//{_q('text:h')}") is not None:
            # Numbered headings as older OpenOffice writes them: a heading inside a list
            # (outline numbering). Its items are read as blocks, so a heading stays one.
            for item in el:
                self.blocks(item)
        elif tag == _q("text:list"):
            self.out.append("<ul>")
            for item in el:
                if item.tag in (_q("text:list-item"), _q("text:list-header")):
                    self.list_item(item)
            self.out.append("</ul>")
        elif tag == _q("table:table"):
            self.table(el)
        elif el.get(_q("text:display")) == "none":
            pass  # a hidden section: not what a reader sees
        else:  # text:section, text:index-body and other containers: their blocks
            self.blocks(el)

    def list_item(self, item: Any) -> None:
        texts: list[str] = []
        after: list[str] = []
        nested: list[Any] = []
        for child in item:
            if child.tag in (_q("text:p"), _q("text:h")):
                text = self.inline(child, after)
                if text.strip():
                    texts.append(text)
            elif isinstance(child.tag, str) and child.tag not in _SKIP:
                nested.append(child)
        inner = self.apart(nested)
        self.out += ["<li>" + "<br>".join(_escaped(t) for t in texts), *inner, *after, "</li>"]

    def table(self, el: Any) -> None:
        self.out.append(self.table_html(el))

    def table_html(self, el: Any) -> str:
        """A table as HTML, "" when it holds no text. Repeated cells and rows are spelt
        out, so columns stay aligned, except the empty ones that only pad a row or a sheet
        to its declared size (a spreadsheet declares a million rows)."""
        rows: list[list[str]] = []
        for row in el.iter(_q("table:table-row")):
            if _nearest_table(row) is not el:
                continue  # a row of a table nested in a cell: read with that cell
            cells: list[str] = []
            empty = 0  # empty cells not yet written: written only if text follows
            for cell in row:
                if cell.tag not in (_q("table:table-cell"), _q("table:covered-table-cell")):
                    continue
                repeat = max(1, _int(cell.get(_q("table:number-columns-repeated")), 1))
                text = self.cell_text(cell) if cell.tag == _q("table:table-cell") else ""
                if not text:
                    empty += repeat
                    continue
                self.count(empty + repeat)
                cells += [""] * empty + [text] * repeat
                empty = 0
            if cells:
                repeat = max(1, _int(row.get(_q("table:number-rows-repeated")), 1))
                self.count(len(cells) * (repeat - 1))
                rows += [cells] * repeat
        if not rows:
            return ""
        width = max(len(r) for r in rows)
        lines = ["<table>"]
        for r in rows:
            padded = r + [""] * (width - len(r))
            lines.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in padded) + "</tr>")
        lines.append("</table>")
        return "".join(lines)

    def cell_text(self, cell: Any) -> str:
        after: list[str] = []
        parts = []
        for child in cell:
            if child.tag in (_q("text:p"), _q("text:h")):
                parts.append(self.inline(child, after))
            elif child.tag == _q("text:list"):
                parts += [self.inline(p, after) for p in child.iter(_q("text:p"))]
        return " ".join(" ".join(parts).split())

    def count(self, cells: int) -> None:
        self.cells += cells
        if self.cells > MAX_CELLS:
            raise DocumentTooLargeError(
                f"the tables hold more than {MAX_CELLS:,} cells (repeated cells and rows "
                "spelt out); split the file"
            )

    def inline(self, el: Any, after: list[str], *, top: bool = True) -> str:
        """The text a reader sees in a paragraph; its text boxes and footnotes go to
        ``after``, as blocks of their own. As ODF says, a run of white space in the XML is
        one space and a paragraph's leading white space is none: spaces that count are
        ``<text:s>``, tabs ``<text:tab>``, line breaks ``<text:line-break>``."""
        parts = [_SPACES.sub(" ", el.text or "")]
        if top:
            parts[0] = parts[0].lstrip(" ")
        for child in el:
            tag = child.tag
            if not isinstance(tag, str) or tag in _SKIP:
                pass
            elif tag == _q("text:s"):
                parts.append(" " * min(_int(child.get(_q("text:c")), 1), 1000))
            elif tag == _q("text:tab"):
                parts.append("\t")
            elif tag == _q("text:line-break"):
                parts.append("\n")
            elif tag == _q("text:note"):
                body = child.find(_q("text:note-body"))
                if body is not None:
                    after += self.apart(body)
            elif tag == _q("draw:text-box"):
                after += self.apart(child)
            elif tag == _q("text:ruby"):
                base = child.find(_q("text:ruby-base"))
                if base is not None:
                    parts.append(self.inline(base, after, top=False))
            else:  # spans, links, fields (their shown value), frames
                parts.append(self.inline(child, after, top=False))
            parts.append(_SPACES.sub(" ", child.tail or ""))
        return "".join(parts)


def _nearest_table(el: Any) -> Any:
    at = el.getparent()
    while at is not None and at.tag != _q("table:table"):
        at = at.getparent()
    return at


def _escaped(text: str) -> str:
    """Inline text as HTML: a line break stays one."""
    return "<br>".join(html.escape(line) for line in text.split("\n"))


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default
