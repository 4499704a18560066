"""Manual pages (troff source with the man or mdoc macros) → elements.

Every Unix system ships its manual as troff source, compressed (``/usr/share/man/man1/
ls.1.gz``; 17,926 pages under ``man1`` alone on a Debian machine with a few tools). Read as
plain text, every macro line (``.TH``, ``.SH NAME``, ``.PP``, ``.TP``) became a heading and
the text kept its font escapes (``\\fB\\-a\\fR``), which BM25 indexed as words. What a
reader of ``man`` sees is read here instead, line by line:

- ``.TH LS 1 …`` (mdoc: ``.Dt``) names the page: ``LS(1)`` is its title;
- ``.SH``/``.SS`` (mdoc: ``.Sh``/``.Ss``) are headings at levels 1 and 2;
- ``.PP``, ``.P``, ``.LP``, ``.sp``, ``.br`` (mdoc: ``.Pp``) end a paragraph; ``.TP`` and
  ``.IP`` begin an item whose tag heads its description (``-a, --all: do not ignore …``);
- ``.nf``/``.fi``, ``.EX``/``.EE`` (mdoc: ``.Bd``/``.Ed``) hold lines as written: code;
- ``.TS``/``.TE`` (tbl) tables become tables, their rows split on tabs;
- font macros (``.B``, ``.BR``, ``.I``…) become their words, alternating fonts joined as
  troff joins them (``.BR ls (1)`` → ``ls(1)``); other mdoc macros their arguments
  (``.Fl a`` → ``-a``, ``.Xr ls 1`` → ``ls(1)``);
- escapes become the characters they print (``\\-`` → ``-``, ``\\(em`` → ``—``) or nothing
  (font and size changes, ``\\&``); comments, macro and string definitions, conditionals
  and other requests are left out.

Not a troff: no macro is expanded but these, no register computed. A page that only
includes another (``.so man1/other.1``) holds no text of its own.
"""

from __future__ import annotations

import re

from es_rag.types import Element

