"""The parse itself, in the sandboxed child: every byte of the file is read here.

Per format (Unstructured 0.27): PDF with a text layer uses the ``fast`` strategy; a PDF
without one, and images, are OCRed (es_rag.parsing.ocr); DOCX, PPTX (speaker notes kept,
after their slide), XLSX and XLS (a table per sheet, headed by the sheet's name), CSV/TSV
and HTML (navigation, sidebars, footers, tables of contents and permalinks of
documentation sites left out, layout tables read as blocks) use their Unstructured
partitioners; Markdown and plain text are grouped by es-rag, and so is the text antiword
finds in a Word 97-2003 file; EML (the standard library's parser) and Outlook's MSG
(python-oxmsg) send their body through the HTML or the plain-text path, with the subject
as title and the sender and recipients kept, then read their attachments as files (one
level deep); OpenDocument and EPUB (which Unstructured
reads only through pandoc) are turned into HTML by es-rag (es_rag.parsing.opendoc,
es_rag.parsing.epub) and read by the HTML partitioner. The warm-ups run
in the sandbox's server before it forks, so that children share the loaded libraries.
"""

from __future__ import annotations

import io
import logging
import re
import tempfile
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from es_rag import detect
from es_rag.cleaning import clean, page_words, respace
from es_rag.errors import (
    ConfigurationError,
    CorruptDocumentError,
    DocumentTooLargeError,
    EmptyDocumentError,
    EncryptedDocumentError,
    NoTextError,
    ParseLimitError,
    UnsupportedFormatError,
)
from es_rag.headings import is_heading, strip_numbering
from es_rag.outline import MAX_ENTRIES, OutlineEntry, root_title
from es_rag.parsing.common import (
    JUNK_TITLE,
    ParsedFile,
    ParseOptions,
    mark_code,
    paragraphs,
    to_elements,
)
from es_rag.parsing.ocr import image_file, ocr, ocr_languages, pdf_pages
from es_rag.types import Element

log = logging.getLogger(__name__)


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
    import oxmsg  # noqa: F401
    import unstructured.partition.docx
    import unstructured.partition.html
    import unstructured.partition.pptx
    import unstructured.partition.xlsx  # noqa: F401

    _warm_nlp()


def warm_text() -> None:
    import email.policy  # noqa: F401

    import unstructured.partition.csv
    import unstructured.partition.html
    import unstructured.partition.text  # noqa: F401

    _warm_nlp()


def partition_file(path: str, sniffed: str, options: ParseOptions) -> ParsedFile:
    """Parse one file (runs in the sandbox child: every byte of the file is read here)."""
    from unstructured.errors import DecompressedSizeExceededError, UnprocessableEntityError

    if sniffed == detect.GZIP:
        return _gunzipped(Path(path), options)
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


def _gunzipped(path: Path, options: ParseOptions) -> ParsedFile:
    """A gzip-compressed file read as the document it holds, named without ``.gz``.

    Debian compresses the text documentation it ships (``debian-reference.en.txt.gz``,
    READMEs, changelogs, Info manuals). Inflated here, in the child, within the parse's
    limits: the inflated document must pass the size checks a plain file does, and
    inflating stops at the first byte past them (a gzip bomb costs nothing).
    """
    import gzip
    import zlib

    from es_rag.parsing.common import sniff_file

    name = detect.inflated_name(path.name)
    limit = min(options.max_input_bytes, options.max_unzipped_bytes)
    with tempfile.TemporaryDirectory(prefix="es-rag-gunzip-") as folder:
        inner = Path(folder) / name
        size = 0
        try:
            with gzip.open(path, "rb") as packed, inner.open("wb") as out:
                while block := packed.read(1 << 20):
                    size += len(block)
                    if size > limit:
                        raise DocumentTooLargeError(
                            f"the compressed file inflates past {limit / 2**20:,.0f} MB "
                            "(the input limit): a gzip bomb or an oversized document"
                        )
                    out.write(block)
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            raise CorruptDocumentError(f"a damaged gzip file: {exc}") from None
        mime = sniff_file(inner, options)
        if mime == detect.GZIP:
            raise UnsupportedFormatError("a file compressed twice: inflate it once first")
        return partition_file(str(inner), mime, options)


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
    elements = mark_code(_styled_code(to_elements(raw), _docx_code_paragraphs(path)))
    return ParsedFile(mime=detect.DOCX, elements=elements, title=_ooxml_title(path))


# Word's own code styles and the ones converters write (pandoc's "Source Code", "Verbatim
# Char"; LibreOffice's "Preformatted Text"), by name or by a base style's name.
_WORD_CODE_STYLE = re.compile(
    r"source code|preformatted|^code\b|\bcode$|macro text|verbatim|listing", re.IGNORECASE
)


def _docx_code_paragraphs(path: str) -> list[tuple[str, bool]]:
    """The body's paragraphs in order, as (their words, whether their style sets code).
    Unstructured reports no style; python-docx reads them."""
    from docx import Document as WordDocument

    try:
        doc = WordDocument(path)
    except Exception:  # Unstructured read it; without styles, the content rules remain
        return []
    out = []
    for para in doc.paragraphs:
        style, code, seen = para.style, False, 0
        while style is not None and seen < 16 and not code:
            code = bool(_WORD_CODE_STYLE.search(style.name or ""))
            style, seen = style.base_style, seen + 1
        out.append((" ".join(para.text.split()), code))
    return out


