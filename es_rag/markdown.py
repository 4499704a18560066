"""Markdown-flavoured text → elements, with markdown-it-py (CommonMark plus GFM tables).

es-rag reads ``Document(text=...)`` and Markdown files this way (es_rag.parsing.child): ATX
and setext headings, paragraphs, list items (nested ones indented under their parent,
each with its marker), fenced and indented code kept whole, block quotes, and pipe tables
with their header row. A parser rather than line patterns: a ``#`` inside a block quote
or a list, a 4-space indented code block, a lazy continuation line or a ``---`` under a
list item mean what CommonMark says they mean.

Inline syntax (``**bold**``, ``[links](…)``, ``code``) is kept as written: the text is
what a reader sees in the source, and what BM25 and the embedding get.
"""

from __future__ import annotations

import html as html_lib
import re
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

from es_rag.errors import ParseLimitError
from es_rag.types import Element

if TYPE_CHECKING:  # imported when text is read: a fiftieth of a second of every CLI start
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

_CONTAINERS = frozenset(
    {
        "blockquote_open",
        "blockquote_close",
        "bullet_list_open",
        "bullet_list_close",
        "ordered_list_open",
        "ordered_list_close",
    }
)


# Block quotes and lists nested deeper are refused, as HTML nested deeper than its
# parsers read is: markdown-it-py stops nesting at ``maxNesting`` (20 by default) and drops
# what lies below without a word, and recurses once per level of quotes.
MAX_DEPTH = 250
_PREFIX = re.compile(r"^[ \t>*+\-\d.)]*", re.MULTILINE)


@cache
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    # Raw HTML stays text (a document is not a web page); tables are GFM's. A list level
    # is two tokens deep (the list and its item). No inline parse: only the blocks' source
    # text (``Token.content``) is read, and the inline tokens made every soft line break a
    # token of its own (about 40% of the parse on prose).
    options = {"html": False, "maxNesting": 2 * MAX_DEPTH + 20}
    return MarkdownIt("commonmark", options).enable("table").disable("inline")


def _too_deep(depth: int) -> ParseLimitError:
    return ParseLimitError(
        f"the text nests {depth:,} block quotes or lists deep; es-rag reads {MAX_DEPTH}",
        limit="depth",
    )


def text_elements(text: str) -> list[Element]:
    """The elements of Markdown-flavoured text, in reading order; ``ParseLimitError``
    (depth) for quotes or lists nested deeper than ``MAX_DEPTH``."""
    # Before the parser, which would recurse that deep: the quote markers opening a line.
    quotes = max((m.group().count(">") for m in _PREFIX.finditer(text)), default=0)
    if quotes > MAX_DEPTH:
        raise _too_deep(quotes)
    tokens = _parser().parse(text)
    depth = deepest = 0
    for tok in tokens:
        if tok.type in _CONTAINERS:
            depth += tok.nesting
            deepest = max(deepest, depth)
    if deepest > MAX_DEPTH:
        raise _too_deep(deepest)
    out: list[Element] = []
    lists: list[tuple[str, int | None]] = []  # (marker, next number) of each open list
    in_item = in_quote = 0
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        kind = tok.type
        if kind == "heading_open":
            text = tokens[i + 1].content.strip()
            if in_quote or in_item:  # a quoted heading is quoted text, not a section
                out.append(Element(kind="text", text=text))
            else:
                out.append(Element(kind="title", text=text, level=int(tok.tag[1])))
            i += 3
            continue
        if kind in ("bullet_list_open", "ordered_list_open"):
            start = int(tok.attrGet("start") or 1) if kind == "ordered_list_open" else None
            lists.append((tok.markup, start))
        elif kind in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
        elif kind == "list_item_open":
            in_item += 1
            marker, number = lists[-1]
            label = marker if number is None else f"{number}{marker}"
            if number is not None:
                lists[-1] = (marker, number + 1)
            out.append(_list_item(tokens, i, label, len(lists) - 1))
        elif kind == "list_item_close":
            in_item -= 1
        elif kind == "blockquote_open":
            in_quote += 1
        elif kind == "blockquote_close":
            in_quote -= 1
        elif kind == "paragraph_open" and not in_item:
            body = tokens[i + 1].content.strip()
            if body:
                out.append(Element(kind="text", text=body))
        elif kind in ("fence", "code_block") and not in_item:
            out.append(Element(kind="code", text=tok.content.rstrip("\n")))
        elif kind == "table_open":
            end = _closing(tokens, i)
            out.append(_table(tokens[i:end]))
            i = end
        i += 1
    return out


def _list_item(tokens: Sequence[Token], start: int, label: str, level: int) -> Element:
    """A list item's own paragraphs (not its nested lists'), behind its marker, indented
    by its nesting level so that a nested item still reads as one."""
    lines: list[str] = []
    depth = 0  # nested lists and tables: theirs, not this item's
    for tok in tokens[start + 1 :]:
        if tok.type == "list_item_close" and depth == 0:
            break
        if tok.type in ("bullet_list_open", "ordered_list_open", "table_open"):
            depth += 1
        elif tok.type in ("bullet_list_close", "ordered_list_close", "table_close"):
            depth -= 1
        elif depth == 0 and tok.type == "inline":
            lines.append(tok.content.strip())
        elif depth == 0 and tok.type in ("fence", "code_block"):
            lines.append(tok.content.rstrip("\n"))
    indent = "  " * level
    body = "\n".join(line for line in lines if line)
    return Element(kind="list_item", text=f"{indent}{label} {body}".rstrip())


def _closing(tokens: Sequence[Token], start: int) -> int:
    """The index of the token that closes the one opened at ``start``."""
    opening = tokens[start].type
    closing = opening.replace("_open", "_close")
    depth = 0
    for i in range(start, len(tokens)):
        if tokens[i].type == opening:
            depth += 1
        elif tokens[i].type == closing:
            depth -= 1
            if depth == 0:
                return i
    return len(tokens) - 1


def _table(tokens: Sequence[Token]) -> Element:
    """A GFM table: text rows for the chunker, HTML rows for the table splitter."""
    rows: list[list[str]] = []
    for tok in tokens:
        if tok.type == "tr_open":
            rows.append([])
        elif tok.type == "inline" and rows:
            rows[-1].append(tok.content.strip().replace("\\|", "|"))
    return table_element(rows)


def table_element(rows: list[list[str]]) -> Element:
    """A table's rows as text for the chunker, and as HTML rows for its table splitter
    (es_rag.rst's tables too)."""
    cells = "".join(
        "<tr>" + "".join(f"<td>{html_lib.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return Element(
        kind="table",
        text="\n".join(" ".join(r).strip() for r in rows),
        html=f"<table>{cells}</table>",
    )
