"""Is this line a heading? Pure tests on a line of text, shared by cleaning and outlines.

Parsers label lines "Title" by their look (short, bold, alone), so a line of code in a
listing ("int main() {", "public:", "\\end{question}") or a fragment the layout cut from a
sentence ("difficult) to 5") becomes a heading, and then the title path of every chunk
after it. A heading is prose: these tests say when a line is not.

- :func:`looks_like_code`: code and markup, in any language: LaTeX commands, braces,
  statement ends, comment and preprocessor markers, tags and processing instructions,
  URLs and paths, operators, access labels, a call with no prose around it, a line
  mostly of symbols.
- :func:`is_fragment`: a piece of a sentence: it ends on a comma, an opening bracket, a
  hyphen or a word that cannot end an English heading ("the", "of", "and"); its brackets
  do not balance; or (for guessed headings only) it starts with a lowercase word.
- :func:`heading_key`: what two spellings of one heading share ("4.2.2 Nominative sheets",
  "NOMINATIVE SHEETS", "22.3. THE TYPENAME KEYWORD 567" against the outline's entry),
  for matching headings to an outline and running headers to headings.
"""

from __future__ import annotations

import re

from es_rag import cjk

_CJK = cjk.LETTERS
_LATEX = re.compile(r"\\[A-Za-z@]{2,}|\\[\\{}\[\]%$&_#]")
_BRACES = re.compile(r"[{}]")
_STATEMENT = re.compile(r";\s*(?://.*)?$|^\s*(?:#\s*(?:include|define|if|ifdef|endif|pragma)\b)")
_COMMENT = re.compile(r"^\s*(?://|/\*|\*/|%{1,2}\s|%%|--\s|<!--|#!)")
# An interactive prompt: Python's ">>>", a shell's "$", IPython's "In [1]:" (not "...",
# which opens prose as often as it continues a statement).
# A console prompt, after a virtual environment's name when one is active: "(venv) $ ".
_PROMPT = re.compile(r"^\s*(?:\([\w.-]+\)\s+)?(?:>>>|\$|In \[\d*\]:)(?:\s|$)")
# A list item's marker: a bullet or a short number, then a space.
_LIST_ITEM = re.compile(r"(?:[-*\u2022\u25cf\u25cb\u25e6\u25aa\u00b7]|\d{1,3}[.)])\s+\S")
_TAG = re.compile(r"</?[A-Za-z][\w:-]*(?:\s+[\w:.-]+=\"[^\"]*\")*\s*/?>|<\?[A-Za-z]|<!\w")
# A URL, a path or a public identifier ("-//OASIS//DTD DocBook"): a reference, not a title.
_LOCATOR = re.compile(r"\w+://|//\w|^/\w+/|\bwww\.\w")
_OPERATOR = re.compile(
    r"[\w)\]]\s*(?:==|!=|<=|>=|&&|\|\||->|=>|\+=|-=|\*=|/=|<<|>>)\s*[\w\"'(]|\+\+\w|\w\s*=\s*\w"
)
# Access labels, control words and declarations that appear alone on a line of code.
_KEYWORD_LINE = re.compile(
    r"^(?:public|private|protected|default|case\s+\S+|else|try|finally|do|begin|end|"
    r"return\b.*|break|continue|template\s*<.*|typedef\b.*|using\s+namespace\b.*|"
    r"namespace\s+\w+|import\s+[\w.]+(?:\s+as\s+\w+)?|from\s+[\w.]+\s+import\b.*)\s*:?$"
)
# A Python block's head: a lower-case keyword, then a colon at the line's end ("for x in
# xs:"); prose opens a line with a capital ("For example:").
_BLOCK_HEAD = re.compile(r"^(?:for|while|if|elif|with|def|class|except|async\s+def)\b.*:$")
_CALL = re.compile(r"[A-Za-z_][\w.:]*\([^()]*\)")
_PROSE_WORD = re.compile(r"(?<![\w.])[A-Za-z][a-z]+(?:'[a-z]+)?(?![\w(])")
_SYMBOL = re.compile(r"[^\w\s" + _CJK + r"]")
_NUMBERING = re.compile(
    r"^\s*(?:(?:chapter|section|part|appendix|kapitel|chapitre|capítulo|capitolo)\s*)?"
    r"(?:[0-9]+(?:\.[0-9]+)*\.?(?=\s|[A-Z" + _CJK + r"]|$))?\s*",
    re.IGNORECASE,
)
_CJK_CHAPTER = re.compile(r"^第\s*[0-9一二三四五六七八九十百]+\s*[章节節部篇]\s*")
_NOT_LAST_WORDS = (
    "a an the of and or nor but to in on at by for from with into onto as that which who "
    "whose than then if when where while because although is are was were be been this "
    "these those its their our your my his her"
)
_NOT_LAST = frozenset(_NOT_LAST_WORDS.split())
_OPEN_END = re.compile(r"[,(\[{/\\&=|<-]$|[，、（《【〈「『]$")
_MIN_LETTERS = 2


