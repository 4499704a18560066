"""How right the title paths of a parsed document are, measured against the document itself.

A PDF's outline names every chapter and section with its page, so it says which heading
covers each page without asking es-rag's parser; an HTML page's ``<h1>``-``<h6>`` do the
same for a documentation page. These figures are what ``scripts/eval_structure.py`` prints
and what the tests on real Debian documentation hold to:

- ``covered``: the share of searchable child chunks whose title path ends in a heading
  that covers them: for a PDF, an outline entry that starts on one of the chunk's pages or
  is the last to start before them (front matter before the first entry: the document
  title alone); for HTML, one of the page's own headings;
- ``code_elements``: title-path elements that look like code
  (:func:`~es_rag.headings.looks_like_code`) and are not the author's own headings
  (outline entries, HTML headings), counted once per distinct path;
- ``running_header_share``: the share of searchable children whose text still holds a
  running header of one of their pages. The headers are read from the PDF itself
  (pdfium's first and last line of each page, not the parser es-rag uses): an edge line
  that recurs on three or more pages with only its numbers changing, or that repeats an
  outline entry next to a number ("542 CHAPTER 18. THE STANDARD TEMPLATE LIBRARY");
- ``parents_per_child``: sections per child chunk (near 1 means every chunk is its own
  "section", a sign of headings taken from noise);
- ``permalink_share`` (HTML): children whose title path keeps a permalink sign;
- ``glued_share`` (PDF): words of the chunks that pdfium reads as two words of the same
  pages ("definedand"): spaces lost by the text extraction.
"""

from __future__ import annotations

import bisect
import re
import subprocess
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from es_rag import cjk
from es_rag.cleaning import page_words
from es_rag.headings import heading_key, looks_like_code
from es_rag.outline import OutlineEntry, usable
from es_rag.types import Chunk

_MIN_HEADER_KEY = 6
_HEADER_PAGES = 3
_MIN_GLUED = 5
_UNSPACED = re.compile(f"[{cjk.UNSPACED}]")
_WORDS = re.compile(r"[^\W\d_]+")


@dataclass
class StructureReport:
    document: str
    title: str
    pages: int | None
    headings: int  # outline entries (PDF) or HTML headings the check knows
    children: int  # searchable child chunks
    navigation_children: int  # children of tables of contents and indexes (not searched)
    parents: int
    covered: float
    code_elements: int
    running_header_share: float
    parents_per_child: float
    permalink_share: float = 0.0  # HTML: children whose title path keeps a "¶" or "§"
    glued_share: float = 0.0  # PDF: words whose space the text extraction lost

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _searchable(chunks: Sequence[Chunk]) -> tuple[list[Chunk], int]:
    children = [c for c in chunks if c.chunk_type == "child"]
    searchable = [c for c in children if "contents" not in c.element_types]
    return searchable, len(children) - len(searchable)


