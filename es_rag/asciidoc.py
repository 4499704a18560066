"""AsciiDoc → Markdown-flavoured text, read then by es_rag.markdown.

AsciiDoc is the source of much technical documentation (Git's manual pages, Asciidoctor
sites, many product manuals), often in files named ``.txt``. Read as plain text, its markup
becomes the structure: an anchor ``[[id]]`` or an attribute entry ``:name: value`` is taken
for a heading, ``=== Title`` is not one, and a listing's ``----`` delimiter underlines the
line before it. There is no AsciiDoc parser in Python worth the dependency (Asciidoctor is
Ruby), so this reads the block structure line by line, as Asciidoctor's rules describe it,
and writes what each block means in CommonMark: section titles (``==`` and the two-line
forms) as ATX headings, listing and literal blocks and indented literal paragraphs as
fenced code, lists re-indented, labelled-list terms kept with their description, simple
tables as pipe tables; comments, anchors, attribute entries, block attribute lines and
preprocessor directives left out. Inline markup stays as written (as Markdown's does),
except cross references and link macros, which become the words a reader sees.
"""

from __future__ import annotations

import re

# Section titles: "== Title" (or Markdown's "## Title"); "=" alone is the document title.
_ATX = re.compile(r"^(={1,6}|#{1,6})[ \t]+(\S.*)$")
# Two-line titles: the underline's character gives the level (Asciidoctor's order).
_SETEXT = {"=": 1, "-": 2, "~": 3, "^": 4, "+": 5}
_UNDERLINE = re.compile(r"^([=\-~^+])\1+[ \t]*$")
# Delimited blocks: code (listing, literal), left out (comment), or containers whose
# lines are read as they are (example, sidebar, quote, open, passthrough).
_CODE = re.compile(r"^(-{4,}|\.{4,}|`{3}.*)$")
_COMMENT_BLOCK = re.compile(r"^/{4,}$")
_CONTAINER = re.compile(r"^(={4,}|\*{4,}|_{4,}|\+{4,}|--)$")
_TABLE = re.compile(r"^[|!,:]===+$")
_ANCHOR = re.compile(r"^\[\[[^\]]*\]\]|^\[#[^\]]*\]")
_BLOCK_ATTRIBUTES = re.compile(r"^\[[^\]]*\]$")
_SOURCE = re.compile(r"^\[(?:source)?,\s*([\w+#.-]+)")
_ATTRIBUTE_ENTRY = re.compile(r"^:(!?)(\w[\w-]*)(!?):(?:[ \t]+(.*))?$")
_ATTRIBUTE_REFERENCE = re.compile(r"\{(\w[\w-]*)\}")
# Asciidoctor's built-in character attributes, and Git's "{litdd}" (its pages' "--").
_BUILT_IN = {
    "empty": "", "blank": "", "sp": " ", "nbsp": " ", "zwsp": "", "wj": "", "apos": "'",
    "quot": '"', "lsquo": "\u2018", "rsquo": "\u2019", "ldquo": "\u201c", "rdquo": "\u201d",
    "deg": "\u00b0", "plus": "+", "brvbar": "\u00a6", "vbar": "|", "amp": "&", "lt": "<",
    "gt": ">", "startsb": "[", "endsb": "]", "caret": "^", "asterisk": "*", "tilde": "~",
    "backslash": "\\", "backtick": "`", "two-colons": "::", "two-semicolons": ";;",
    "cpp": "C++", "cxx": "C++", "pp": "++", "litdd": "--",
}  # fmt: skip
_DIRECTIVE = re.compile(r"^(?:include|ifdef|ifndef|ifeval|endif|toc)::\S*\[.*\]$")
_IMAGE = re.compile(r"^image::([^\[\s]+)\[([^,\]]*)")
_BLOCK_TITLE = re.compile(r"^\.([^\s.].*)$")
_LIST = re.compile(r"^[ \t]*(\*{1,5}|-|\.{1,5}|\d+\.)[ \t]+(.*)$")
_TERM = re.compile(r"^(\S.*?)(:{2,4}|;;)(?:[ \t]+(.*))?$")
_BREAK = re.compile(r"^(?:'{3,}|<{3})$")

# Inline: cross references and macros whose text is what a reader sees.
_XREF = re.compile(r"<<([^,>\n]{1,500})(?:,\s*([^>\n]{1,500}))?>>")
_MACRO = re.compile(
    r"\b(link|xref|mailto|linkgit|kbd|btn|footnote|pass|image|icon|menu|anchor):"
    r"([^\s\[]{0,2000})\[([^\]]{0,2000})\]"
)
_URL_TEXT = re.compile(r"\b((?:https?|ftp|irc)://[^\s\[]{1,2000})\[([^\]]{0,2000})\]")

