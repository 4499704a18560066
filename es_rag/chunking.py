"""Structure-aware chunking of parsed elements, pure (no I/O).

Sections follow the heading hierarchy and become parent chunks (context for the answer,
capped in size, never searched); each child chunk is packed inside its parent and carries
its title path and a ``context_header`` line ("Document > Chapter > Section") that
prefixes it for BM25 and the embedding, so it can be read and found on its own.

Sizes are counted by ``count_tokens``: the Ingestor passes the embedding model's own
tokenizer, so ``size`` means model tokens; when ``max_tokens`` (the model's input limit)
is given, a child plus its header never exceeds it, so no chunk is silently truncated by
the embedder. Children are packed from whole sentences (English and Chinese boundaries)
with about ``overlap`` tokens carried over from the previous child. A table row and a
code block are never cut: a table too big for one child is split between rows, and every
part repeats the caption and the header row; code runs whole unless it exceeds a parent.
Headings that head nothing (a trailing "Regards") are kept as text, so nothing is lost.

:func:`text_elements` (es_rag.markdown) reads Markdown-flavoured plain text (the Python
API's ``Document(text=...)``) into the same elements the parser produces for files.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from es_rag import cjk
from es_rag.markdown import text_elements
from es_rag.types import Chunk, Element

# 2: CJK counting shared with analysis and cleaning (kana and the rarer Han blocks count
# one per character, as the common ones did).
# 3: a table of contents or an index (``contents`` elements) is chunked apart from text.
CHUNKER_VERSION = "structure-3"
# The parser_version of documents given as text (``text_elements``), not as files.
TEXT_PARSER_VERSION = "es-rag-text-2"  # 2: markdown-it-py (CommonMark + GFM tables)

Counter = Callable[[str], int]

_WORD = re.compile(f"[{cjk.LETTERS}]|[^\\s{cjk.LETTERS}]+")
_LATIN_BREAK = re.compile(r"(?<=[.!?;:])\s+(?=\S)")
# A CJK sentence ends at 。！？；… and keeps the closing quotes or brackets that follow.
_CJK_SENTENCE = re.compile(r"[^。！？；…]*[。！？；…]+[”’」』）)\]\"']*|[^。！？；…]+")
_CJK_CHAR = re.compile(f"[{cjk.UNSPACED}]")
# A list item that already carries its marker (Markdown text); others get "- ".
_LIST_MARKER = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])\s")
_MIN_CHILD = 16


def count_words(text: str) -> int:
    """Words, a CJK character counting as one: the default size unit."""
    return len(_WORD.findall(text))


def estimate_tokens(text: str) -> int:
    """Word-based estimate (≈ 4/3 tokens per word for subword tokenizers; CJK 1 per char)."""
    return max(1, round(count_words(text) * 4 / 3))


# --- sections ----------------------------------------------------------------------------
@dataclass
class _Section:
    path: tuple[str, ...]
    elements: list[Element]


def _real_headings(elements: Sequence[Element]) -> set[int]:
    """Indices of headings that head some body text (directly or through sub-headings)."""
    real: set[int] = set()
    stack: list[tuple[int, int]] = []  # (level, index)
    for i, el in enumerate(elements):
        if el.kind == "title":
            level = el.level or 1
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, i))
        else:
            real.update(idx for _, idx in stack)
    return real


def _sections(elements: Sequence[Element], title: str) -> list[_Section]:
    real = _real_headings(elements)
    sections: list[_Section] = []
    stack: list[tuple[int, str]] = []
    current = _Section(path=(title,), elements=[])
    for i, el in enumerate(elements):
        heading = " ".join(el.text.split())
        if el.kind == "title" and not stack and heading.casefold() == title.casefold():
            # A heading repeating the document title before any other heading (a mail's
            # subject again in its body, after the sender line) is the first part of every
            # title path already, whether or not text comes before or after it.
            continue
        if el.kind != "title" or i not in real:
            current.elements.append(el if el.kind != "title" else _as_text(el))
            continue
        level = el.level or 1
        if current.elements:
            sections.append(current)
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, heading))
        current = _Section(path=(title, *(h for _, h in stack)), elements=[])
    if current.elements:
        sections.append(current)
    return sections


def _as_text(el: Element) -> Element:
    return Element(kind="text", text=el.text, page=el.page, page_end=el.page_end)


# --- units: the pieces chunks are packed from ----------------------------------------------
@dataclass(frozen=True)
class _Unit:
    kind: str
    text: str
    tokens: int
    block: int  # the element it came from: units of one block join as prose
    page: int | None
    atomic: bool = False  # a table part or code: never split, never repeated as overlap
    last_page: int | None = None  # where the element ends, when it runs over a page break


def _sentences(text: str) -> list[str]:
    out = []
    for part in _LATIN_BREAK.split(text):
        out += [m.group().strip() for m in _CJK_SENTENCE.finditer(part) if m.group().strip()]
    return out


def _split_long(sentence: str, limit: int, count: Counter) -> list[str]:
    """A sentence longer than a child, cut between words (or CJK characters); the pieces
    are slices of the sentence, so its text (spacing included) is unchanged."""
    spans: list[tuple[int, int]] = []
    for m in _WORD.finditer(sentence):
        if spans and not any(ch.isalnum() for ch in m.group()):
            spans[-1] = (spans[-1][0], m.end())  # punctuation stays with the word before it
        else:
            spans.append(m.span())
    pieces: list[str] = []
    step = max(1, int(limit * 0.7))  # ~1.3 tokens a word; checked and halved below
    start = 0
    while start < len(spans):
        n = min(step, len(spans) - start)
        while True:
            piece = sentence[spans[start][0] : spans[start + n - 1][1]]
            if n == 1 or count(piece) <= limit:
                break
            n = max(1, n // 2)
        pieces.append(piece)
        start += n
    return pieces


def table_rows(el: Element) -> list[list[str]]:
    """A table's rows of cell texts, from its HTML (or one row of its text)."""
    if el.html:
        from lxml import html as lxml_html

        try:
            root = lxml_html.fromstring(el.html)
        except Exception:  # malformed HTML: fall back to the flat text
            root = None
        if root is not None:
            rows = []
            for tr in root.iter("tr"):
                cells = [" ".join(c.text_content().split()) for c in tr if c.tag in ("td", "th")]
                if any(cells):
                    rows.append([c.replace("|", "\\|") for c in cells])
            if rows:
                return rows
    return [[" ".join(el.text.split())]] if el.text.strip() else []


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table_units(
    el: Element, caption: str | None, block: int, limit: int, count: Counter
) -> list[_Unit]:
    rows = table_rows(el)
    if not rows:
        return []
    head = [caption] if caption else []
    head += [_row(rows[0]), _row(["---"] * len(rows[0]))]
    body = [_row(r) for r in rows[1:]]
    whole = "\n".join(head + body)
    n = count(whole)
    if n <= limit or not body:
        return [_Unit("table", whole, n, block, el.page, atomic=True)]
    head_text = "\n".join(head)
    budget = max(1, limit - count(head_text))
    units: list[_Unit] = []
    part: list[str] = []
    used = 0
    for line in body:
        t = count(line)
        if part and used + t > budget:
            text = head_text + "\n" + "\n".join(part)
            units.append(_Unit("table", text, count(text), block, el.page, atomic=True))
            part, used = [], 0
        part.append(line)
        used += t
    text = head_text + "\n" + "\n".join(part)
    units.append(_Unit("table", text, count(text), block, el.page, atomic=True))
    return units