def looks_like_code(text: str, *, declared: bool = False) -> bool:
    """Whether a line reads as source code or markup rather than words.

    ``declared``: the line is a heading its format declares (``<h2>``, ``##``), so only
    markup and statements count, not a call: API references head sections "fetch(url)".
    """
    line = " ".join(text.split())
    if not line:
        return False
    if _LATEX.search(line) or _BRACES.search(line) or _TAG.search(line):
        return True
    if _LOCATOR.search(line):
        return True
    if _STATEMENT.search(line) or _COMMENT.match(line) or _KEYWORD_LINE.match(line):
        return True
    if _PROMPT.match(line) or _BLOCK_HEAD.match(line):
        return True
    if declared:
        return False
    if any(token.count(":") >= 3 for token in line.split()):
        return True  # a record of colon-separated fields: "user1:x:1000:1000:…", "fe80::1:2"
    if _OPERATOR.search(line):
        return True
    calls = _CALL.findall(line)
    if calls:
        rest = _CALL.sub(" ", line)
        if len(_PROSE_WORD.findall(rest)) < 2:
            return True  # "int main()", "def polyv2(b,p,d,q) :", "round(x, 2)"
    symbols = len(_SYMBOL.findall(line))
    visible = len(line.replace(" ", ""))
    if visible >= 6 and symbols / visible > 0.3:
        return True
    # A grammar or a pattern: "| | | attribute * | * attribute".
    tokens = line.split()
    bare = sum(not any(ch.isalnum() for ch in t) for t in tokens)
    return bare >= 3 and bare * 10 >= 3 * len(tokens)


def is_fragment(text: str, *, guessed: bool = True) -> bool:
    """Whether a line is a piece of a sentence, not a whole heading.

    ``guessed``: the parser guessed the heading from the page's look (PDF, plain text,
    OCR), so a lowercase start ("sorts of colours") is evidence too; a declared heading
    (HTML ``<h2>``, Markdown ``##``) may start lowercase ("json — JSON encoder").
    """
    line = " ".join(text.split())
    if not line:
        return True
    letters = sum(ch.isalpha() for ch in line)
    if (
        guessed
        and not re.search(f"[{_CJK}]", line)
        and (letters < _MIN_LETTERS or not re.search(r"[^\W\d_]{2,}", line))
    ):
        return True  # "y 1", "Q", "b m": stray glyphs from a figure or a bullet font
    if _OPEN_END.search(line):
        return True
    if line.count("(") != line.count(")") or line.count("[") != line.count("]"):
        return True
    words = re.findall(r"[A-Za-z]+", line)
    if words and line[-1].isalpha() and words[-1].lower() in _NOT_LAST and len(words) > 1:
        return True
    return guessed and line[0].islower() and not re.match(r"^[a-z]+[A-Z0-9_]", line)


def is_heading(text: str, *, guessed: bool = True) -> bool:
    """Whether a line labelled as a heading may be one: prose, whole, not code."""
    return (
        not looks_like_code(text)
        and not is_fragment(text, guessed=guessed)
        and not (guessed and has_blob(text))
    )


# A run of letters and digits too long for a word: base64 (a PGP signature's lines), a key,
# a hash.
_BLOB = re.compile(r"(?=[\w+/=-]*\d)(?=[\w+/=-]*[A-Za-z])[\w+/=-]{24,}")


def has_blob(text: str) -> bool:
    """Whether a line holds a token of 24 or more letters and digits mixed (base64, a key,
    a hash): such a line is data, never a guessed heading."""
    return bool(_BLOB.search(text))


def strip_numbering(text: str) -> str:
    """ "4.2.2 Nominative sheets" → "Nominative sheets"; "第3章 概要" → "概要"."""
    line = " ".join(text.split())
    stripped = _CJK_CHAPTER.sub("", line)
    stripped = _NUMBERING.sub("", stripped, count=1) if stripped == line else stripped
    return stripped or line


def numbering(text: str) -> str:
    """The section number a heading line starts with ("4.10" of "4.10Questions groups")."""
    match = re.match(r"^\s*((?:[0-9]+\.)*[0-9]+)\.?(?=\s|[^\W\d_]|$)", text)
    return match.group(1) if match else ""


def heading_key(text: str) -> str:
    """Letters only, case-folded, numbers and "Chapter"/"Section" words gone: the part of a
    heading that survives glued words, small caps, numbering and a page number beside it."""
    line = strip_numbering(text).casefold()
    line = re.sub(r"\b(?:chapter|section|part|appendix)\b", "", line)
    return "".join(ch for ch in line if ch.isalpha())


def is_code_block(text: str) -> bool:
    """Whether a paragraph of several lines is source code or a console session.

    For paragraphs whose line breaks are deliberate (a Word or PowerPoint paragraph's
    breaks; a plain-text block once its margin is gone), so that a listing keeps its lines
    and indentation: most lines read as code, the lines are indented under one that does,
    or the paragraph opens at a prompt (a console session: its output lines read as
    anything). Wrapped prose has no indented lines and few that read as code.
    """
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) < 2:
        return False
    if _PROMPT.match(lines[0]):
        return True
    if 2 * sum(bool(_LIST_ITEM.match(line.lstrip())) for line in lines) >= len(lines):
        return False  # a list, whose items may end like statements ("* the system type;")
    coded = sum(looks_like_code(line) for line in lines)
    indented = any(line[:1] in (" ", "\t") for line in lines[1:])
    return 2 * coded >= len(lines) or (indented and coded > 0)
