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
- Guessed headings (PDF, plain text, e-mail, OCR) that read like sentences become text;
  so does any heading that is code or a fragment of a sentence (es_rag.headings).
- Tables of contents and indexes (pages of dot-leader lines or of "term, 12, 45" lines)
  become ``contents`` elements, which the chunker keeps apart and search leaves out.
- A PDF's outline, when it has one, gives the headings (es_rag.outline). Without one,
  guessed headings numbered as a hierarchy ("Chapter 3", "3.2", "3.2.1") take their level
  from their number (:func:`number_levels`).
"""

from __future__ import annotations

import re
import textwrap
import unicodedata
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from es_rag import cjk
from es_rag.headings import is_fragment, is_heading, looks_like_code
from es_rag.outline import OutlineEntry, apply_outline, margins, usable
from es_rag.types import Element

_CJK = cjk.LETTERS
_UNSPACED_CHAR = re.compile(f"[{cjk.UNSPACED}]")
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
_FURNITURE_WORDS = 15
_CHAPTER_PAGES = 3
MAX_TITLE_WORDS = 25
MAX_TITLE_CJK = 60


def normalize_text(text: str, *, code: bool = False) -> str:
    """NFKC outside full-width CJK punctuation; invisible characters out; spaces collapsed.

    ``code``: a code block keeps its lines' indentation and inner spacing (Python's
    indentation is its syntax; aligned columns are its meaning); only the block's common
    indentation, line ends' spaces and blank lines around it go.
    """
    text = text.translate(_INVISIBLE)
    if code:
        lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
        return textwrap.dedent("\n".join(lines).expandtabs(4)).strip("\n")
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


_LATIN_WORD = re.compile(r"[^\W\d_]{5,}")  # shorter words are not worth a second look
_MIN_PART = 2
_WORD_CHARS = re.compile(r"[^\W\d_]+")
# pdfium marks a soft hyphen U+FFFE; a hard one at a line's end also joins a word.
_SOFT_HYPHEN = re.compile(r"[\ufffe\x02]\s*")
_LINE_END_HYPHEN = re.compile(r"([^\W\d_]+)[-\u2010]\s*\r?\n\s*([^\W\d_]+)")


def page_words(text: str) -> set[str]:
    """The case-folded words of a page's text as an extractor gives it, a word hyphenated
    at a line's end counted whole as well as in its parts."""
    text = _SOFT_HYPHEN.sub("", text)
    found = {w.casefold() for w in _WORD_CHARS.findall(text)}
    return found | {(a + b).casefold() for a, b in _LINE_END_HYPHEN.findall(text)}


def respace(elements: Sequence[Element], words: dict[int, set[str]]) -> list[Element]:
    """Put back the spaces a PDF's text extraction lost ("definedand", "CLASSTEMPLATES").

    ``words``: the case-folded words of each page as a second extractor (pdfium) reads
    them. A word of an element that its page does not hold, but that splits into two
    words the page does hold, gets its space; nothing else changes, so a word is never
    split that the page prints whole. Chinese and Japanese, which put no spaces between
    words, are left alone.
    """
    out = []
    for el in elements:
        known = words.get(el.page) if el.page is not None else None
        if known and el.kind not in ("table", "code"):

            def split(m: re.Match[str], known: set[str] = known) -> str:
                word = m.group()
                folded = word.casefold()
                if folded in known or _UNSPACED_CHAR.search(word) or len(folded) != len(word):
                    return word
                for k in range(_MIN_PART, len(word) - _MIN_PART + 1):
                    if folded[:k] in known and folded[k:] in known:
                        return f"{word[:k]} {word[k:]}"
                return word

            text = _LATIN_WORD.sub(split, el.text)
            if text != el.text:
                el = replace(el, text=text)
        out.append(el)
    return out


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