def _squash(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _code_elements(chunks: Sequence[Chunk], authored: set[str]) -> int:
    paths = {c.title_path for c in chunks}
    return len(
        {
            element
            for path in paths
            for element in path[1:]
            if looks_like_code(element) and heading_key(element) not in authored
        }
    )


def pdf_report(
    name: str,
    title: str,
    pages: int | None,
    outline: Sequence[OutlineEntry],
    chunks: Sequence[Chunk],
    text: PdfText,
) -> StructureReport:
    """The figures for a PDF with an outline (see the module's docstring); ``text`` from
    :func:`pdf_text`."""
    headers = text.headers
    entries = sorted(usable(outline), key=lambda e: e.page)
    starts = [e.page for e in entries]
    keys = [heading_key(e.title) for e in entries]
    children, navigation = _searchable(chunks)
    good = 0
    for chunk in children:
        first = chunk.page_start or 1
        last = chunk.page_end or first
        lo = bisect.bisect_left(starts, first)
        hi = bisect.bisect_right(starts, last)
        accepted = set(keys[lo:hi])
        if lo > 0:
            accepted.add(keys[lo - 1])
        end = heading_key(chunk.title_path[-1]) if len(chunk.title_path) > 1 else None
        if end is None:
            good += lo == 0  # front matter: the document title alone
        elif end in accepted:
            good += 1
    with_header = 0
    for chunk in children:
        squashed = _squash(chunk.content)
        first = chunk.page_start or 0
        last = chunk.page_end or first
        near = (h for page in range(first - 1, last + 2) for h in headers.get(page, ()))
        if any(h in squashed for h in near):
            with_header += 1
    parents = sum(c.chunk_type == "parent" for c in chunks)
    return StructureReport(
        document=name,
        title=title,
        pages=pages,
        headings=len(entries),
        children=len(children),
        navigation_children=navigation,
        parents=parents,
        covered=good / len(children) if children else 0.0,
        code_elements=_code_elements(children, set(keys)),
        running_header_share=with_header / len(children) if children else 0.0,
        parents_per_child=parents / len(children) if children else 0.0,
        glued_share=glued_share(children, text.words),
    )


@dataclass
class PdfText:
    """What pdfium reads on each page, independently of the parser under test: the
    running headers and footers (squashed: letters and digits only) and the words."""

    headers: dict[int, list[str]]
    words: dict[int, set[str]]


def pdf_text(path: Path, outline: Sequence[OutlineEntry]) -> PdfText:
    """Headers are edge lines (a page's first and last) with a number that recur on three
    or more pages with only the number changing, or that repeat an outline entry."""
    import pypdfium2

    keys = {heading_key(e.title) for e in outline} - {""}
    edges: dict[int, list[str]] = {}
    words: dict[int, set[str]] = {}
    pdf = pypdfium2.PdfDocument(str(path))
    try:
        for index in range(len(pdf)):
            page = pdf[index]
            textpage = page.get_textpage()
            try:
                text = textpage.get_text_range()
            finally:
                textpage.close()
                page.close()
            lines = [ln for ln in text.splitlines() if ln.strip()]
            words[index + 1] = page_words(text)
            if lines:
                edges[index + 1] = list(dict.fromkeys([lines[0], lines[-1]]))
    finally:
        pdf.close()
    recurring: dict[str, set[int]] = defaultdict(set)
    for page, lines in edges.items():
        for line in lines:
            recurring[re.sub(r"\d+", "#", _squash(line))].add(page)
    headers: dict[int, list[str]] = {}
    for page, lines in edges.items():
        for line in lines:
            squashed = _squash(line)
            letters = sum(ch.isalpha() for ch in squashed)
            numbered = any(ch.isdigit() for ch in squashed)
            repeats = len(recurring[re.sub(r"\d+", "#", squashed)]) >= _HEADER_PAGES
            if letters >= _MIN_HEADER_KEY and numbered and (repeats or heading_key(line) in keys):
                headers.setdefault(page, []).append(squashed)
    return PdfText(headers, words)


def glued_share(chunks: Sequence[Chunk], words: dict[int, set[str]]) -> float:
    """The share of words in the chunks that pdfium reads as two words of their pages
    ("definedand", "CLASSTEMPLATES"): spaces the text extraction lost."""
    total = glued = 0
    for chunk in chunks:
        first = chunk.page_start or 0
        last = chunk.page_end or first
        known = set().union(*(words.get(p, set()) for p in range(first, last + 1)))
        for token in _WORDS.findall(chunk.content):
            token = token.casefold()
            if _UNSPACED.search(token):
                continue  # Chinese and Japanese put no spaces between words
            total += 1
            if token in known or len(token) < _MIN_GLUED:
                continue
            if any(token[:k] in known and token[k:] in known for k in range(2, len(token) - 1)):
                glued += 1
    return glued / total if total else 0.0


def html_headings(data: bytes) -> list[str]:
    """The headings of the page's main content (``<main>``, ``[role=main]``, else the
    whole page), as a reader sees them (permalink signs dropped): a sidebar's "Table of
    Contents" is not one of them."""
    from lxml import html as lxml_html

    root = lxml_html.fromstring(data, parser=lxml_html.HTMLParser(encoding="utf-8"))
    main = root.xpath("//main | //*[@role='main']")
    scope = main[0] if main else root
    out = []
    for h in scope.xpath(".//h1 | .//h2 | .//h3 | .//h4 | .//h5 | .//h6"):
        text = " ".join(h.text_content().split()).rstrip("¶§#🔗 ").strip()
        if text:
            out.append(text)
    return out


def html_report(
    name: str, title: str, headings: Sequence[str], chunks: Sequence[Chunk]
) -> StructureReport:
    """The figures for an HTML page against its own headings."""
    keys = {heading_key(h) for h in headings} | {heading_key(title)}
    children, navigation = _searchable(chunks)
    good = sum(heading_key(c.title_path[-1]) in keys for c in children)
    parents = sum(c.chunk_type == "parent" for c in chunks)
    with_sign = sum(any(re.search(r"[¶§]\s*$", e) for e in c.title_path) for c in children)
    return StructureReport(
        document=name,
        title=title,
        pages=None,
        headings=len(headings),
        children=len(children),
        navigation_children=navigation,
        parents=parents,
        covered=good / len(children) if children else 0.0,
        code_elements=_code_elements(children, keys),
        running_header_share=0.0,
        parents_per_child=parents / len(children) if children else 0.0,
        permalink_share=with_sign / len(children) if children else 0.0,
    )


def debian_package(candidates: Sequence[str], cache: Path) -> Path:
    """The files of the first Debian package of ``candidates`` that the archive has,
    downloaded with ``apt-get download`` and unpacked under ``cache`` (once)."""
    cache.mkdir(parents=True, exist_ok=True)
    for name in candidates:
        root = cache / name
        if (root / ".unpacked").exists():
            return root
        debs = list(cache.glob(f"{name}_*.deb"))
        if not debs:
            done = subprocess.run(
                ["apt-get", "download", name],
                cwd=cache,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            debs = list(cache.glob(f"{name}_*.deb"))
            if done.returncode != 0 or not debs:
                continue
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(root)], check=True, timeout=600)
        (root / ".unpacked").touch()
        return root
    raise FileNotFoundError(f"none of {', '.join(candidates)} could be downloaded with apt-get")


