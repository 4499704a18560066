"""GNU Info manuals → elements.

Debian ships the GNU manuals as Info files (``/usr/share/info/sed.info.gz``,
``coreutils.info.gz``; split ones as ``find.info-1.gz``), the output of ``makeinfo``. Read
as plain text, each node's header (``File: sed.info,  Node: Overview,  Next: …``), its
menu and the file's tag table became text, and no heading became a section. Their layout
is fixed by makeinfo, so it is read here line by line:

- a node begins after a ``\\x1f`` line with its header line, which is left out, as are the
  file's preamble (the licence and directory entry that the Top node repeats), its tag
  tables and its ``Local Variables`` block;
- a heading is a line underlined to its width by one character repeated: ``*`` for a
  chapter (level 1), ``=`` a section, ``-`` a subsection, ``.`` a subsubsection; the Top
  node's heading is the manual's title;
- a menu (``* Menu:`` to the node's end or its footnotes) is the manual's table of contents,
  and an index node is one long menu: both are ``contents``, kept out of search;
- a block whose every line is indented five spaces or more is an example (code) unless it
  reads as a sentence (a quotation, a table item's description); other blocks are
  paragraphs, their lines joined.

Linear in the text, no recursion: read in the worker itself up to
``ES_RAG_PARSE_INLINE_MAX_KB``, as Markdown is, and in the parse child above that size or
when compressed (the child inflates it).
"""

from __future__ import annotations

import re

from es_rag.headings import looks_like_code
from es_rag.types import Element

_PREAMBLE = re.compile(r"This is [^\n]{1,300}?, produced by (?:makeinfo|texi2any)\b")
# "File: sed.info,  Node: Top,  Next: …" (the directory's own: "File: dir\tNode: Top\t…")
_NODE = re.compile(r"\x1f\r?\nFile: [^\n,\t]{1,300}[,\t]\s*Node: ")
_HEADER = re.compile(r"File: [^\n,\t]{1,300}[,\t]\s*Node: ([^,\t\n]*)")
_INDIRECT = re.compile(r"\x1f\r?\nIndirect:")
# makeinfo marks an index node and an image with NUL-backspace cookies in the text:
# "\x00\x08[index\x00\x08]". Marks, not words. (A sniffed head may end inside one.)
_COOKIE = re.compile(r"\x00\x08\[[^\x00]{0,2000}\x00\x08\]")
_COOKIE_BYTES = re.compile(rb"\x00\x08\[[^\x00]{0,2000}(?:\x00\x08\]|\Z)")
_SKIPPED = ("Tag Table:", "End Tag Table", "Indirect:", "Local Variables:")
_LEVELS = {"*": 1, "=": 2, "-": 3, ".": 4}
_FOOTNOTES = re.compile(r"^-{5,} Footnotes -{5,}$")
# A sentence's end; an ellipsis ends a synopsis ("sed SCRIPT INPUTFILE...").
_SENTENCE_END = re.compile(r"(?:(?<!\.)\.|[!?:;)])['\"’”)]*$")


def looks_like_info(text: str) -> bool:
    """makeinfo's first line, or a node header after a node separator."""
    start = text.lstrip("\ufeff")
    return bool(_PREAMBLE.match(start)) or bool(_NODE.search(start[:65536]))


def info_nuls_only(head: bytes) -> bool:
    """Every NUL byte of ``head`` is one of an Info file's cookies: text, not binary."""
    return looks_like_info(head.decode("utf-8", "replace")) and (
        b"\x00" not in _COOKIE_BYTES.sub(b"", head)
    )


def parts_only(text: str) -> bool:
    """A split manual's first file: its preamble and the table of its parts
    (``find.info-1``, ``find.info-2``), which hold every node."""
    return bool(_INDIRECT.search(text))


