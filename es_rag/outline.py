"""A PDF's outline (its bookmarks) as the document's heading tree. Pure; no I/O.

A book made with LaTeX, DocBook or a word processor carries its chapters, sections and
subsections, each with its page and position, in the outline. That is the author's own
heading tree, so where a PDF has one it replaces the parser's guesses: the element that
prints an entry's heading (found on the entry's page by :func:`~es_rag.headings.heading_key`,
nearest the entry's position) becomes the heading, at the entry's depth; an entry whose
heading is not printed as a line of its own is inserted where the entry points; every
other "heading" the parser guessed is body text; and a line in a page's top or bottom band
that repeats an entry (the running header "CHAPTER 22. CLASS TEMPLATES 568") is furniture.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from es_rag.headings import heading_key, numbering
from es_rag.types import Element

_BAND = 0.1  # the top and bottom tenth of a page hold running headers and footers
_EDGE = 0.015  # a line this close to a page's first or last line shares its band
_WINDOW = 2  # without coordinates: elements from the top and bottom of a page
_HEADER_WORDS = 15
_HEADER_REACH = 0.15  # a band line this far from its bookmark is a running header
_NEAR_BOTTOM = 0.85  # an entry pointing this low may have its heading on the next page
MAX_ENTRIES = 20_000
# A chapter's label printed on its own line above the chapter's name.
_LABEL = re.compile(
    r"^\s*(?:chapter|part|appendix|kapitel|chapitre|capítulo|capitolo|chapitre)\s+"
    r"(?:\d+|[IVXLC]+|[A-Z])\.?\s*$|^\s*第\s*[0-9一二三四五六七八九十百]+\s*[章部篇]\s*$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class OutlineEntry:
    """One bookmark: its depth (0 = top), text, 1-based page and position on that page
    (a fraction of the page's height from the top; None when the bookmark does not say)."""

    level: int
    title: str
    page: int
    top: float | None = None


def usable(outline: Sequence[OutlineEntry]) -> list[OutlineEntry]:
    """The entries that form a heading tree, or [] when the outline is not one.

    A single top entry over all others, on the first pages, names the document (its
    title), not a section: its children move up a level. An outline whose entries all
    point at one page says nothing about sections.
    """
    entries = [e for e in outline if e.title.strip() and e.page >= 1][:MAX_ENTRIES]
    if root_title(entries):
        entries = [replace(e, level=e.level - 1) for e in entries[1:]]
    if len({e.page for e in entries}) < 2:
        return []
    return entries


def root_title(outline: Sequence[OutlineEntry]) -> str | None:
    """The document's name when the outline has one entry above all the others, and it
    points at the start of the document (a one-chapter excerpt's chapter does not)."""
    tops = [e for e in outline if e.level == 0 and e.title.strip()]
    if len(tops) == 1 and len(outline) > 1 and outline[0] is tops[0] and tops[0].page <= 2:
        return " ".join(tops[0].title.split())
    return None


def _top(el: Element) -> float | None:
    return min(y for _, y in el.coordinates) if el.coordinates else None


def margins(elements: Sequence[Element]) -> set[int]:
    """Indices of the elements in a page's top or bottom band, where running headers,
    footers and page numbers sit: the top and bottom tenth of the page, or the line
    level with the page's first or last line (a book's header may sit lower than a tenth),
    or, without coordinates, the first and last two elements of the page."""
    by_page: dict[int, list[int]] = defaultdict(list)
    for i, el in enumerate(elements):
        if el.page is not None:
            by_page[el.page].append(i)
    out: set[int] = set()
    for idxs in by_page.values():
        placed = [i for i in idxs if elements[i].coordinates]
        first = min((_top(elements[i]) or 0.0 for i in placed), default=0.0)
        last = max((_bottom(elements[i]) for i in placed), default=1.0)
        ends = set(idxs[:_WINDOW]) | set(idxs[-_WINDOW:])
        for i in idxs:
            el = elements[i]
            if not el.coordinates:
                if i in ends:
                    out.add(i)
                continue
            top, bottom = _top(el) or 0.0, _bottom(el)
            if bottom <= max(_BAND, first + _EDGE) or top >= min(1.0 - _BAND, last - _EDGE):
                out.add(i)
    return out


def _bottom(el: Element) -> float:
    return max(y for _, y in el.coordinates) if el.coordinates else 1.0


def apply_outline(elements: Sequence[Element], outline: Sequence[OutlineEntry]) -> list[Element]:
    """The elements with the outline's headings and without the running headers it names.

    ``outline`` should come through :func:`usable`. Elements of kind ``contents`` (a table
    of contents or an index, which list every heading) are never taken for a heading.
    """
    entries = sorted(outline, key=lambda e: (e.page, e.top if e.top is not None else 0.0))
    if not entries:
        return list(elements)
    by_page: dict[int, list[int]] = defaultdict(list)
    for i, el in enumerate(elements):
        if el.page is not None:
            by_page[el.page].append(i)
    keys = {heading_key(e.title) for e in entries} - {""}
    element_keys = {
        i: heading_key(el.text)
        for i, el in enumerate(elements)
        if el.kind in ("title", "text", "header", "footer", "list_item") and len(el.text) <= 300
    }

    band = margins(elements)
    matched: dict[int, OutlineEntry] = {}
    absorbed: set[int] = set()  # the second and third lines of a heading set on several
    inserted: list[tuple[int, Element]] = []  # (index to insert before, heading)
    for entry in entries:
        key = heading_key(entry.title)
        pages = [entry.page]
        if entry.top is None or entry.top >= _NEAR_BOTTOM:
            pages.append(entry.page + 1)
        taken = matched.keys() | absorbed
        found = [
            [i]
            for page in pages
            for i in by_page.get(page, [])
            if i not in taken and key and element_keys.get(i) == key
        ]
        found += _split_headings(element_keys, pages, by_page, key, taken)
        # A running header far from where the bookmark points is not the heading: the
        # heading is inserted at the bookmark instead.
        found = [run for run in found if not _far_header(elements[run[0]], entry, run[0] in band)]
        heading = Element(kind="title", text=" ".join(entry.title.split()), level=entry.level + 1)
        if found:
            # The printed heading nearest the bookmark, not a running header that repeats it.
            best = min(found, key=lambda run: _distance(elements[run[0]], entry, run[0] in band))
            matched[best[0]] = entry
            absorbed.update(best[1:])
            continue
        inserted.append((_position(elements, by_page, entry), replace(heading, page=entry.page)))

    out: list[Element] = []
    queue = sorted(inserted, key=lambda item: item[0])
    q = 0
    for i, el in enumerate(elements):
        while q < len(queue) and queue[q][0] <= i:
            out.append(queue[q][1])
            q += 1
        if i in absorbed:
            continue
        if i in matched:
            entry = matched[i]
            number = numbering(el.text) if i not in band else ""  # not a header's page number
            text = " ".join(entry.title.split())
            if number and not text.startswith(number):
                text = f"{number} {text}"
            out.append(replace(el, kind="title", text=text, level=entry.level + 1))
            continue
        if (
            el.kind != "contents"
            and element_keys.get(i) in keys
            and len(el.text.split()) <= _HEADER_WORDS
            and i in band
        ):
            continue  # a running header or footer repeating a chapter or section name
        if _LABEL.match(el.text) and (i + 1 in matched or _next_inserted(queue, q, i)):
            continue  # "Chapter 22" printed above the chapter's heading: part of it
        if el.kind == "title":
            el = replace(el, kind="text", level=None)
        out.append(el)
    out += [heading for _, heading in queue[q:]]
    return out


def _next_inserted(queue: Sequence[tuple[int, Element]], q: int, i: int) -> bool:
    """Whether an inserted heading goes right after element ``i``."""
    return q < len(queue) and queue[q][0] == i + 1


def _split_headings(
    element_keys: dict[int, str],
    pages: Sequence[int],
    by_page: dict[int, list[int]],
    key: str,
    taken: set[int],
) -> list[list[int]]:
    """Runs of two or three consecutive lines that together print the entry's heading (a
    long heading the layout broke: "18.5 Smart 'smart pointer' construction:" /
    "'make_shared' and" / "'make_unique'")."""
    runs: list[list[int]] = []
    if not key:
        return runs
    for page in pages:
        idxs = by_page.get(page, [])
        for n, i in enumerate(idxs):
            if i in taken or not element_keys.get(i) or not key.startswith(element_keys[i]):
                continue
            joined, run = element_keys[i], [i]
            for j in idxs[n + 1 : n + 3]:
                if j in taken or not element_keys.get(j):
                    break
                joined += element_keys[j]
                run.append(j)
                if joined == key:
                    runs.append(run)
                    break
                if not key.startswith(joined):
                    break
    return runs


def _far_header(el: Element, entry: OutlineEntry, in_band: bool) -> bool:
    top = _top(el)
    if not in_band or top is None or entry.top is None:
        return False
    return abs(top + ((el.page or entry.page) - entry.page) - entry.top) > _HEADER_REACH


def _distance(el: Element, entry: OutlineEntry, in_band: bool) -> float:
    """How far a printed heading is from the bookmark; without positions, a line in the
    page's band (where a running header repeats the heading) is the worse match."""
    top = _top(el)
    if top is None or entry.top is None:
        return 0.75 if in_band else 0.5
    page_gap = (el.page or entry.page) - entry.page
    return abs(top + page_gap - entry.top)


def _position(
    elements: Sequence[Element], by_page: dict[int, list[int]], entry: OutlineEntry
) -> int:
    """Where an entry whose heading was not found goes: before the first element of its
    page that lies below the entry's position (or at the page's start), else after the
    page's last element."""
    page = by_page.get(entry.page)
    if not page:
        later = [idxs[0] for p, idxs in by_page.items() if p > entry.page]
        return min(later) if later else len(elements)
    for i in page:
        top = _top(elements[i])
        if entry.top is None or top is None or top >= entry.top - 0.01:
            return i
    return page[-1] + 1