def _code_units(el: Element, block: int, cap: int, count: Counter) -> list[_Unit]:
    """A fenced code block whole; split between lines only when it would exceed a parent."""
    fenced = f"```\n{el.text}\n```"
    n = count(fenced)
    if n <= cap:
        return [_Unit("code", fenced, n, block, el.page, atomic=True)]
    units: list[_Unit] = []
    lines: list[str] = []
    for line in el.text.split("\n"):
        candidate = "```\n" + "\n".join([*lines, line]) + "\n```"
        if lines and count(candidate) > cap:
            text = "```\n" + "\n".join(lines) + "\n```"
            units.append(_Unit("code", text, count(text), block, el.page, atomic=True))
            lines = []
        lines.append(line)
    text = "```\n" + "\n".join(lines) + "\n```"
    units.append(_Unit("code", text, count(text), block, el.page, atomic=True))
    return units


def _is_caption_for_table(el: Element, nxt: Element | None) -> bool:
    if nxt is None or nxt.kind != "table":
        return False
    if el.kind == "caption":
        return True
    text = el.text.strip()
    return (
        el.kind == "text"
        and len(text) <= 200
        and bool(
            re.match(
                r"^(table|tab\.|tabelle|tableau|表)\s*[\dA-Za-z一二三四五六七八九十]", text, re.I
            )
        )
    )


def _units(elements: Sequence[Element], limit: int, cap: int, count: Counter) -> list[_Unit]:
    units: list[_Unit] = []
    skip: set[int] = set()
    for block, el in enumerate(elements):
        if block in skip:
            continue
        nxt = elements[block + 1] if block + 1 < len(elements) else None
        if el.kind == "table":
            units += _table_units(el, None, block, limit, count)
            continue
        if _is_caption_for_table(el, nxt) and nxt is not None and table_rows(nxt):
            units += _table_units(nxt, " ".join(el.text.split()), block, limit, count)
            skip.add(block + 1)
            continue
        if el.kind == "code":
            units += _code_units(el, block, cap, count)
            continue
        text = el.text.strip()
        if not text:
            continue
        if el.kind == "list_item" and not _LIST_MARKER.match(text):
            text = "- " + text
        sentences = _sentences(text)
        if el.kind == "notes" and sentences:
            sentences[0] = "Notes: " + sentences[0]  # the label travels with the notes
        for sentence in sentences:
            n = count(sentence)
            pieces = [sentence] if n <= limit else _split_long(sentence, limit, count)
            for piece in pieces:
                tokens = n if piece is sentence else count(piece)
                units.append(_Unit(el.kind, piece, tokens, block, el.page, last_page=el.page_end))
    return units