def _styled_code(elements: list[Element], paragraphs: list[tuple[str, bool]]) -> list[Element]:
    """Elements of paragraphs set in a code style become code; such paragraphs one after
    the other (a listing pasted a line a paragraph) become one element."""
    out: list[Element] = []
    at = 0
    previous_code = False
    for el in elements:
        words = " ".join(el.text.split())
        found = next(
            (i for i in range(at, min(at + 64, len(paragraphs))) if paragraphs[i][0] == words),
            None,
        )
        if el.kind not in ("text", "title", "list_item") or found is None or not words:
            out.append(el)
            previous_code = False
            if found is not None:
                at = found + 1
            continue
        at = found + 1
        if not paragraphs[found][1]:
            out.append(el)
            previous_code = False
        elif previous_code and out and out[-1].kind == "code":
            out[-1] = replace(out[-1], text=f"{out[-1].text}\n{el.text}")
        else:
            out.append(replace(el, kind="code", level=None))
            previous_code = True
    return out


def _pptx(path: str, options: ParseOptions) -> ParsedFile:
    from pptx import Presentation
    from unstructured.partition.pptx import partition_pptx

    raw = mark_code(
        to_elements(
            partition_pptx(filename=path, include_slide_notes=False, infer_table_structure=True)
        ),
        titles=True,
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


def _xls(path: str, options: ParseOptions) -> ParsedFile:
    """Excel 97-2003: Unstructured's XLSX reader reads it too (pandas, with xlrd), a table
    per sheet; the title from the file's summary information."""
    return replace(_xlsx(path, options), mime=detect.XLS, title=_ole_title(path))


_PICTURE = re.compile(r"[ \t]*\[pic\][ \t]*")


def _doc(path: str, options: ParseOptions) -> ParsedFile:
    """Word 97-2003, with antiword (Debian's antiword package, run inside this sandboxed
    parse and under its limits): the text a paragraph a line, then read as plain text is
    (paragraphs, lists, headings guessed: antiword does not report styles); its picture
    placeholders dropped. Without antiword the file is refused, saying what to install."""
    import shutil
    import subprocess

    exe = shutil.which("antiword")
    if exe is None:
        raise UnsupportedFormatError(
            "a Word 97-2003 file (.doc): reading it needs antiword (apt-get install "
            "antiword), or save it as DOCX"
        )
    done = subprocess.run(
        [exe, "-w", "0", "-m", "UTF-8.txt", path], capture_output=True, check=False
    )
    said = done.stderr.decode("utf-8", "replace").strip()
    if done.returncode != 0 or (not done.stdout.strip() and said):
        if "encrypted" in said.lower():
            raise EncryptedDocumentError("a password-protected Word file; remove the password")
        raise CorruptDocumentError(f"a damaged Word 97-2003 file: {said[:300] or 'unreadable'}")
    text = _PICTURE.sub("", done.stdout.decode("utf-8", "replace"))
    return ParsedFile(mime=detect.DOC, elements=_text_elements(text), title=_ole_title(path))


def _ole_title(path: str) -> str | None:
    """The title in an OLE file's summary information, if it has one."""
    import olefile

    try:
        with olefile.OleFileIO(path) as ole:
            title = ole.get_metadata().title
    except Exception:  # no summary stream, or a damaged one: the content is what counts
        return None
    text = title.decode("cp1252", "replace") if isinstance(title, bytes) else ""
    return " ".join(text.split()) or None


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
    text, _ = _decoded(path)  # as UTF-8 whatever it was: damaged bytes are U+FFFD already
    data = io.BytesIO(text.encode("utf-8"))
    raw = partition_csv(file=data, encoding="utf-8", infer_table_structure=True, **kwargs)
    return ParsedFile(mime=mime, elements=to_elements(raw))


# Documentation generators' furniture: navigation, sidebars, local tables of contents,
# breadcrumbs, footers and the permalink anchors in headings (Sphinx and Read the Docs,
# MkDocs and Material, Docusaurus, Javadoc, Hugo/Jekyll themes, Publican), and blocks of
# linked images only (a site's logos, a README's badges).
_CHROME_TAGS = ("nav", "aside", "script", "style", "noscript", "template", "footer", "header")
_CHROME_ROLES = frozenset(
    "navigation banner contentinfo search complementary".split()  # noqa: SIM905
)
_CHROME_CLASS_NAMES = (
    "sphinxsidebar sphinxsidebarwrapper related footer headerlink searchbox toc "
    "table-of-contents localtoc wy-nav-side wy-breadcrumbs rst-footer-buttons rst-versions "
    "md-sidebar md-header md-footer md-nav md-source md-search md-top md-tabs md-skip "
    "hash-link anchor-link anchorjs-link theme-doc-sidebar-container theme-doc-toc-desktop "
    "theme-doc-toc-mobile theme-doc-breadcrumbs theme-doc-footer pagination-nav navbar "
    "breadcrumbs breadcrumb top-nav sub-nav bottom-nav legal-copy skip-nav flex-box-header "
    "toc-container on-this-page edit-this-page nav-panel docnav"
)
_CHROME_CLASSES = frozenset(_CHROME_CLASS_NAMES.split())
_CHROME_IDS = frozenset(
    "toc table-of-contents sidebar navbar navigation searchbox breadcrumbs footer banner".split()  # noqa: SIM905
)
_NOTE = frozenset(
    "footnote endnote rearnote note doc-footnote doc-endnote doc-endnotes".split()  # noqa: SIM905
)
_PERMALINK = re.compile(r"\s*[¶§#🔗]\s*$")
# DocBook's HTML (the DSSSL and XSL stylesheets) heads its title page's credits <h3>.
_CREDIT_CLASSES = frozenset({"author", "editor", "othercredit", "corpauthor", "collab"})
_PAREN_SUFFIX = re.compile(r"^(.+?)\s+\(([^()]+)\)$")
_TITLE_SEPARATOR = re.compile(r"\s+[—–|·:-]\s+")
# The site's part of a page title: "Python 3.11.2 documentation", "Docs", "v2.1".
_SITE_SUFFIX = re.compile(r"documentation|\bdocs\b|javadoc|\bv?\d+\.\d+(?:\.\d+)*\b", re.IGNORECASE)


def _mostly_links(el: Any) -> bool:
    """Empty, or at least half of its text in links: navigation, whatever it is called."""
    text = len(el.text_content().strip())
    links = sum(len(a.text_content().strip()) for a in el.xpath(".//a"))
    return text == 0 or links * 2 >= text


def _chrome(el: Any) -> bool:
    if _NOTE & set(f"{el.get('epub:type') or ''} {el.get('role') or ''}".lower().split()):
        return False  # a footnote (EPUB 3 sets them in <aside>): the author's text
    if el.tag == "aside" and el.xpath("ancestor::article"):
        # An aside inside an article may be a callout the author wrote; one made of links
        # is navigation all the same.
        return _mostly_links(el)
    if el.tag in _CHROME_TAGS:
        return True
    if "header" in (el.get("class") or "").lower().split() and not el.xpath(".//h1|.//h2|.//h3"):
        # Texinfo's (makeinfo) "Next: …, Previous: …, Up: …" bar; a page header holding its
        # title, or one of words more than links, is content.
        return _mostly_links(el)
    if (
        el.tag in ("p", "div")
        and el.xpath(".//a//img")
        and not el.xpath(".//img[not(ancestor::a)]")
        and not el.text_content().strip()
    ):
        return True  # linked images and nothing else: logos, badges
    if (el.get("role") or "").strip().lower() in _CHROME_ROLES:
        return True
    if (el.get("id") or "").strip().lower() in _CHROME_IDS:
        return True
    return bool(_CHROME_CLASSES & set((el.get("class") or "").lower().split()))


def _page_content(data: bytes) -> tuple[str, str | None, set[str]]:
    """A documentation page without its site's chrome, its own title, and the texts of
    its lists of links (:func:`_link_lists`).

    The page's ``<main>`` or ``[role=main]`` (all of them, when pages were joined into
    one) when it has one, else the whole body; then navigation, sidebars, tables of
    contents, footers and permalink anchors come out, and layout tables become blocks.
    """
    from lxml import etree
    from lxml import html as lxml_html

    try:
        data.decode("utf-8")
        parser = lxml_html.HTMLParser(encoding="utf-8")  # what the page is, declared or not
    except UnicodeDecodeError:
        parser = None  # a declared legacy charset (or libxml2's guess)
    root = lxml_html.fromstring(data, parser=parser)
    title = root.findtext(".//title")
    main = root.xpath("//main | //*[@role='main']")
    outer = [m for m in main if not any(a in main for a in m.iterancestors())]
    body = outer[0] if len(outer) == 1 else root
    if len(outer) > 1:
        # Pages joined into one (a converter's concatenation, an EPUB chapter made of
        # several): every main region, in order, not only the first.
        body = lxml_html.Element("div")
        body.extend(outer)
    for el in [el for el in body.iter() if isinstance(el.tag, str) and _chrome(el)]:
        if el is body or el.getparent() is None:
            continue
        if el.tag == "header" and el.xpath(".//h1 | .//h2 | .//h3"):
            el.drop_tag()  # an article's own header holds its title: keep what is inside
        else:
            el.drop_tree()
    _unwrap_layout_tables(body)
    headings = body.xpath(".//h1 | .//h2 | .//h3 | .//h4 | .//h5 | .//h6")
    for h in headings:
        if _CREDIT_CLASSES & set((h.get("class") or "").lower().split()):
            h.tag = "p"  # DocBook's title page sets its authors as <h3>: a credit, not a section
        for anchor in h.xpath(".//a"):
            if not _PERMALINK.sub("", anchor.text_content()).strip():
                anchor.drop_tree()  # an anchor holding only "¶", "#" or an icon
        if h.text and _PERMALINK.search(h.text) and not len(h):
            h.text = _PERMALINK.sub("", h.text)
    h1 = body.xpath(".//h1") or body.xpath("(.//h2 | .//h3)[1]")
    heading = " ".join(h1[0].text_content().split()) if h1 else ""
    site = root.xpath("string(//meta[@property='og:site_name']/@content)").strip()
    html = etree.tostring(body, encoding="unicode", method="html")
    return html, _site_free_title(title, _PERMALINK.sub("", heading), site), _link_lists(body)


_LINK_LIST_MIN = 8  # links in a list
_LINK_LIST_SHARE = 0.75  # of the list's text in its links


def _link_lists(body: Any) -> set[str]:
    """The texts of the items of lists made of links: a generated index (Sphinx's
    ``genindex``), a site map, a chapter page listing its pages, a cross-reference.

    They become ``contents`` elements, stored and left out of search, as a PDF's table of
    contents and index are: every entry names a topic it does not explain, so it matched
    questions ahead of the pages that answer them (SQLite's cross-reference pages gave
    1,140 chunks of "keyword → page" lines). A list with words of its own beside its
    links (a link and a sentence on it per item) stays text.
    """
    texts: set[str] = set()
    for found in body.xpath(".//ul | .//ol | .//dl"):
        if found.xpath("ancestor::ul | ancestor::ol | ancestor::dl"):
            continue  # judged with the list it is in
        links = found.xpath(".//a[@href]")
        if len(links) < _LINK_LIST_MIN:
            continue
        linked = sum(len(" ".join(a.text_content().split())) for a in links)
        if linked < _LINK_LIST_SHARE * len(" ".join(found.text_content().split())):
            continue
        for item in found.xpath(".//li | .//dt | .//dd"):
            texts.add(" ".join(item.text_content().split()))
            # Its own line, without the lists under it (the partitioner's element).
            own = [item.text or ""]
            for child in item:
                if child.tag not in ("ul", "ol", "dl"):
                    own.append(child.text_content())
                own.append(child.tail or "")
            texts.add(" ".join(" ".join(own).split()))
    texts.discard("")
    return texts


def _layout_table(table: Any) -> bool:
    """A table that lays a page out rather than holding data: marked so, holding another
    table (an HTML e-mail's frame), made mostly of links (a bar of links or icons), or
    with at most one cell of text a row (a stack of blocks, a spacer grid)."""
    if (table.get("role") or "").strip().lower() in ("presentation", "none"):
        return True
    if table.xpath(".//table") or _mostly_links(table):
        return True  # a frame of tables, a bar of links or icons
    rows = table.xpath("./tr | ./thead/tr | ./tbody/tr | ./tfoot/tr")
    return bool(rows) and all(
        sum(bool(cell.text_content().strip()) for cell in row.xpath("./td | ./th")) <= 1
        for row in rows
    )


def _unwrap_layout_tables(body: Any) -> None:
    """Layout tables become plain blocks, so that their text reads as paragraphs and
    headings, not as one row of a table; data tables stay tables. One pass in document
    order, outer tables before the tables they hold: whether a table lays out depends only
    on what lies inside it."""
    for table in list(body.iter("table")):
        if not _layout_table(table):
            continue
        for part in table.xpath("./thead | ./tbody | ./tfoot"):
            part.drop_tag()
        for part in table.xpath("./colgroup | ./col"):
            part.drop_tree()
        for part in table.xpath("./caption"):
            part.tag = "div"
        for row in table.xpath("./tr"):
            for cell in row.xpath("./td | ./th"):
                cell.tag = "div"
            row.tag = "div"
        table.tag = "div"


def _site_free_title(title: str | None, heading: str, site: str = "") -> str | None:
    """ "json — JSON encoder and decoder — Python 3.11.2 documentation" → the page's part.

    The page's ``<h1>`` (its first ``<h2>`` or ``<h3>`` without one) when the title starts
    with it, or when the title is it, unnumbered, before a parenthesised manual name
    (Texinfo's pages); else the title less a last part that names the site
    (``og:site_name``) or reads like one ("… documentation", "Docs", a version); else the
    title as it is ("Python - a guide" keeps its "a guide").
    """
    if not title:
        return heading or None
    title = " ".join(title.split())
    if heading and title.casefold().startswith(heading.casefold()):
        rest = title[len(heading) :]
        if not rest or _TITLE_SEPARATOR.match(rest):
            return heading
    # Texinfo: "Closure Example (libffi: the portable foreign function interface library)"
    # over the heading "2.6 Closure Example".
    named = _PAREN_SUFFIX.match(title)
    if named and named.group(1) == "Top":
        return named.group(2)  # a Texinfo manual's first page: the manual's name
    if named and heading and strip_numbering(heading).casefold() == named.group(1).casefold():
        return named.group(1)
    parts = _TITLE_SEPARATOR.split(title)
    last = parts[-1]
    if len(parts) > 1 and (
        _SITE_SUFFIX.search(last) or (site and last.casefold() == site.casefold())
    ):
        return title[: title.rfind(last)].rstrip(" —–|·:-") or title
    return title


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


def _html_elements(data: bytes) -> tuple[list[Element], str | None]:
    """A page's elements, its chrome left out, and its own title."""
    _check_depth(data)
    try:
        page, title, links = _page_content(data)
    except Exception as exc:  # lxml refuses what it cannot read at all
        raise CorruptDocumentError(f"unreadable HTML: {exc}") from None
    elements = [
        replace(e, kind="contents", level=None)
        if e.kind in ("list_item", "text") and " ".join(e.text.split()) in links
        else e
        for e in _partitioned(page)
    ]
    return elements, title


def _partitioned(page: str) -> list[Element]:
    """HTML es-rag wrote or cleaned, through Unstructured's HTML partitioner."""
    from unstructured.partition.html import partition_html

    _check_depth(page.encode())
    return to_elements(partition_html(text=page, skip_headers_and_footers=True))


def _html(path: str, options: ParseOptions) -> ParsedFile:
    elements, title = _html_elements(Path(path).read_bytes())
    return ParsedFile(mime=detect.HTML, elements=elements, title=title)


def _epub(path: str, options: ParseOptions) -> ParsedFile:
    """Each chapter of the spine through the HTML path, in reading order; the book's
    title from its package (es_rag.parsing.epub)."""
    from es_rag.parsing.epub import epub_chapters

    chapters, title = epub_chapters(path)
    elements: list[Element] = []
    for _, data in chapters:
        elements += _html_elements(data)[0]
    return ParsedFile(mime=detect.EPUB, elements=elements, title=title)


def _odt(path: str, options: ParseOptions) -> ParsedFile:
    """OpenDocument text as HTML written by es-rag (es_rag.parsing.opendoc), then the
    HTML partitioner; listings in a body style are found as in DOCX."""
    from es_rag.parsing.opendoc import odt_html

    page, title = odt_html(path)
    return ParsedFile(mime=detect.ODT, elements=mark_code(_partitioned(page)), title=title)


def _ods(path: str, options: ParseOptions) -> ParsedFile:
    """A table per sheet, headed by the sheet's name, as XLSX (es_rag.parsing.opendoc)."""
    from es_rag.parsing.opendoc import ods_sheets

    sheets, title = ods_sheets(path)
    out: list[Element] = []
    for number, (name, table) in enumerate(sheets, start=1):
        out.append(Element(kind="title", text=name, level=1, page=number))
        out += [
            replace(el, page=number) for el in _partitioned(f"<html><body>{table}</body></html>")
        ]
    return ParsedFile(mime=detect.ODS, elements=out, title=title)


def _odp(path: str, options: ParseOptions) -> ParsedFile:
    """As PPTX: the slide number as page, the title placeholder as the slide's one
    heading, listings as code, the speaker notes after the slide's content."""
    from es_rag.parsing.opendoc import odp_slides

    slides, title = odp_slides(path)
    out: list[Element] = []
    for number, slide in enumerate(slides, start=1):
        if slide.html:
            page = f"<html><body>{slide.html}</body></html>"
            elements = mark_code(_partitioned(page), titles=True)
            for i, el in enumerate(elements):
                # Unstructured also guesses "titles" among the bullets.
                declared = i == 0 and slide.title and el.kind == "title"
                kind = el.kind if el.kind != "title" or declared else "text"
                out.append(replace(el, kind=kind, level=1 if declared else None, page=number))
        if slide.notes:
            out.append(Element(kind="notes", text=slide.notes, page=number))
    return ParsedFile(mime=detect.ODP, elements=out, title=title, pages=len(slides))


def _markdown(path: str, options: ParseOptions) -> ParsedFile:
    """es-rag's own Markdown reader (es_rag.markdown, the one in-memory text gets): the
    same elements for a file and for its text, and no Unstructured partition (about 70
    ms for a note of two lines, which made small files cost far more than their
    embedding). Cheap and linear enough to run without a child (``Parser.parse``)."""
    from es_rag.markdown import text_elements

    text, _ = _decoded(path)
    # Quotes and lists nested too deep are refused there (es_rag.markdown.MAX_DEPTH).
    return ParsedFile(mime=detect.MARKDOWN, elements=text_elements(text))


def _asciidoc(path: str, options: ParseOptions) -> ParsedFile:
    """AsciiDoc as the Markdown it means (es_rag.asciidoc), then read as Markdown is: as
    cheap, and run without a child likewise."""
    from es_rag.asciidoc import to_markdown
    from es_rag.markdown import text_elements

    text, _ = _decoded(path)
    return ParsedFile(mime=detect.ASCIIDOC, elements=text_elements(to_markdown(text)))


def _rst(path: str, options: ParseOptions) -> ParsedFile:
    """reStructuredText through docutils (es_rag.rst). In the child, unlike Markdown and
    AsciiDoc: docutils is a full parser, recursive in the nesting of its blocks, and its
    time and memory on hostile input are the child's limits' to bound."""
    from es_rag.rst import text_elements

    text, _ = _decoded(path)
    try:
        elements = text_elements(text)
    except RecursionError:
        raise ParseLimitError(
            "the text nests its blocks deeper than docutils reads", limit="depth"
        ) from None
    return ParsedFile(mime=detect.RST, elements=elements)


def _text(path: str, options: ParseOptions) -> ParsedFile:
    """Paragraphs found by es-rag (es_rag.parsing.common.paragraphs), each classified by
    Unstructured's rules for text (title, list item, prose); code blocks kept whole,
    underlined headings declared."""
    text, _ = _decoded(path)
    return ParsedFile(mime=detect.TEXT, elements=_text_elements(text))


def _text_elements(text: str) -> list[Element]:
    from unstructured.partition.text import element_from_text

    elements: list[Element] = []
    for para in paragraphs(text):
        if para.kind == "text":
            elements += to_elements([element_from_text(para.text)])
        else:
            elements.append(Element(kind=para.kind, text=para.text, level=para.level))
    return elements


def _rtf(path: str, options: ParseOptions) -> ParsedFile:
    """Rich Text: its words (striprtf: code pages, Unicode escapes, hidden groups left
    out), then paragraphs and guessed headings as for plain text; RTF's styles are not
    read, so headings are guessed, not declared."""
    from striprtf.striprtf import rtf_to_text
    from unstructured.partition.text import partition_text

    def words(rtf: str) -> str:
        text = rtf_to_text(rtf, errors="replace")
        # Characters above U+FFFF arrive as two \u escapes, one per UTF-16 half: join them.
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")

    # RTF is 7-bit text with escapes; a stray 8-bit byte is kept as the character it
    # names in Latin-1 rather than failing the file.
    raw = Path(path).read_bytes().decode("latin-1")
    text = words(raw)
    # The document's own title ({\info{\title ...}}), with its escapes read.
    found = re.search(r"{\\info\b.*?{\\title\b ?((?:[^{}\\]|\\.)*)}", raw[:65536], re.S)
    title = " ".join(words("{\\rtf1 " + found.group(1) + "}").split()) if found else None
    return ParsedFile(
        mime=detect.RTF,
        # Each line is a paragraph (an RTF \par): nothing to group.
        elements=to_elements(partition_text(text=text, paragraph_grouper=False)),
        title=title or None,
    )


def _info(path: str, options: ParseOptions) -> ParsedFile:
    """A GNU Info manual (es_rag.info): its nodes' headings, text, examples and menus."""
    from es_rag.info import info_elements, parts_only

    text, _ = _decoded(path)
    elements, title = info_elements(text)
    if not any(e.text.strip() for e in elements) and parts_only(text):
        # Nothing wrong and nothing to index: skipped, as an image without words is.
        raise NoTextError("a split Info manual's table of its parts: they hold its text")
    return ParsedFile(mime=detect.INFO, elements=elements, title=title)


def _manpage(path: str, options: ParseOptions) -> ParsedFile:
    """A manual page's troff source (es_rag.manpage): what ``man`` shows of it."""
    from es_rag.manpage import includes_only, manpage_elements

    text, _ = _decoded(path)
    if includes_only(text):
        raise NoTextError("a manual page that only includes another (.so): that one holds it")
    elements, title = manpage_elements(text)
    return ParsedFile(mime=detect.MANPAGE, elements=elements, title=title)


def _decoded(path: str) -> tuple[str, str]:
    """The whole file as text, and how it was read: UTF-8, UTF-16 with a byte-order mark,
    or as ``detect.legacy_text`` reads UTF-8 with a few damaged bytes and plainly Western
    European text in Windows-1252.

    The sniff saw only the head; a bad byte further on is the same error. Other encodings
    are refused rather than guessed (a wrong guess indexes mojibake).
    """
    data = Path(path).read_bytes()
    encoding = "utf-16" if data.startswith((b"\xff\xfe", b"\xfe\xff")) else "utf-8-sig"
    try:
        return data.decode(encoding), encoding
    except UnicodeDecodeError as exc:
        legacy = detect.legacy_text(data) if encoding != "utf-16" else None
        if legacy is None:
            raise detect.not_utf8(data, exc.start) from None
        return legacy


def _email(path: str, options: ParseOptions) -> ParsedFile:
    """An RFC 822 message (the standard library's parser): its body as for an Outlook
    message, the HTML part when there is one (layout tables and all through the HTML
    path), else the plain text in es-rag's paragraphs; the subject as title, sender and
    recipients as a first line; then its attachments (``_with_attachments``)."""
    import email
    from email import policy

    try:
        msg = email.message_from_bytes(Path(path).read_bytes(), policy=policy.default)
        part = msg.get_body(preferencelist=("html", "plain"))
        content = _mail_text(part) if part is not None else ""
        subject = str(msg.get("subject") or "").strip()
        fields = [
            (label, [str(a) for h in msg.get_all(name, []) for a in _addresses(h)])
            for label, name in (("From", "from"), ("To", "to"), ("Cc", "cc"))
        ]
        attachments = [
            _attachment_of(a)
            for a in msg.iter_attachments()
            if a.get_content_type() not in _NOT_CONTENT
        ]
    except Exception as exc:  # a header or a part the parser cannot decode
        raise CorruptDocumentError(f"a damaged e-mail: {type(exc).__name__}: {exc}") from None
    if part is not None and part.get_content_subtype() == "html" and content.strip():
        elements = _html_elements(content.encode("utf-8"))[0]
    else:
        elements = _text_elements(content)
    elements = _with_attachments(_people(fields), elements, attachments, options)
    return ParsedFile(mime=detect.EMAIL, elements=elements, title=subject or None)


def _attachment_of(part: Any) -> tuple[str | None, bytes | None]:
    """An attachment's name and decoded bytes; an attached message is the message it
    is, named by its subject when it has no file name (its content parsed once)."""
    name = part.get_filename()
    if part.get_content_maintype() != "message":
        data = part.get_payload(decode=True)
        return name, data if isinstance(data, bytes) else None
    inner = part.get_content()
    if not hasattr(inner, "as_bytes"):
        return name, None
    if name is None and part.get_content_type() == "message/rfc822":
        name = str(inner.get("subject") or "").strip() or None
    return name, inner.as_bytes()


def _mail_text(part: Any) -> str:
    """A text part's content; a charset Python does not know is read as UTF-8, its
    undecodable bytes replaced, rather than losing the message."""
    try:
        content = part.get_content()
    except LookupError:
        content = (part.get_payload(decode=True) or b"").decode("utf-8", "replace")
    return content if isinstance(content, str) else ""  # a body that is not text


def _addresses(header: Any) -> list[Any]:
    """A header's addresses, or the header as written when it is not a list of them."""
    found = getattr(header, "addresses", None)
    return list(found) if found else [header]


def _people(fields: list[tuple[str, list[str]]]) -> Element | None:
    """Who wrote a message and to whom, as its first line: part of what it says."""
    from email.header import decode_header, make_header

    def readable(value: str) -> str:
        try:  # "=?GBK?B?...?= <daemon@example.org>": an encoded word left as written
            return str(make_header(decode_header(value)))
        except Exception:
            return value

    parts = [
        f"{label}: {', '.join(readable(v) for v in values)}" for label, values in fields if values
    ]
    return Element(kind="text", text="; ".join(parts) + ".") if parts else None


def _msg(path: str, options: ParseOptions) -> ParsedFile:
    """An Outlook message (python-oxmsg): its HTML body through the HTML path, else its
    plain-text body in es-rag's paragraphs; the subject as title, the sender and the
    recipients as a first line, as for EML; then its attachments (``_with_attachments``)."""
    from oxmsg import Message

    try:
        msg = Message.load(path)
        html_body, body = msg.html_body, msg.body
        subject, sender = msg.subject, msg.sender
        recipients = [r.email_address or r.name for r in msg.recipients]
        attachments = [
            (a.file_name, a.file_bytes)
            for a in msg.attachments
            if (a.mime_type or "").lower() not in _NOT_CONTENT
        ]
    except Exception as exc:  # oxmsg raises plain errors on a damaged message
        raise CorruptDocumentError(
            f"a damaged Outlook message: {type(exc).__name__}: {exc}"
        ) from None
    if html_body and html_body.strip():
        elements = _html_elements(html_body.encode("utf-8"))[0]
    else:
        elements = _text_elements(body or "")
    people = _people([("From", [sender] if sender else []), ("To", [r for r in recipients if r])])
    elements = _with_attachments(people, elements, attachments, options)
    return ParsedFile(mime=detect.MSG, elements=elements, title=(subject or "").strip() or None)


MAX_ATTACHMENTS = 100
# Parts that travel as attachments but are the message's machinery, not its content.
_NOT_CONTENT = frozenset(
    {
        "application/pgp-signature",
        "application/pgp-keys",
        "application/pkcs7-signature",
        "application/x-pkcs7-signature",
        "application/ms-tnef",
    }
)
_SUFFIX = re.compile(r"\.[a-z0-9]{1,10}")


def _with_attachments(
    people: Element | None,
    body: list[Element],
    attachments: list[tuple[str | None, bytes | None]],
    options: ParseOptions,
) -> list[Element]:
    """A message's elements: who wrote to whom, the attachments' names, the body, then
    each attachment es-rag can read under a heading "Attachment: <name>".

    The body is cleaned here as a mail's (headings guessed); an attachment is what a
    file would be: its type sniffed from its bytes, read by that type's parser and
    cleaned by that type's rules (Parser.parse does not clean mail again). Its headings
    go one level down, under its own. One that cannot be read (an unknown or damaged
    format, an image without OCR, an Outlook message embedded without bytes) is only
    named: the message is never refused for an attachment. An attached mail's own
    attachments are named, not read (one level), and past ``MAX_ATTACHMENTS`` the rest
    are named only. All of it is one parse: its memory, CPU and time limits hold for the
    message with its attachments (ES_RAG_MAIL_ATTACHMENTS=false reads bodies only).
    """
    named = [(name or "").strip() for name, _ in attachments]
    head = [people] if people else []
    if any(named):
        listed = ", ".join(n for n in named if n)
        head.append(Element(kind="text", text=f"Attachments: {listed}."))
    # A mail's headings are guessed (Unstructured's on plain text, bold lines in HTML).
    out = clean(head + body, guessed_titles=True)
    if not options.mail_attachments or options.attachment_depth > 0:
        return out
    inner = replace(options, attachment_depth=options.attachment_depth + 1)
    with tempfile.TemporaryDirectory(prefix="es-rag-attachments-") as tmp:
        for n, ((_, data), name) in enumerate(zip(attachments, named, strict=True)):
            if not data or n >= MAX_ATTACHMENTS:
                continue
            label = name or f"attachment {n + 1}"
            # The name's suffix helps the sniff (.csv, .md); the name itself is not a path.
            suffix = Path(label).suffix.lower()
            file = Path(tmp) / (f"{n}{suffix}" if _SUFFIX.fullmatch(suffix) else str(n))
            file.write_bytes(data)
            try:
                parsed = _attachment(file, data, inner)
            except ConfigurationError:
                raise  # the installation's fault (a model missing): every file has it
            except Exception as exc:  # an input error, or a parser choking on the bytes
                log.info("attachment %r not read: %s: %s", label, type(exc).__name__, exc)
                continue
            finally:
                file.unlink()
            out.append(Element(kind="title", text=f"Attachment: {label}", level=1))
            out += [
                replace(e, level=(e.level or 1) + 1) if e.kind == "title" else e for e in parsed
            ]
    return out


def _attachment(file: Path, data: bytes, options: ParseOptions) -> list[Element]:
    """One attachment's cleaned elements, as ``Parser.parse`` reads a file."""
    from es_rag.parsing import cleaned

    mime = detect.sniff(data[: detect.SNIFF_BYTES], name=file.name, size=len(data))
    elements = cleaned(partition_file(str(file), mime, options))
    if not any(e.text.strip() for e in elements):
        raise EmptyDocumentError("no text")
    return elements


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
        outline = _pdf_outline(pdf)
    finally:
        pdf.close()
    if not title or JUNK_TITLE.match(" ".join(title.split())):
        title = root_title(outline) or (_largest_line(path) if has_text else None) or title
    elements: list[Element] = []
    if options.pdf_strategy != "ocr_only" and has_text:
        from unstructured.partition.pdf import partition_pdf

        raw = partition_pdf(
            filename=path, strategy="fast", languages=list(ocr_languages(options) or ["eng"])
        )
        elements = respace(to_elements(raw), _pdf_words(path))
        if not any(e.text.strip() for e in elements):
            # Unstructured returns nothing, silently, when a piece it needs is missing.
            raise CorruptDocumentError(
                "the PDF has a text layer but the parser extracted no text from it "
                + ("(pikepdf is not installed)" if not _has("pikepdf") else "(damaged?)")
            )
        return ParsedFile(
            mime=detect.PDF, elements=elements, title=title, pages=pages, outline=outline
        )
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
        outline=outline,
    )