# Signs that a file named .txt (or not named at all) is AsciiDoc; each kind counts once.
_SIGNS = {
    "anchor": re.compile(r"^\[\[[\w:.-]+\]\]\s*$", re.M),
    "block": re.compile(
        r"^\[(?:source|listing|literal|verse|quote|NOTE|TIP|IMPORTANT|WARNING|CAUTION|"
        r"cols=|options=|horizontal|abstract|appendix|partintro)[^\]]*\]\s*$",
        re.M,
    ),
    "directive": re.compile(r"^(?:include|ifdef|ifndef|endif|image)::\S*\[", re.M),
    "table": re.compile(r"^\|===\s*$", re.M),
    "macro": re.compile(r"\b(?:linkgit|xref|link):[^\s\[]{1,500}\[[^\]\n]{0,500}\]"),
    "xref": re.compile(r"<<[\w:.-]{1,500}(?:,[^>\n]{1,500})?>>"),
    "section": re.compile(r"^={2,6} \S", re.M),
}


def looks_like_asciidoc(text: str) -> bool:
    """Two kinds of AsciiDoc-only markup: one is found in prose by chance (a ``<<x>>``,
    a line ``== x``), two are not; reStructuredText's ``::`` and field lists (which look
    like attribute entries) are not counted."""
    return sum(1 for sign in _SIGNS.values() if sign.search(text)) >= 2


def to_markdown(text: str) -> str:
    """The document as CommonMark that means what the AsciiDoc meant (see module doc)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    widths: list[int] = []  # the indent of each open list level's items' text
    language = ""
    attributes: dict[str, str | None] = {}
    fresh = True  # at the start of a block: after a blank line or a line left out
    attached = False  # after "+": the next block belongs to the list item before it
    in_term = False  # lines right after a labelled list's term belong to its description
    i, n = 0, len(lines)
    while i < n:
        line = lines[i].rstrip()
        stripped = line.strip()
        if not stripped:
            out.append("")
            fresh, in_term = True, False
            i += 1
            continue
        if _COMMENT_BLOCK.match(line):
            i = _find(lines, i, line) + 1
            continue
        if stripped.startswith("//") and not stripped.startswith("///"):
            i += 1
            continue
        entry = _ATTRIBUTE_ENTRY.match(stripped)
        if entry:
            # ":name: value" sets what "{name}" reads from here on; ":name!:" unsets it.
            unset, name, unset_after, value = entry.groups()
            attributes[name] = None if unset or unset_after else (value or "")
            i += 1
            continue
        line = _ATTRIBUTE_REFERENCE.sub(lambda m: _value(attributes, m), line)
        stripped = line.strip()
        if stripped == "+":
            out.append("")
            fresh, attached = True, True
            i += 1
            continue
        if fresh and widths and not attached and not _LIST.match(line):
            widths = []  # a block after a blank line ends the list, unless attached
        attached = False
        if _CODE.match(line):
            fence = line.startswith("```")
            end = _find(lines, i, "```" if fence else line)
            language = line[3:].strip() if fence else language
            out += _fenced(lines[i + 1 : end], language)
            language, in_term, fresh = "", False, True
            i = end + 1
            continue
        if _TABLE.match(line):
            end = _find(lines, i, line)
            out += ["", *_table(lines[i + 1 : end], line[0]), ""]
            fresh = True
            i = end + 1
            continue
        if _CONTAINER.match(line) or _BREAK.match(line):
            out.append("")  # a container's lines are read as they are
            fresh = True
            i += 1
            continue
        if _DIRECTIVE.match(stripped):
            i += 1
            continue
        source = _SOURCE.match(stripped)
        if source or _BLOCK_ATTRIBUTES.match(stripped) or _ANCHOR.fullmatch(stripped):
            language = source.group(1) if source else language
            i += 1
            continue
        image = _IMAGE.match(stripped)
        if image:
            out.append(image.group(2).strip())
            i += 1
            continue
        if _ANCHOR.match(stripped):
            line = _ANCHOR.sub("", line, count=1)
            stripped = line.strip()
        below = lines[i + 1].strip() if i + 1 < n else ""
        # The underline matches the title as written, before "{name}" is read.
        width = len(_ANCHOR.sub("", lines[i].strip(), count=1).strip())
        heading = _heading(stripped, below, width) if fresh and line[0] not in " \t" else None
        if heading:
            level, words = heading
            if words.endswith("]]") and "[[" in words:  # "== Title[[id]]"
                words = words[: words.rindex("[[")].rstrip()
            out += ["", f"{'#' * level} {inline(words)}", ""]
            widths, in_term = [], False
            i += 1 if _ATX.match(stripped) else 2
            continue
        title = _BLOCK_TITLE.match(stripped)
        if fresh and title:
            out += ["", inline(title.group(1)), ""]
            i += 1
            continue
        item = _LIST.match(line)
        if item and not in_term:
            marker, rest = item.groups()
            out.append(_list_item(widths, marker, inline(rest)))
            fresh = False
            i += 1
            continue
        term = _TERM.match(stripped)
        if term and line[0] not in " \t" and "://" not in term.group(1):
            terms = [term]
            # "-a::" then "--all::": one description for both terms.
            while not term.group(3) and i + 1 < n and _TERM.match(lines[i + 1].rstrip()):
                i += 1
                term = _TERM.match(lines[i].rstrip())
                assert term is not None
                terms.append(term)
            head = ", ".join(inline(t.group(1).strip()) for t in terms)
            rest = term.group(3)
            out += ["", f"{head}: {inline(rest)}" if rest else f"{head}:"]
            in_term, widths, fresh = True, [], False
            i += 1
            continue
        if fresh and line[0] in " \t" and not in_term and not widths:
            # An indented paragraph is a literal one: code, its indentation relative.
            end = i + 1
            while end < n and lines[end].strip() and not _delimiter(lines[end].rstrip()):
                end += 1
            block = lines[i:end]
            indent = min(len(b) - len(b.lstrip()) for b in block)
            out += _fenced([b[indent:].rstrip() for b in block], "")
            i = end
            continue
        if _UNDERLINE.match(stripped):
            i += 1  # an underline that underlines no title: "~~~" would open a fence
            continue
        text = inline(stripped if in_term or widths else line)
        out.append(" " * widths[-1] + text if widths else text)
        fresh = False
        i += 1
    return "\n".join(out).strip("\n") + "\n"


def inline(text: str) -> str:
    """Cross references and macros as their words; other inline markup as written."""
    text = _XREF.sub(lambda m: (m.group(2) or m.group(1)).strip(), text)
    text = _URL_TEXT.sub(lambda m: m.group(2) or m.group(1), text)

    def macro(m: re.Match[str]) -> str:
        name, target, label = m.groups()
        if name == "linkgit":
            return f"{target}({label})"
        if name in ("kbd", "btn", "footnote", "pass", "menu"):
            return f"{target} {label}".strip() if name == "menu" else label
        return label or target

    return _MACRO.sub(macro, text)


def _heading(line: str, below: str, width: int) -> tuple[int, str] | None:
    atx = _ATX.match(line)
    if atx:
        # "== Title ==" closes as it opens.
        marker, title = atx.groups()
        title = title.rstrip()
        if title.endswith(" " + marker):
            title = title[: -len(marker)].rstrip()
        return len(marker), title
    under = _UNDERLINE.match(below)
    # Asciidoctor's rule: the underline as long as the title, give or take one character;
    # the title has a letter or digit and is not a block title (".Title").
    title = under and not line.startswith(".") and any(ch.isalnum() for ch in line)
    if title and abs(len(below.rstrip()) - width) <= 1:
        return _SETEXT[below[0]], line
    return None


def _list_item(widths: list[int], marker: str, text: str) -> str:
    """A list item at the depth its marker says ("**" or ".." nest), indented for
    CommonMark under its parent's text."""
    depth = len(marker) if marker[0] in "*." else 1
    del widths[depth - 1 :]
    indent = widths[-1] if widths else 0
    md = "1. " if marker[0] == "." or marker[0].isdigit() else "- "
    widths.append(indent + len(md))
    return " " * indent + md + text


