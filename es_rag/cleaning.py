"""Pure clean-up of parsed elements: what a parser leaves that a reader would not keep.

- Unicode normalisation (NFKC, so ligatures, full-width Latin and odd spaces become plain
  text), except full-width CJK punctuation, which Chinese text keeps; soft hyphens and
  zero-width characters go.
- Page furniture: running headers and footers (a line that recurs at the top or bottom of
  most pages, page numbers masked) and page numbers are removed. A parser's own "header"
  guess that does not recur is kept as text: one guess is not evidence.
- Broken lines (PDF and OCR): words hyphenated across a line end are joined; Chinese lines
  that the layout broke mid-sentence are re-joined without the stray space, inside an
  element and across consecutive elements.
- Guessed headings (PDF, plain text, e-mail, OCR) that read like sentences become text.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from es_rag import cjk
from es_rag.types import Element

_CJK = cjk.LETTERS
_CJK_PUNCT = cjk.PUNCT
_KEEP = re.compile(f"[{_CJK_PUNCT}]")
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u200c\u200d\u2060\ufeff"), None)
_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200a\u202f\u205f\u3000]+")
_CJK_GAP = re.compile(f"(?<=[{_CJK}{_CJK_PUNCT}])[ \t]*\n?[ \t]*(?=[{_CJK}{_CJK_PUNCT}])")
_HYPHEN_BREAK = re.compile(r"(?<=[^\W\d_])-[ \t]*\n[ \t]*(?=[a-zà-ÿ])")
# Unstructured joins a PDF's lines with a space before we see them: "infor- mation".
# Keep "pre- and post-" style elisions, where the next word is a conjunction.
_HYPHEN_SPACE = re.compile(
    r"(?<=[a-zà-ÿ]{2})- (?!(?:and|or|to|nor|und|oder|et|ou|y|o)\b)(?=[a-zà-ÿ]{2})"
)
_SENTENCE_END = re.compile(r"[.!?;:。！？；：…]['\"’”)）」』]*$")
# A guessed heading ending like this is a sentence; "What is RAG?" and "Notes:" stay headings.
_STATEMENT_END = re.compile(r"[.!;。！；…]['\"’”)）」』]*$")
# A CJK letter or a CJK mark that does not end a sentence (，、“（…).
_CJK_OPEN_END = re.compile(f"[{_CJK}，、“‘（《【〈「『]$")
_PAGE_NUMBER = re.compile(
    r"^(?:(?:page|p\.|seite|pagina|página)\s*)?[-–—(\[]?\s*(?:\d+|(?=[ivx])x{0,3}(?:ix|iv|v?i{0,3}))\s*[-–—)\]]?"
    r"(?:\s*(?:of|/|von|de|sur)\s*\d+)?$|^第\s*\d+\s*页(?:\s*共\s*\d+\s*页)?$|^\d+\s*/\s*\d+$",
    re.IGNORECASE,
)
_FURNITURE_WINDOW = 2  # without coordinates: elements from the top and bottom of a page
_FURNITURE_BAND = 0.1  # with coordinates: the top and bottom tenth of the page
_FURNITURE_WORDS = 15
MAX_TITLE_WORDS = 25
MAX_TITLE_CJK = 60


def normalize_text(text: str) -> str:
    """NFKC outside full-width CJK punctuation; invisible characters out; spaces collapsed."""
    text = text.translate(_INVISIBLE)
    if not text.isascii():
        out, last = [], 0
        for match in _KEEP.finditer(text):
            out.append(unicodedata.normalize("NFKC", text[last : match.start()]))
            out.append(match.group())
            last = match.end()
        out.append(unicodedata.normalize("NFKC", text[last:]))
        text = "".join(out)
    lines = [_SPACES.sub(" ", line).strip() for line in text.replace("\r\n", "\n").split("\n")]
    return "\n".join(lines).strip()


def join_broken_lines(text: str) -> str:
    """Undo a page layout's line breaks: hyphenation, CJK breaks, then plain newlines."""
    text = _HYPHEN_BREAK.sub("", text)
    text = _HYPHEN_SPACE.sub("", text)
    text = _CJK_GAP.sub("", text)
    return re.sub(r"\s*\n\s*", " ", text)


def _furniture_key(el: Element) -> str:
    """What must recur for an element to be furniture: its text with numbers masked, except
    for headings, which must recur word for word ("Chapter 1" on page 1 and "Chapter 2" on
    page 2 are chapters; "ACME - page 3" and "ACME - page 4" are a running header)."""
    text = " ".join(el.text.lower().split())
    return text if el.kind == "title" else re.sub(r"\d+", "#", text)


def is_page_number(text: str) -> bool:
    return bool(_PAGE_NUMBER.match(text.strip())) and len(text.strip()) <= 24