# Destination view modes (PDF 32000 12.3.2.2) whose parameters give the top of the view.
_VIEW_TOP = {1: 1, 3: 0, 7: 0}  # XYZ left top zoom; FitH top; FitBH top


def _pdf_outline(pdf: Any) -> list[OutlineEntry]:
    """The bookmarks, each with its page and its position from the top of that page."""
    entries: list[OutlineEntry] = []
    heights: dict[int, float] = {}
    try:
        for bookmark in pdf.get_toc(max_depth=16):
            if len(entries) >= MAX_ENTRIES:
                break
            dest = bookmark.get_dest()
            index = dest.get_index() if dest is not None else None
            title = " ".join((bookmark.get_title() or "").split())
            if index is None or index < 0 or index >= len(pdf) or not title:
                continue
            top = None
            mode, params = dest.get_view()
            at = _VIEW_TOP.get(mode)
            if at is not None and len(params) > at and params[at]:
                if index not in heights:
                    heights[index] = float(pdf[index].get_size()[1])
                height = heights[index]
                if height > 0:
                    top = min(1.0, max(0.0, 1.0 - float(params[at]) / height))
            entries.append(OutlineEntry(bookmark.level, title, index + 1, top))
    except Exception:  # a damaged outline is no outline; the text is still read
        return []
    return entries