def _value(attributes: dict[str, str | None], ref: re.Match[str]) -> str:
    """An attribute reference's value; one the document never set stays as written."""
    name = ref.group(1)
    value = attributes.get(name, _BUILT_IN.get(name))
    return ref.group() if value is None else value


def _delimiter(line: str) -> bool:
    return any(rx.match(line) for rx in (_CODE, _COMMENT_BLOCK, _CONTAINER, _TABLE))


def _fenced(code: list[str], language: str) -> list[str]:
    """A fenced code block whose fence no line of the code can close."""
    longest = max((len(run) for line in code for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return ["", f"{fence}{language}", *code, fence, ""]


def _find(lines: list[str], start: int, delimiter: str) -> int:
    """The line that closes the block opened at ``start`` (the end of the text if none)."""
    for j in range(start + 1, len(lines)):
        if lines[j].rstrip() == delimiter:
            return j
    return len(lines)


def _table(rows: list[str], separator: str) -> list[str]:
    """A table's rows as a pipe table when every row is on a line of its own with the same
    number of cells; otherwise each line's cells as a line of text."""
    split = re.compile(rf"(?<!\\){re.escape(separator)}")
    cells = []
    for row in rows:
        parts = split.split(row.strip())
        if row.strip():
            cells.append([c.strip() for c in parts[1 if row.strip()[0] == separator else 0 :]])
    widths = {len(c) for c in cells}
    if cells and len(widths) == 1 and widths.pop() > 1:
        lines = ["| " + " | ".join(inline(c).replace("|", "\\|") for c in r) + " |" for r in cells]
        return [lines[0], "|" + "---|" * len(cells[0]), *lines[1:]]
    return [inline(" | ".join(c for c in row if c)) for row in cells]