def _in_margin(el: Element) -> bool | None:
    """Whether the element lies in the top or bottom band of its page (None: unknown)."""
    if not el.coordinates:
        return None
    ys = [y for _, y in el.coordinates]
    return max(ys) <= _FURNITURE_BAND or min(ys) >= 1.0 - _FURNITURE_BAND


def remove_furniture(elements: Sequence[Element]) -> list[Element]:
    """Drop running headers/footers and page numbers, detected across pages.

    Candidates are short lines in a page's top or bottom band (by coordinates, else the
    first and last two elements of the page) and what the parser itself labelled header,
    footer or page number. A candidate that recurs (digits masked) on at least half of the
    pages, and on two or more, is furniture; so is a candidate that is a page number.
    """
    by_page: dict[int, list[int]] = defaultdict(list)
    for i, el in enumerate(elements):
        if el.page is not None:
            by_page[el.page].append(i)
    candidates: set[int] = set()
    for idxs in by_page.values():
        ends = set(idxs[:_FURNITURE_WINDOW]) | set(idxs[-_FURNITURE_WINDOW:])
        for i in idxs:
            el = elements[i]
            margin = _in_margin(el)
            if (margin if margin is not None else i in ends) and (
                len(el.text.split()) <= _FURNITURE_WORDS
            ):
                candidates.add(i)
    for i, el in enumerate(elements):
        if el.kind in ("header", "footer", "page_number"):
            candidates.add(i)
    pages_with: dict[str, set[int]] = defaultdict(set)
    for i in candidates:
        el = elements[i]
        if el.page is not None and el.kind not in ("table", "code") and len(el.text) <= 200:
            pages_with[_furniture_key(el)].add(el.page)
    threshold = max(2, (len(by_page) + 1) // 2)
    recurring = {key for key, pages in pages_with.items() if len(pages) >= threshold}
    out: list[Element] = []
    for i, el in enumerate(elements):
        if i in candidates and el.kind not in ("table", "code"):
            if el.kind == "page_number" or is_page_number(el.text):
                continue
            if _furniture_key(el) in recurring:
                continue
            if el.kind in ("header", "footer"):
                if el.page is None:
                    continue  # a DOCX header/footer part: furniture by definition
                el = replace(el, kind="text")
        out.append(el)
    return out


def demote_sentences(elements: Sequence[Element]) -> list[Element]:
    """A guessed heading that ends like a sentence, or runs long, is body text."""
    out = []
    for el in elements:
        if el.kind == "title":
            text = el.text.strip()
            cjk = len(re.findall(f"[{_CJK}]", text))
            words = len(text.split())
            if _STATEMENT_END.search(text) or words > MAX_TITLE_WORDS or cjk > MAX_TITLE_CJK:
                el = replace(el, kind="text", level=None)
        out.append(el)
    return out


def _continues(prev: Element, nxt: Element) -> str | None:
    """The joiner if ``nxt`` continues ``prev``'s sentence (a layout break), else None."""
    if prev.kind != "text" or nxt.kind != "text":
        return None
    a, b = prev.text.rstrip(), nxt.text.lstrip()
    if not a or not b or _SENTENCE_END.search(a):
        return None
    if _CJK_OPEN_END.search(a) and re.match(f"[{_CJK}]", b[0]):
        return ""
    if a[-1] == "-" and a[-2:-1].isalpha() and b[0].islower():
        return "-"  # marker: drop the hyphen
    if ((a[-1].isalpha() and a[-1].islower()) or a[-1] in ",") and b[0].islower():
        return " "
    return None


def merge_continuations(elements: Sequence[Element]) -> list[Element]:
    """Join text elements that a page layout split mid-sentence (PDF, OCR)."""
    out: list[Element] = []
    for el in elements:
        joiner = _continues(out[-1], el) if out else None
        if joiner is None:
            out.append(el)
            continue
        prev = out[-1]
        head = prev.text.rstrip()
        text = head[:-1] + el.text.lstrip() if joiner == "-" else head + joiner + el.text.lstrip()
        end = el.page_end or el.page
        page_end = end if end is not None and end != prev.page else prev.page_end
        out[-1] = replace(prev, text=text, coordinates=None, page_end=page_end)
    return out


def clean(
    elements: Sequence[Element], *, layout: bool = False, guessed_titles: bool = False
) -> list[Element]:
    """Everything above, in order. ``layout``: text laid out on pages (PDF, OCR)."""
    out: list[Element] = []
    for el in elements:
        text = normalize_text(el.text)
        if text or el.html:
            out.append(replace(el, text=text))
    if guessed_titles:
        out = demote_sentences(out)
    if layout:
        out = [
            el if el.kind in ("table", "code") else replace(el, text=join_broken_lines(el.text))
            for el in out
        ]
    out = remove_furniture(out)
    if layout:
        out = merge_continuations(out)
    return out