def _pdf_words(path: str) -> dict[int, set[str]]:
    """Each page's words as pdfium reads them (case-folded), for :func:`respace`."""
    import pypdfium2

    out: dict[int, set[str]] = {}
    try:
        pdf = pypdfium2.PdfDocument(path)
    except Exception:
        return out
    try:
        for index in range(len(pdf)):
            page = pdf[index]
            textpage = page.get_textpage()
            try:
                out[index + 1] = page_words(textpage.get_text_range())
            finally:
                textpage.close()
                page.close()
    except Exception:  # a page pdfium cannot read: no second opinion, nothing changes
        return out
    finally:
        pdf.close()
    return out


def _largest_line(path: str) -> str | None:
    """The first page's line in the largest type (the title page's title), if prose."""
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LTChar, LTTextContainer, LTTextLine

    lines: list[tuple[float, float, str]] = []  # (size, top, text)
    try:
        for page in extract_pages(path, page_numbers=[0], maxpages=1):
            for box in page:
                if not isinstance(box, LTTextContainer):
                    continue
                for line in box:
                    if not isinstance(line, LTTextLine):
                        continue
                    sizes = [ch.size for ch in line if isinstance(ch, LTChar)]
                    text = " ".join(line.get_text().split())
                    if sizes and text:
                        lines.append((round(sum(sizes) / len(sizes), 1), -line.y1, text))
    except Exception:
        return None
    if not lines:
        return None
    largest = max(size for size, _, _ in lines)
    if largest <= min(size for size, _, _ in lines):
        return None  # one size throughout: no title to tell apart
    ordered = [(size == largest, text) for size, _, text in sorted(lines, key=lambda x: x[1])]
    runs = [i for i, (big, _) in enumerate(ordered) if big and (i == 0 or not ordered[i - 1][0])]
    if len(runs) > 1:
        # The largest type in several places (a manual page's NAME, SYNOPSIS, ...): the
        # style of headings, not a title.
        return None
    title = " ".join(text for big, text in ordered if big)
    return title if is_heading(title) and len(title) <= 200 else None


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
    detect.XLS: _xls,
    detect.DOC: _doc,
    detect.ODT: _odt,
    detect.ODS: _ods,
    detect.ODP: _odp,
    detect.EPUB: _epub,
    detect.CSV: _csv,
    detect.TSV: _csv,
    detect.HTML: _html,
    detect.MARKDOWN: _markdown,
    detect.ASCIIDOC: _asciidoc,
    detect.RST: _rst,
    detect.INFO: _info,
    detect.MANPAGE: _manpage,
    detect.TEXT: _text,
    detect.RTF: _rtf,
    detect.EMAIL: _email,
    detect.MSG: _msg,
    # The type was sniffed already: each image type gets it rather than reading the file again.
    **{mime: partial(image_file, mime=mime) for mime in detect.IMAGES},
}