def remove_furniture(elements: Sequence[Element], *, layout: bool = True) -> list[Element]:
    """Drop running headers/footers and page numbers, detected across pages.

    Candidates are short lines in a page's top or bottom band (es_rag.outline.margins: the
    top or bottom tenth, or level with the page's first or last line; without coordinates,
    the first and last two elements) and what the parser itself labelled header, footer
    or page number. A candidate that recurs (digits masked) on at least half of the
    pages, and on two or more, is furniture; so is one with a number that recurs on three
    or more (a running header that changes with the chapter: "CHAPTER 22. CLASS
    TEMPLATES" on the chapter's even pages), and a candidate that is a page number.
    ``layout``: pages laid out by a printer (PDF, scans), where a bare number in a margin
    is a page number; elsewhere (a slide's last line "40", a sheet's) only the parser's
    own page-number label is.
    """
    by_page: dict[int, list[int]] = defaultdict(list)
    for i, el in enumerate(elements):
        if el.page is not None:
            by_page[el.page].append(i)
    candidates = {i for i in margins(elements) if len(elements[i].text.split()) <= _FURNITURE_WORDS}
    for i, el in enumerate(elements):
        if el.kind in ("header", "footer", "page_number"):
            candidates.add(i)
    pages_with: dict[str, set[int]] = defaultdict(set)
    for i in candidates:
        el = elements[i]
        if el.page is not None and el.kind not in ("table", "code") and len(el.text) <= 200:
            key = _furniture_key(el)
            # A heading recurs word for word; its number is kept, so mark that it has one.
            has_number = el.kind == "title" and any(ch.isdigit() for ch in key)
            pages_with[key + " #" if has_number else key].add(el.page)
    threshold = max(2, (len(by_page) + 1) // 2)
    recurring = {
        key
        for key, pages in pages_with.items()
        if len(pages) >= threshold or ("#" in key and len(pages) >= _CHAPTER_PAGES)
    }
    out: list[Element] = []
    for i, el in enumerate(elements):
        if i in candidates and el.kind not in ("table", "code"):
            if el.kind == "page_number" or (layout and is_page_number(el.text)):
                continue
            key = _furniture_key(el)
            if key in recurring or key + " #" in recurring:
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


def demote_non_headings(elements: Sequence[Element], *, guessed: bool) -> list[Element]:
    """A heading that is code, a piece of a sentence, or a line inside a code listing is
    body text. ``guessed``: the parser guessed the headings from the page's look, so every
    test applies; declared headings (HTML, Markdown, DOCX styles) lose only to markup."""

    def code(i: int) -> bool:
        el = elements[i]
        return el.kind == "code" or (el.kind != "title" and looks_like_code(el.text))

    out = []
    for i, el in enumerate(elements):
        if el.kind == "title":
            text = el.text.strip()
            if guessed:
                listing = 0 < i < len(elements) - 1 and code(i - 1) and code(i + 1)
                demote = not is_heading(text) or listing
            else:
                demote = looks_like_code(text, declared=True) or is_fragment(text, guessed=False)
            if demote:
                el = replace(el, kind="text", level=None)
        out.append(el)
    return out


_LEADER = re.compile(r"(?:\.\s?){4,}\s*(?:\d+|[ivxlc]+)?\s*$|…{2,}\s*\d*\s*$")
_LEADER_RUN = re.compile(r"(?:\.\s?){4,}\s*(?:\d+|[ivxlc]+)\b")
# "4.2 General options 12": a numbered heading and its page, without the leader dots.
_NUMBERED_ENTRY = re.compile(r"^\d{1,2}(?:\.\d{1,3})*\.?\s*[^\W\d_].{0,150}?\s\d{1,4}$")
_INDEX_REF = re.compile(r",\s*(?:\d{1,4}|[ivxlc]{1,5})(?:[–-]\d{1,4})?(?=\s|,|$)")
_NAVIGATION_SHARE = 0.5
_NAVIGATION_MIN = 5
_ENTRY_SHARE = 0.25


def _navigation_line(el: Element) -> tuple[int, bool]:
    """(how many entries of a contents or index page the element holds, whether it is a
    bare number such a page also holds). Parsers often run a page's entries together
    into one element: each leader ("...... 82") then counts."""
    text = el.text.strip()
    if is_page_number(text):
        return 0, True
    if (_LEADER.search(text) or _NUMBERED_ENTRY.match(text)) and len(text) <= 300:
        return max(1, len(_LEADER_RUN.findall(text))), False
    leaders = len(_LEADER_RUN.findall(text))
    if leaders and leaders * 12 >= len(text.split()):
        return leaders, False
    refs = len(_INDEX_REF.findall(text))
    return (refs if refs * 3 >= len(text.split()) else 0), False


def mark_navigation(elements: Sequence[Element]) -> list[Element]:
    """Pages that are a table of contents or an index: their elements become ``contents``.

    A page is one when half its lines are entries (leader dots, "4.2 Options 12", "term,
    12, 45") or the bare page numbers beside them, and entries are at least a quarter of
    its lines (a code listing's line numbers alone do not make a page of contents). Such
    pages list every heading and every term, so they match every question and cite
    nothing; they stay in the index (a reader may want them) but out of search.
    """
    by_page: dict[int, list[int]] = defaultdict(list)
    for i, el in enumerate(elements):
        if el.page is not None and el.kind not in ("table", "image", "code"):
            by_page[el.page].append(i)
    marked: set[int] = set()
    for idxs in by_page.values():
        found = [_navigation_line(elements[i]) for i in idxs if elements[i].kind != "title"]
        entries = sum(n for n, _ in found)
        numbers = sum(number for _, number in found)
        lines = sum(max(1, n) for n, _ in found)  # an element of many entries is many lines
        if (
            lines >= _NAVIGATION_MIN
            and entries >= max(3, _ENTRY_SHARE * lines)
            and entries + numbers >= _NAVIGATION_SHARE * lines
        ):
            marked.update(idxs)
    return [
        replace(el, kind="contents", level=None) if i in marked else el
        for i, el in enumerate(elements)
    ]


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
    elements: Sequence[Element],
    *,
    layout: bool = False,
    guessed_titles: bool = False,
    outline: Sequence[OutlineEntry] = (),
) -> list[Element]:
    """Everything above, in order. ``layout``: text laid out on pages (PDF, OCR);
    ``outline``: the PDF's bookmarks."""
    out: list[Element] = []
    for el in elements:
        text = normalize_text(el.text, code=el.kind == "code")
        if text or el.html:
            out.append(replace(el, text=text))
    if guessed_titles:
        out = demote_sentences(out)
    out = demote_non_headings(out, guessed=guessed_titles)
    if layout:
        out = [
            el if el.kind in ("table", "code") else replace(el, text=join_broken_lines(el.text))
            for el in out
        ]
        out = mark_navigation(out)
    entries = usable(outline)
    if entries:
        out = apply_outline(out, entries)
    out = remove_furniture(out, layout=layout)
    if layout:
        out = merge_continuations(out)
    if guessed_titles and not entries:
        out = number_levels(out)
    return out