def info_elements(text: str) -> tuple[list[Element], str | None]:
    """The manual's elements in reading order, and its title (the Top node's heading)."""
    out: list[Element] = []
    title: str | None = None
    parts = _COOKIE.sub("", text.replace("\r\n", "\n")).split("\x1f")
    for n, part in enumerate(parts):
        body = part.lstrip("\n")
        first, _, rest = body.partition("\n")
        header = _HEADER.match(first)
        if header is None:
            if n == 0 and len(parts) > 1:
                continue  # the preamble: licence and directory entry, repeated in Top
            if first.startswith(_SKIPPED):
                continue
            rest = body  # text with no node header: read it as it stands
        elements = _node(rest.split("\n"))
        top = header is not None and header.group(1).strip() == "Top"
        if top and title is None and elements and elements[0].kind == "title":
            title = elements.pop(0).text
        out += elements
    return out, title


def _node(lines: list[str]) -> list[Element]:
    out: list[Element] = []
    block: list[str] = []
    menu: list[str] | None = None

    def flush() -> None:
        if block:
            out.extend(_blocks(block))
            block.clear()

    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        if menu is not None:
            if _FOOTNOTES.match(line.strip()):
                _close_menu(menu, out)
                menu = None
            else:
                menu.append(line)
            i += 1
            continue
        if line == "* Menu:":
            flush()
            menu = []
            i += 1
            continue
        if _FOOTNOTES.match(line.strip()):
            flush()
            i += 1
            continue
        level = _underline(line, lines[i + 1].rstrip() if i + 1 < len(lines) else "")
        if level is not None and not block:
            out.append(Element(kind="title", text=" ".join(line.split()), level=level))
            i += 2
            continue
        if line.strip():
            block.append(line)
        else:
            flush()
        i += 1
    flush()
    if menu is not None:
        _close_menu(menu, out)
    return out


def _underline(line: str, under: str) -> int | None:
    """The heading level ``under`` gives ``line``, or None when it is no underline."""
    text = line.strip()
    if not text or line[:1] == " " or len(under) < 3 or under[0] not in _LEVELS:
        return None
    if under != under[0] * len(under):
        return None
    # makeinfo underlines to the heading's width; wide (CJK) characters count twice there.
    if not len(text) <= len(under) <= 2 * len(text) + 1:
        return None
    return _LEVELS[under[0]]


def _close_menu(lines: list[str], out: list[Element]) -> None:
    text = "\n".join(line for line in lines if line.strip())
    if text:
        out.append(Element(kind="contents", text=text))


def _blocks(lines: list[str]) -> list[Element]:
    """An indented block splits where its indentation deepens or comes back: a table
    item's description ("Be careful with -i:") and the example under it, indented further,
    unless the deeper lines read as a sentence (a nested table's term and description).
    A block at the margin keeps its deeper lines: a table's terms and their description."""
    margin = _margin(lines)
    if margin < 5:
        return [_block(lines, margin)]
    runs: list[list[str]] = []
    for line in lines:
        deeper = _margin([line]) > margin
        if runs and (_margin([runs[-1][-1]]) > margin) == deeper:
            runs[-1].append(line)
        else:
            runs.append([line])
    out: list[Element] = []
    for n, run in enumerate(runs):
        if n and _margin(run) > margin and _prose("\n".join(line.strip() for line in run)):
            # A description under its term: one paragraph, as a table's at the margin.
            runs[n - 1] += run
            out[-1] = _block(runs[n - 1], 0)
        else:
            out.append(_block(run, _margin(run)))
    return out


def _margin(lines: list[str]) -> int:
    return min(len(line) - len(line.lstrip(" ")) for line in lines)


def _block(lines: list[str], margin: int) -> Element:
    if margin >= 5:
        body = "\n".join(line[margin:] for line in lines)
        if not _prose(body):
            return Element(kind="code", text=body)
    return Element(kind="text", text=" ".join(" ".join(lines).split()))


def _prose(text: str) -> bool:
    """An indented block that reads as a sentence: a quotation or an item's description."""
    lines = [line for line in text.split("\n") if line.strip()]
    return (
        len(text.split()) >= 3
        and bool(_SENTENCE_END.search(text.rstrip()))
        and 2 * sum(looks_like_code(line) for line in lines) < len(lines)
    )