# --- markup sources beside the HTML made of them (AsciiDoc, reStructuredText) -------------
# A heading that is markup: an anchor, an attribute entry or reference, a block attribute
# line, a labelled-list term; a directive or a role.
MARKUP_TITLE = re.compile(r"\[\[|\{\w[\w-]*\}|^:\w|::|^\[|^\.\. |:\w+:`")
_INCLUDE = re.compile(rb"^(?:\.\. )?include::", re.M)


def beside_html(root: Path) -> list[tuple[Path, Path]]:
    """AsciiDoc's layout: ``x.txt`` or ``x.adoc`` and the ``x.html`` made of it."""
    sources = sorted(p for p in root.rglob("*") if p.suffix in {".txt", ".adoc"})
    return [(s, s.with_suffix(".html")) for s in sources]


def sphinx_sources(root: Path) -> list[tuple[Path, Path]]:
    """A Sphinx site: ``_sources/<page>.rst.txt`` and ``<page>.html``."""
    sources = sorted((root / "_sources").rglob("*.rst.txt"))
    pages = [root / s.relative_to(root / "_sources") for s in sources]
    return [
        (s, p.with_name(p.name.replace(".rst.txt", ".html")))
        for s, p in zip(sources, pages, strict=True)
    ]


def read_alone(pairs: Sequence[tuple[Path, Path]], mime: str) -> list[tuple[Path, Path]]:
    """The pairs whose source es-rag reads as ``mime``, whose HTML exists, and that include
    no other file (es-rag reads a file alone: the HTML would hold what it leaves out)."""
    from es_rag import detect

    kept = []
    for source, html in pairs:
        data = source.read_bytes()
        sniffed = detect.sniff(data[: detect.SNIFF_BYTES], name=source.name, size=len(data))
        if sniffed == mime and html.exists() and not _INCLUDE.search(data):
            kept.append((source, html))
    return kept


def html_heading_keys(html: Path) -> list[str]:
    """The page's headings as keys (es_rag.headings.heading_key), AsciiDoc's manual-page
    suffix ("git-add(1) Manual Page") left out."""
    return [heading_key(re.sub(r" Manual Page$", "", h)) for h in html_headings(html.read_bytes())]