# "Chapter 3", "Appendix B", "Part 2" (level 1); "3.2.1 The hostname", "A.1. The maze",
# "4 Results" (levels from the count of numbers). Not "2023 Report", not "A new start".
_CHAPTER = re.compile(r"^(?:chapter|part|appendix)\s+(?:\d{1,2}|[A-Z])\b", re.IGNORECASE)
_SECTION = re.compile(r"^(?:\d{1,2}|[A-Z](?=\.\d))((?:\.\d{1,3})*)\.?\s+\S")
_MIN_NESTED = 2  # numbered sub-sections that show a document numbers its sections
MAX_LEVEL = 6


def _number_depth(text: str) -> int | None:
    if _CHAPTER.match(text):
        return 1
    match = _SECTION.match(text)
    return 1 + match.group(1).count(".") if match else None


def numbered(text: str) -> bool:
    """Whether a heading opens with a section number: a section, never a document title."""
    return _number_depth(text.strip()) is not None


def number_levels(elements: Sequence[Element]) -> list[Element]:
    """Guessed headings with levels from their numbers, where the document numbers its
    sections as a hierarchy (at least two sub-sections such as "3.2").

    A plain-text manual or a PDF without bookmarks gives its headings no levels, so each
    replaced the last in a chunk's title path ("3.2.1. The hostname", not "Chapter 3 ›
    3.2. Systemd init › 3.2.1. The hostname"). An unnumbered heading ("Note", "Table
    3.1") sits under the last numbered one; before the first it is at the top.
    """
    depths = [_number_depth(el.text) if el.kind == "title" else None for el in elements]
    if sum(1 for d in depths if d and d > 1) < _MIN_NESTED:
        return list(elements)
    out = []
    current = 0  # the depth of the last numbered heading
    for el, depth in zip(elements, depths, strict=True):
        if el.kind == "title" and el.level is None:
            if depth:
                current = min(depth, MAX_LEVEL)
                el = replace(el, level=current)
            else:
                el = replace(el, level=min(current + 1, MAX_LEVEL))
        out.append(el)
    return out