_MACRO = re.compile(r"^[.'][ \t]*([A-Za-z][A-Za-z0-9]{0,3})\b[ \t]*(.*)$")
_SIGNS = re.compile(r"^[.'][ \t]*(?:TH|Dt|Dd)[ \t]", re.M)
_MACROS = re.compile(r"^\.(?:SH|SS|PP|TP|IP|LP|B|I|BR|IR|Sh|Pp|Nm|Nd|It|Fl)\b", re.M)
_ARG = re.compile(r'"((?:[^"]|"")*)"?|(\S+)')
_SO = re.compile(r"^[.'][ \t]*so[ \t]+\S", re.M)
_BREAKS = {"PP", "P", "LP", "sp", "br", "Pp", "HP", "ns", "Sp"}  # Sp: pod2man's .sp
_FONTS = {"B", "I", "SM", "SB"}
_ALTERNATING = {"BR", "RB", "IR", "RI", "BI", "IB"}
# Requests and macros that print nothing es-rag would index.
_SILENT = {
    "ad", "na", "hy", "nh", "ne", "ft", "fi", "in", "ti", "ll", "ps", "vs", "ta", "ss", "cs",
    "bp", "pl", "nr", "ds", "as", "rr", "rm", "so", "mso", "tr", "ce", "ul",
    "cu", "ev", "lf", "pc", "hc", "RS", "RE", "UC", "PD", "DT", "IX", "Os", "Dd",
    "Bl", "El", "Ed", "Ek", "Bk", "Sm", "Ux", "Bx", "Nx", "Fx", "Ox", "Tn", "EE", "ME", "UE",
    "ec", "eo", "cc", "c2", "fl", "mk", "rt", "sv", "os", "lt", "pn", "po", "tm", "ab", "ns",
    "Pf", "Xo", "Xc",
}  # fmt: skip
_GLYPHS = {
    "em": "—", "en": "–", "hy": "-", "bu": "•", "aq": "'", "dq": '"', "lq": "“", "rq": "”",
    "oq": "‘", "cq": "’", "co": "©", "rg": "®", "tm": "™", "mu": "×", "di": "÷", "de": "°",
    "<=": "≤", ">=": "≥", "->": "→", "<-": "←", "!=": "≠", "+-": "±", "ti": "~", "ha": "^",
    "ga": "`", "aa": "´", "rs": "\\", "sl": "/", "ba": "|", "lB": "[", "rB": "]", "lC": "{",
    "rC": "}", "la": "⟨", "ra": "⟩", "Fo": "«", "Fc": "»", "sc": "§", "ps": "¶", "ss": "ß",
    "R": "®", "Tm": "™", "Lq": "“", "Rq": "”",
    'L"': "“", 'R"': "”", "C`": "‘", "C'": "’", "C+": "C++",  # pod2man's strings
}  # fmt: skip
_ESCAPE = re.compile(
    r"\\(?:"
    r"f(?:\[[^\]\n]*\]|\(..|.)"  # font
    r"|s[+-]?(?:\d{1,2}|\[[^\]\n]*\]|\(\d\d)"  # size
    r"|[*](?:\[(?P<s1>[^\]\n]*)\]|\((?P<s2>..)|(?P<s3>.))"  # string
    r"|\((?P<g2>..)|\[(?P<gl>[^\]\n]*)\]"  # glyph
    r"|[nkgmzw](?:\[[^\]\n]*\]|\(..|'[^'\n]*'|.)"  # registers, marks, widths
    r"|[hvlLoxNbDXCZ]'[^'\n]*'"  # motions, lines, overstrikes, device controls
    r"|(?P<one>.)"
    r")",
    re.S,
)
_ONE = {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", "_": "_", ".": ".", "'": "´"}


def looks_like_manpage(text: str) -> bool:
    """A ``.TH``/``.Dt`` line and other man or mdoc macros, or a page that only includes
    another (``.so man3/other.3``)."""
    head = text[:65536]
    if _SIGNS.search(head):
        return len(_MACROS.findall(head)) >= 2
    if not _SO.search(head):
        return False  # every text file is sniffed: no line-by-line pass without a .so
    lines = [line for line in head.splitlines() if line.strip() and not _comment(line)]
    return len(lines) == 1 and bool(_SO.match(lines[0]))


def includes_only(text: str) -> bool:
    """A page whose whole text is another page's (``.so man1/other.1``)."""
    lines = [line for line in text.splitlines() if line.strip() and not _comment(line)]
    return bool(lines) and all(_SO.match(line) for line in lines)


def manpage_elements(text: str) -> tuple[list[Element], str | None]:
    """The page's elements in reading order, and its title (``LS(1)``)."""
    reader = _Reader()
    for line in _logical_lines(text):
        reader.line(line)
    reader.flush()
    return reader.out, reader.title


def _comment(line: str) -> bool:
    return line.lstrip().startswith(('.\\"', "'\\\"", '\\"', ".\\#", "\\#")) or line.strip() == "."


def _logical_lines(text: str) -> list[str]:
    """Lines with their continuations (a trailing backslash) joined, comments dropped."""
    out: list[str] = []
    pending = ""
    for raw in text.replace("\r\n", "\n").split("\n"):
        if _comment(raw):
            continue
        raw = re.sub(r'\\".*$', "", raw)  # a comment after text
        if raw.endswith("\\") and not raw.endswith("\\\\"):
            pending += raw[:-1]
            continue
        out.append(pending + raw)
        pending = ""
    if pending:
        out.append(pending)
    return out


def _args(rest: str) -> list[str]:
    """A macro's arguments: words, or "quoted strings" ("" for an empty one)."""
    return [
        m.group(1).replace('""', '"') if m.group(1) is not None else m.group(2)
        for m in _ARG.finditer(rest)
    ]


def text_of(raw: str) -> str:
    """What a line of troff text prints."""

    def one(m: re.Match[str]) -> str:
        name = m.group("s1") or m.group("s2") or m.group("s3")
        if name is not None:
            return _GLYPHS.get(name, "")
        glyph = m.group("g2") or m.group("gl")
        if glyph is not None:
            return _GLYPHS.get(glyph, "")
        ch = m.group("one")
        return _ONE.get(ch, "") if ch is not None else ""

    return _ESCAPE.sub(one, raw)


class _Reader:
    def __init__(self) -> None:
        self.out: list[Element] = []
        self.title: str | None = None
        self.words: list[str] = []  # the paragraph being read
        self.tag: str | None = None  # the item's tag, when the paragraph is an item
        self.want_tag = False  # .TP: the next line is the tag
        self.heading: int | None = None  # the level of a .SH whose text is the next line
        self.code: list[str] | None = None  # inside .nf/.EX/.Bd
        self.table: list[list[str]] | None = None  # inside .TS, past its format
        self.table_format = False
        self.tab = "\t"  # tbl's tab(x) option
        self.block_cell: list[str] | None = None  # the lines of a T{ … T} cell
        self.in_definition = False  # inside .de … ..
        self.braces = 0  # how deep inside \{ … \} of a conditional
        self.name: str | None = None  # mdoc's .Nm: the page's name, repeated by a bare .Nm

    def flush(self) -> None:
        text = " ".join(" ".join(self.words).split())
        if self.tag is not None:
            tag = " ".join(self.tag.split())
            # "-a, --all: do not ignore …"; a bullet just precedes its text
            named = any(c.isalnum() for c in tag) and not tag.endswith(":")
            text = f"{tag}: {text}" if text and named else f"{tag} {text}"
        if text.strip():
            self.out.append(Element(kind="text", text=text.strip()))
        self.words, self.tag = [], None

    def line(self, line: str) -> None:
        if self.in_definition:
            self.in_definition = not line.strip().startswith("..")
            return
        if self.braces > 0:
            self.braces += line.count("\\{") - line.count("\\}")
            return
        if self.table is not None:
            self._table_line(line)
            return
        m = _MACRO.match(line)
        if self.code is not None:
            name = m.group(1) if m else ""
            if name in ("fi", "EE", "Ed", "Ve"):
                if any(c.strip() for c in self.code):
                    self.out.append(Element(kind="code", text="\n".join(self.code).strip("\n")))
                self.code = None
            elif m is None:
                self.code.append(text_of(line))
            elif name in _FONTS or name in _ALTERNATING:
                self.code.append(self._macro_text(name, m.group(2)))
            return
        if m is None:
            if line[:1] in ".'":
                return  # a request es-rag does not know, or an empty one
            self._text(text_of(line))
            return
        self._macro(m.group(1), m.group(2))

    def _text(self, text: str) -> None:
        if self.heading is not None:
            level, self.heading = self.heading, None
            self._heading(level, text)
        elif self.want_tag:
            self.want_tag = False
            self.tag = text
        elif text.strip():
            self.words.append(text)
        else:
            self.flush()  # a blank line ends a paragraph

    def _heading(self, level: int, text: str) -> None:
        text = " ".join(text.split())
        if text:
            self.flush()
            self.out.append(Element(kind="title", text=text, level=level))

    def _macro(self, name: str, rest: str) -> None:
        args = _args(rest)
        if name in ("TH", "Dt"):
            if args:
                section = f"({args[1]})" if len(args) > 1 and args[1] else ""
                self.title = f"{text_of(args[0])}{section}"
        elif name in ("SH", "SS", "Sh", "Ss"):
            level = 1 if name in ("SH", "Sh") else 2
            self.flush()
            if args:
                self._heading(level, text_of(" ".join(args)))
            else:
                self.heading = level
        elif name in _BREAKS:
            self.flush()
        elif name == "TP":
            self.flush()
            self.want_tag = True
        elif name in ("IP", "It"):
            self.flush()
            tag = text_of(" ".join(args[:1])) if name == "IP" else self._mdoc(args)
            self.tag = tag if tag.strip() else None
        elif name in ("nf", "EX", "Bd", "Vb"):  # Vb … Ve: pod2man's verbatim blocks
            self.flush()
            self.code = []
        elif name == "TS":
            self.flush()
            self.table, self.table_format, self.tab = [], True, "\t"
        elif name in ("de", "de1", "am", "ig"):
            self.in_definition = True
        elif name in ("ie", "if", "el"):
            # Conditionals set up troff (pod2man's preamble); a block may span lines.
            self.braces = max(0, rest.count("\\{") - rest.count("\\}"))
        elif name in _FONTS or name in _ALTERNATING:
            self._text(self._macro_text(name, rest))
        elif name in _SILENT:
            return
        elif name == "Nd":
            self._text("— " + self._mdoc(args))
        elif name[:1].isupper() and len(name) in (2, 3):  # mdoc's inline macros: their words
            # A macro es-rag does not know (a page's own, from .de) gives its words.
            self._text(self._mdoc([name, *args] if name in _MDOC else args))

    def _macro_text(self, name: str, rest: str) -> str:
        args = [text_of(a) for a in _args(rest)]
        return "".join(args) if name in _ALTERNATING else " ".join(args)

    def _mdoc(self, args: list[str]) -> str:
        """mdoc's inline macros, as mandoc prints them; others give their arguments."""
        out: list[str] = []
        glue = False  # .Ns: no space before the next word
        i = 0
        while i < len(args):
            word, piece = args[i], None
            if word == "Fl":
                flag = args[i + 1] if i + 1 < len(args) and args[i + 1] not in _MDOC else ""
                piece = "-" + text_of(flag)
                i += 1 if flag else 0
            elif word == "Xr" and i + 1 < len(args):
                section = f"({args[i + 2]})" if i + 2 < len(args) else ""
                piece = text_of(args[i + 1]) + section
                i += 2
            elif word == "Nm" and (i + 1 >= len(args) or args[i + 1] in _MDOC):
                piece = self.name or ""
            elif word == "Nm":
                self.name = self.name or text_of(args[i + 1])
            elif word in _ENCLOSING:
                opening, closing = _ENCLOSING[word]
                inner = self._mdoc(args[i + 1 :])
                trail = re.search(r"[.,;:!?)\]]+$", inner)  # after the closing mark
                cut = trail.start() if trail and trail.start() else len(inner)
                piece = f"{opening}{inner[:cut]}{closing}{inner[cut:]}"
                i = len(args)
            elif word == "Ns":
                glue = True
            elif word in ("Oo", "Oc"):
                piece = "[" if word == "Oo" else "]"
            elif word not in _MDOC and word not in ("Xo", "Xc"):
                piece = text_of(word)
            if piece:
                if out and (
                    glue or out[-1].endswith(("[", "(")) or re.fullmatch(r"[.,;:!?)\]]+", piece)
                ):
                    out[-1] += piece
                else:
                    out.append(piece)
                glue = False
            i += 1
        return " ".join(out)

    def _table_line(self, line: str) -> None:
        """tbl: the options (``tab(@);``) and format lines, then rows of cells split on
        the tab character; a ``T{`` … ``T}`` cell spans lines; ``.T&`` starts a new
        format."""
        assert self.table is not None
        m = _MACRO.match(line)
        if m and m.group(1) == "TE":
            rows = [r for r in self.table if any(c.strip() for c in r)]
            if rows:
                from es_rag.markdown import table_element

                self.out.append(table_element(rows))
            self.table = None
            return
        if self.block_cell is not None:  # inside T{ … T}
            if not line.startswith("T}"):
                if m is None:
                    self.block_cell.append(text_of(line))
                elif m.group(1) in _FONTS or m.group(1) in _ALTERNATING:
                    self.block_cell.append(self._macro_text(m.group(1), m.group(2)))
                return
            self.table[-1][-1] = " ".join(" ".join(self.block_cell).split())
            self.block_cell = None
            rest = line[2:].split(self.tab)[1:]
            self.table[-1] += [text_of(cell).strip() for cell in rest]
            return
        if self.table_format:
            tab = re.search(r"\btab\s*\((.)\)", line)
            if tab:
                self.tab = tab.group(1)
            if line.rstrip().endswith("."):
                self.table_format = False  # the last line of the format spec
            return
        if m is not None and m.group(1) == "T":  # ".T&": a new format follows
            self.table_format = True
            return
        if m is not None or re.fullmatch(r"\s*[_=]\s*", line):
            return  # a request inside the table, or a rule
        cells = line.split(self.tab)
        self.table.append([text_of(cell).strip() for cell in cells])
        if cells[-1].rstrip().endswith("T{"):
            self.table[-1][-1] = ""
            self.block_cell = []


# mdoc macros that enclose the rest of their line (``.Op Fl v`` → ``[-v]``).
_ENCLOSING = {
    "Op": ("[", "]"), "Bq": ("[", "]"), "Dq": ("“", "”"), "Sq": ("‘", "’"), "Ql": ("‘", "’"),
    "Pq": ("(", ")"), "Qq": ('"', '"'), "Aq": ("⟨", "⟩"), "Brq": ("{", "}"),
}  # fmt: skip
# mdoc macro names that may appear as arguments of another (``.Op Fl a Ar file``).
_MDOC = frozenset(
    "Fl Ar Op Oo Oc Xr Nm Cm Pa Va Ev Ic Dv Li Em Sy Ql Dq Sq Pq Qq Aq Bq Brq Ns No Sx".split()  # noqa: SIM905
)
