"""Heading-aware chunking for plain text and Markdown, pure (no I/O).

Sections follow the Markdown heading hierarchy and become parent chunks (context, capped in
size); each child chunk carries its parent, its title path and
a ``context_header`` ("Document > Chapter > Section") that prefixes it for BM25 and for the
embedding, so a chunk can be read and found on its own. Chunks are packed from whole
sentences up to ``size`` words with about ``overlap`` words repeated from the previous
chunk; fenced code blocks are never cut.

Sizes are counted in words, a CJK character counting as one word. (The Unstructured-based
chunker that counts model tokens replaces this one in the parsing issue.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from es_rag.types import Chunk

CHUNKER_VERSION = "md-sections-2"

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SETEXT = re.compile(r"^(=+|-+)\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+(?=\S)|(?<=[。！？；…])")
_WORD = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|[^\s\u3400-\u9fff\uf900-\ufaff]+")


def count_words(text: str) -> int:
    return len(_WORD.findall(text))


@dataclass
class _Section:
    path: tuple[str, ...]
    blocks: list[tuple[str, str]]  # (kind, text): "text" or "code"


def _sections(text: str, title: str) -> list[_Section]:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    sections: list[_Section] = []
    heading_stack: list[tuple[int, str]] = []
    current = _Section(path=(title,), blocks=[])
    para: list[str] = []
    in_code = False
    code: list[str] = []

    def flush_para() -> None:
        if para and " ".join(para).strip():
            current.blocks.append(("text", "\n".join(para).strip()))
        para.clear()

    for i, line in enumerate(lines):
        if _FENCE.match(line):
            if in_code:
                code.append(line)
                current.blocks.append(("code", "\n".join(code)))
                code = []
                in_code = False
            else:
                flush_para()
                in_code = True
                code = [line]
            continue
        if in_code:
            code.append(line)
            continue
        match = _HEADING.match(line)
        level, heading = (len(match.group(1)), match.group(2).strip()) if match else (0, "")
        if not match and _SETEXT.match(line) and para and i > 0 and lines[i - 1].strip():
            # "Title\n=====" style headings: the paragraph's last line was the heading.
            heading = para.pop().strip()
            level = 1 if line.lstrip().startswith("=") else 2
        if level:
            flush_para()
            if current.blocks:
                sections.append(current)
            while heading_stack and heading_stack[-1][0] >= level:
                heading_stack.pop()
            heading_stack.append((level, heading))
            path = [title] + [h for _, h in heading_stack]
            if len(path) > 1 and path[1].casefold() == title.casefold():
                path.pop(1)  # "# Title" repeating the document title
            current = _Section(path=tuple(path), blocks=[])
            continue
        if not line.strip():
            flush_para()
        else:
            para.append(line)
    if in_code and code:
        current.blocks.append(("code", "\n".join(code)))
    flush_para()
    if current.blocks:
        sections.append(current)
    return sections


def _units(blocks: list[tuple[str, str]], size: int) -> list[tuple[str, str, int]]:
    """(kind, text, block number): sentences of text blocks, code blocks whole.

    Over-long sentences are split by words.
    """
    units: list[tuple[str, str, int]] = []
    for block, (kind, text) in enumerate(blocks):
        if kind == "code":
            units.append(("code", text, block))
            continue
        for sentence in _SENTENCE_END.split(text):
            sentence = sentence.strip()
            if not sentence:
                continue
            words = _WORD.findall(sentence)
            if len(words) <= size:
                units.append(("text", sentence, block))
                continue
            for start in range(0, len(words), size):
                piece = words[start : start + size]
                joiner = "" if all(len(w) == 1 and not w.isascii() for w in piece) else " "
                units.append(("text", joiner.join(piece), block))
    return units


def _join(units: list[tuple[str, str, int]]) -> str:
    """Sentences of one block joined as prose, blocks separated by a blank line."""
    out = ""
    for i, (_, text, block) in enumerate(units):
        if i == 0:
            out = text
        elif block != units[i - 1][2]:
            out += "\n\n" + text
        elif out[-1:] in "。！？；…" or not out[-1:].isascii():
            out += text
        else:
            out += " " + text
    return out


def _pack(units: list[tuple[str, str, int]], size: int) -> list[list[tuple[str, str, int]]]:
    """Consecutive groups of whole units, each at most ``size`` words (one unit may exceed)."""
    groups: list[list[tuple[str, str, int]]] = []
    words = 0
    for unit in units:
        n = count_words(unit[1])
        if groups and words + n <= size:
            groups[-1].append(unit)
            words += n
        else:
            groups.append([unit])
            words = n
    return groups


def chunk_text(
    text: str, *, title: str, size: int = 200, overlap: int = 30, parent_size: int = 800
) -> list[Chunk]:
    """Split a Markdown or plain-text document into parent and child chunks.

    Parents are sections (split when longer than ``parent_size`` words): context for the
    answer, never searched. Children are the searchable pieces, packed inside their parent
    with ``overlap``, so a child never straddles two parents and each knows its parent.
    Returned in document order: each parent, then its children.
    """
    if overlap >= size:
        raise ValueError("overlap must be smaller than size")
    parent_size = max(parent_size, size)
    chunks: list[Chunk] = []
    n_children = n_parents = 0
    for section in _sections(text, title):
        header = " > ".join(section.path)
        for group in _pack(_units(section.blocks, size), parent_size):
            parent = n_parents
            n_parents += 1
            chunks.append(
                Chunk(
                    ordinal=parent,
                    chunk_type="parent",
                    content=_join(group),
                    title_path=section.path,
                    context_header=header,
                    element_types=tuple(sorted({kind for kind, _, _ in group})),
                )
            )
            for body, kinds in _children(group, size, overlap):
                chunks.append(
                    Chunk(
                        ordinal=n_children,
                        chunk_type="child",
                        content=body,
                        title_path=section.path,
                        context_header=header,
                        parent_ordinal=parent,
                        element_types=kinds,
                    )
                )
                n_children += 1
    return chunks


def _children(
    units: list[tuple[str, str, int]], size: int, overlap: int
) -> Iterator[tuple[str, tuple[str, ...]]]:
    start = 0
    while start < len(units):
        end, words = start, 0
        while end < len(units):
            n = count_words(units[end][1])
            if end > start and words + n > size:
                break
            words += n
            end += 1
        yield _join(units[start:end]), tuple(sorted({kind for kind, _, _ in units[start:end]}))
        if end >= len(units):
            break
        # Step back over whole sentences worth about `overlap` words, never past `start`.
        back, carried = end, 0
        while back - 1 > start and carried + count_words(units[back - 1][1]) <= overlap:
            back -= 1
            carried += count_words(units[back][1])
        start = back


def guess_title(text: str, fallback: str) -> str:
    """The first level-1 Markdown heading, else ``fallback`` (usually the file stem)."""
    for line in text.splitlines():
        match = _HEADING.match(line)
        if match and len(match.group(1)) == 1:
            return match.group(2).strip()
        if line.strip() and not line.lstrip().startswith("#"):
            break
    return fallback