def _join(units: Sequence[_Unit]) -> str:
    """Sentences of one element joined as prose, elements separated by a blank line."""
    out = ""
    for i, unit in enumerate(units):
        if i == 0:
            out = unit.text
        elif unit.block != units[i - 1].block or unit.atomic or units[i - 1].atomic:
            out += "\n\n" + unit.text
        elif _CJK_CHAR.match(out[-1]) or _CJK_CHAR.match(unit.text[0]):
            out += unit.text
        else:
            out += " " + unit.text
    return out


def _pack(units: Sequence[_Unit], size: int) -> list[list[_Unit]]:
    """Consecutive groups of whole units, each at most ``size`` (one unit may exceed)."""
    groups: list[list[_Unit]] = []
    used = 0
    for unit in units:
        if groups and used + unit.tokens <= size:
            groups[-1].append(unit)
            used += unit.tokens
        else:
            groups.append([unit])
            used = unit.tokens
    return groups


def _children(units: Sequence[_Unit], size: int, overlap: int) -> Iterator[list[_Unit]]:
    start = 0
    while start < len(units):
        end, used = start, 0
        while end < len(units):
            if end > start and used + units[end].tokens > size:
                break
            used += units[end].tokens
            end += 1
        yield list(units[start:end])
        if end >= len(units):
            break
        # Step back over whole sentences worth about `overlap`, never past `start`, never
        # over a table part or a code block (those are not repeated), and never so far that
        # the next child would hold nothing new.
        back, carried = end, 0
        while (
            back - 1 > start
            and not units[back - 1].atomic
            and carried + units[back - 1].tokens <= overlap
            and carried + units[back - 1].tokens + units[end].tokens <= size
        ):
            back -= 1
            carried += units[back].tokens
        start = back


def _runs(units: Sequence[_Unit]) -> list[list[_Unit]]:
    """Units split where ``contents`` (a table of contents, an index) starts or stops, so
    that no chunk mixes them with text: search leaves such chunks out."""
    runs: list[list[_Unit]] = []
    for unit in units:
        if runs and (runs[-1][-1].kind == "contents") == (unit.kind == "contents"):
            runs[-1].append(unit)
        else:
            runs.append([unit])
    return runs


def _pages(units: Sequence[_Unit]) -> tuple[int | None, int | None]:
    pages = [p for u in units for p in (u.page, u.last_page) if p is not None]
    return (min(pages), max(pages)) if pages else (None, None)


def chunk_elements(
    elements: Sequence[Element],
    *,
    title: str,
    size: int = 200,
    overlap: int = 30,
    parent_size: int = 800,
    count_tokens: Counter = count_words,
    max_tokens: int | None = None,
) -> list[Chunk]:
    """Parent and child chunks of a parsed document, in document order.

    Each parent (a section, split when longer than ``parent_size``) is followed by its
    children, whose ``parent_ordinal`` names it; children never straddle two parents.
    """
    if overlap >= size:
        raise ValueError("overlap must be smaller than size")
    parent_size = max(parent_size, size)
    chunks: list[Chunk] = []
    n_children = n_parents = 0
    for section in _sections(elements, title):
        header = " > ".join(section.path)
        limit = size
        if max_tokens is not None:
            limit = max(_MIN_CHILD, min(size, max_tokens - count_tokens(header) - 2))
        step = min(overlap, limit // 2)
        units = _units(section.elements, limit, parent_size, count_tokens)
        for group in (g for run in _runs(units) for g in _pack(run, parent_size)):
            parent = n_parents
            n_parents += 1
            start, end = _pages(group)
            chunks.append(
                Chunk(
                    ordinal=parent,
                    chunk_type="parent",
                    content=_join(group),
                    title_path=section.path,
                    context_header=header,
                    page_start=start,
                    page_end=end,
                    element_types=tuple(sorted({u.kind for u in group})),
                )
            )
            for piece in _children(group, limit, step):
                start, end = _pages(piece)
                chunks.append(
                    Chunk(
                        ordinal=n_children,
                        chunk_type="child",
                        content=_join(piece),
                        title_path=section.path,
                        context_header=header,
                        parent_ordinal=parent,
                        page_start=start,
                        page_end=end,
                        element_types=tuple(sorted({u.kind for u in piece})),
                    )
                )
                n_children += 1
    return chunks


def chunk_text(text: str, *, title: str, **options: object) -> list[Chunk]:
    """:func:`chunk_elements` over :func:`text_elements` (Markdown-flavoured text)."""
    return chunk_elements(text_elements(text), title=title, **options)  # type: ignore[arg-type]
