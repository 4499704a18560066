"""Headings, outlines, running headers, tables of contents and documentation-site chrome:
the pure parts of issue 16, on lines taken from real books and manuals."""

from __future__ import annotations

import pytest
from lxml import html as lxml_html

from es_rag.chunking import chunk_elements
from es_rag.cleaning import clean, demote_non_headings, mark_navigation, page_words, respace
from es_rag.headings import (
    heading_key,
    is_code_block,
    is_fragment,
    is_heading,
    looks_like_code,
    strip_numbering,
)
from es_rag.outline import OutlineEntry, apply_outline, root_title, usable
from es_rag.parsing.child import _page_content, _site_free_title
from es_rag.query.build import WITHOUT_NAVIGATION
from es_rag.structure_check import PdfText, glued_share, html_report, pdf_report
from es_rag.types import Element

# Lines that a PDF parser labelled "Title" in a C++ book and a LaTeX package manual.
CODE_LINES = [
    ">>> import fibo",  # a prompt: plain text and RTF guess these as titles
    "$ python fibo.py 50",
    "In [3]: df.head()",
    "int main() {",
    "} int main() {",
    "public:",
    "private:",
    "protected:",
    "\\end{question}",
    "\\begin{choices}",
    "\\def\\AMCformQuestion#1{{\\sc Question #1:}}",
    "\\usepackage[utf8x]{inputenc}",
    "#include <iostream>",
    "return 0;",
    "std::cout << x << '\\n';",
    "user1:x:1000:1000:User One,,,:/home/user1:/bin/bash",  # Debian Reference's examples
    "root:x:0:0:root:/root:/bin/bash",
    "def polyv2(b,p,d,q) :",
    "x = y + 1",
    "</arguments>",
    "%%% end of the header",
    "template <typename Type>",
    "round(3+8*random,2)",
    "void Base::hello()",
    '<?dbhtml list-presentation="table"?>',
    'PUBLIC "-//OASIS//DTD DocBook XML V4.1.2//EN"',
    "1http://caml.inria.fr/ocaml/htmlman/index.html",
    "/usr/bin/msmtp",
    "| | | attribute * | * attribute",
    "border-style: solid;",
]
HEADINGS = [
    "Introduction",
    "What is Object-Oriented Programming?",
    "C++: advantages and claims",
    "The function `main'",
    "Strongly typed enumerations",
    "Three-way comparison (<=>)",
    "11.1 Perl module Email::Address",
    "The open() function",
    "4.10 Questions groups",
    "Edit → Preferences → Scan",
    "AMCで用いるソフトウェアの推奨バージョン",
    "第3章 数据类型",
    "设问与选项",
    "Overloading operator[]",
    "Learning C++",
    "10 Copy anonymity (LaTeX only)",
    "11.7.1 Linux users (Ubuntu,Xubuntu,Lubuntu etc.)",
]
FRAGMENTS = [
    "difficult) to 5",
    "y 1",
    "Q",
    "b m",
    "Introduction to the",
    "of the answer sheet,",
    "sorts of colours and",
    "答案用纸，",
]


@pytest.mark.parametrize("line", CODE_LINES)
def test_code_is_never_a_heading(line: str) -> None:
    assert looks_like_code(line)
    assert not is_heading(line)


@pytest.mark.parametrize("line", HEADINGS)
def test_prose_headings_stay(line: str) -> None:
    assert not looks_like_code(line), line
    assert is_heading(line), line


@pytest.mark.parametrize("line", FRAGMENTS)
def test_fragments_are_not_headings(line: str) -> None:
    assert is_fragment(line)


def test_declared_headings_may_be_calls_but_not_markup() -> None:
    # API references head sections with a signature; a Markdown "## fetch(url)" stays.
    assert not looks_like_code("fetch(url)", declared=True)
    assert looks_like_code("fetch(url)")
    assert looks_like_code("\\begin{document}", declared=True)
    assert not is_fragment("json — JSON encoder and decoder", guessed=False)
    assert is_fragment("json — JSON encoder and decoder", guessed=True)
    assert not is_fragment("C", guessed=False)  # "## C", a language's section
    assert is_fragment("Q", guessed=True)


def test_heading_keys_survive_glue_caps_numbers_and_page_numbers() -> None:
    key = heading_key("Class Templates")
    assert heading_key("CHAPTER22. CLASSTEMPLATES") == key
    assert heading_key("568 CHAPTER 22. CLASS TEMPLATES") == key
    assert heading_key("22.3. THE TYPENAME KEYWORD 567") == heading_key("The typename keyword")
    assert heading_key("4.10Questions groups") == heading_key("Questions groups")
    assert strip_numbering("5.4.3.1 Simple questions") == "Simple questions"
    assert strip_numbering("第3章 概要") == "概要"


def test_listing_lines_between_code_are_text() -> None:
    els = [
        Element(kind="text", text="x = compute(y);", page=1),
        Element(kind="title", text="Result", page=1),
        Element(kind="text", text="print(x);", page=1),
        Element(kind="title", text="Printing the result", page=1),
        Element(kind="text", text="The result is printed.", page=1),
    ]
    out = demote_non_headings(els, guessed=True)
    assert [e.kind for e in out] == ["text", "text", "text", "title", "text"]


def _page(n: int, lines: list[str], kind: str = "text") -> list[Element]:
    return [Element(kind=kind, text=t, page=n) for t in lines]  # type: ignore[arg-type]


def test_tables_of_contents_and_indexes_become_contents() -> None:
    toc = _page(
        2,
        [
            "1 License . . . . . . . . . . . . 1",
            "2 Prerequisites . . . . . . . . . . 1",
            "2.1 Operating system . . . . . . . . 1",
            "2.2 Software . . . . . . . . . . . . 2",
            "3 Usage notes 4",
            "4",
        ],
    )
    index = _page(
        9,
        [
            "abstract class, 453, 460",
            "access specifier, 321",
            "accumulate, 802-805",
            "adaptor, 611, 640, 712",
            "address-of operator, 104",
        ],
    )
    listing = _page(5, ["1", "2", "3", "int main()", "4", "return 0;", "5"])
    prose = _page(
        3, ["A sentence about licenses.", "Another one, page 4.", "1", "More text.", "End."]
    )
    out = mark_navigation([*toc, *prose, *listing, *index])
    kinds = {(e.page, e.kind) for e in out}
    assert kinds == {(2, "contents"), (3, "text"), (5, "text"), (9, "contents")}


def _at(page: int, text: str, top: float, kind: str = "text") -> Element:
    return Element(
        kind=kind,  # type: ignore[arg-type]
        text=text,
        page=page,
        coordinates=((0.1, top), (0.1, top + 0.02), (0.9, top + 0.02), (0.9, top)),
    )


OUTLINE = [
    OutlineEntry(0, "Class Templates", 10, 0.15),
    OutlineEntry(1, "Defining class templates", 10, 0.5),
    OutlineEntry(1, "The typename keyword", 12, 0.3),
]


def test_outline_gives_headings_and_removes_running_headers() -> None:
    els = [
        _at(10, "Chapter 22", 0.1, "title"),
        _at(10, "Class Templates", 0.16, "title"),
        _at(10, "Templates let a class work on any type.", 0.3),
        _at(10, "22.1 Defining class templates", 0.5, "title"),
        _at(10, "A class template starts with its parameters.", 0.55),
        _at(11, "CHAPTER22. CLASSTEMPLATES", 0.03, "title"),
        _at(11, "int main() {", 0.2, "title"),
        _at(11, "More about defining them.", 0.4),
        _at(11, "569", 0.96),
        _at(12, "22.1. DEFINING CLASS TEMPLATES 570", 0.03),
        _at(12, "Before the keyword.", 0.1),
        _at(12, "Within a template, names that depend on a parameter need it.", 0.4),
    ]
    out = clean(els, layout=True, guessed_titles=True, outline=OUTLINE)
    titles = [(e.text, e.level) for e in out if e.kind == "title"]
    # Matched headings keep their printed number; the unprinted entry is inserted where
    # the outline points (page 12, 0.3: after "Before the keyword.").
    assert titles == [
        ("Class Templates", 1),
        ("22.1 Defining class templates", 2),
        ("The typename keyword", 2),
    ]
    texts = [e.text for e in out]
    assert "CHAPTER22. CLASSTEMPLATES" not in texts
    assert "22.1. DEFINING CLASS TEMPLATES 570" not in texts
    assert "569" not in texts
    assert texts.index("Before the keyword.") < texts.index("The typename keyword")
    assert any(e.text == "int main() {" and e.kind == "text" for e in out)
    chunks = chunk_elements(out, title="C++ Annotations", size=50, overlap=5)
    paths = {c.title_path for c in chunks if c.chunk_type == "child"}
    assert ("C++ Annotations", "Class Templates", "22.1 Defining class templates") in paths
    assert ("C++ Annotations", "Class Templates", "The typename keyword") in paths
    report = pdf_report(
        "book",
        "C++ Annotations",
        12,
        OUTLINE,
        chunks,
        PdfText({11: ["chapter22classtemplates"], 12: ["221definingclasstemplates570"]}, {}),
    )
    assert report.covered == 1.0
    assert report.code_elements == 0
    assert report.running_header_share == 0.0


def test_running_header_left_in_is_counted() -> None:
    els = [
        _at(10, "Class Templates", 0.16, "title"),
        _at(10, "Templates let a class work on any type. CLASS TEMPLATES 568 and so on.", 0.3),
    ]
    chunks = chunk_elements(els, title="Book", size=50, overlap=5)
    words = {10: {"templates", "let", "a", "class", "work", "on", "any", "type", "and", "so"}}
    report = pdf_report(
        "book", "Book", 10, OUTLINE, chunks, PdfText({10: ["classtemplates568"]}, words)
    )
    # "CLASS TEMPLATES" is two words on the page; nothing in the chunk is glued.
    assert report.glued_share == 0.0
    glued = chunk_elements(
        [_at(10, "Templates letclass work.", 0.3)], title="B", size=50, overlap=5
    )
    assert glued_share(glued, words) == pytest.approx(1 / 3)
    assert report.running_header_share == 1.0


def test_outline_root_is_the_title_and_small_outlines_are_ignored() -> None:
    rooted = [
        OutlineEntry(0, "The Manual", 1),
        OutlineEntry(1, "Intro", 2),
        OutlineEntry(1, "Usage", 5),
    ]
    assert root_title(rooted) == "The Manual"
    assert [(e.level, e.title) for e in usable(rooted)] == [(0, "Intro"), (0, "Usage")]
    assert usable([OutlineEntry(0, "Only", 1), OutlineEntry(1, "Same page", 1)]) == []
    assert apply_outline([Element(kind="text", text="x", page=1)], []) == [
        Element(kind="text", text="x", page=1)
    ]


def test_contents_chunks_stand_apart_and_search_skips_them() -> None:
    els = [
        Element(kind="title", text="Contents", level=1),
        Element(kind="contents", text="1 License . . . . 1"),
        Element(kind="text", text="This manual is free software."),
    ]
    chunks = chunk_elements(els, title="Manual", size=50, overlap=5)
    types = [c.element_types for c in chunks if c.chunk_type == "child"]
    assert types == [("contents",), ("text",)]
    assert WITHOUT_NAVIGATION == {"bool": {"must_not": [{"term": {"element_types": "contents"}}]}}


SPHINX = b"""<!DOCTYPE html><html><head>
<title>json \xe2\x80\x94 JSON encoder and decoder &#8212; Python 3.11.2 documentation</title>
</head><body>
<div class="related" role="navigation"><h3>Navigation</h3><ul><li>index</li></ul></div>
<div class="document"><div class="body" role="main">
<section id="json"><h1>json \xe2\x80\x94 JSON encoder and decoder
<a class="headerlink" href="#json">\xc2\xb6</a></h1>
<p>JSON is a lightweight data interchange format.</p>
<section id="basic-usage"><h2>Basic Usage<a class="headerlink" href="#basic-usage">\xc2\xb6</a></h2>
<p>Serialize obj as a JSON formatted stream.</p></section></section>
</div></div>
<div class="sphinxsidebar" role="navigation"><h3>Table of Contents</h3><ul><li>json</li></ul></div>
<div class="footer">&copy; Copyright 2001-2023.</div>
</body></html>"""

MKDOCS = b"""<html><head><title>Getting started - MkDocs</title></head><body>
<header class="md-header"><nav>Home Docs</nav></header>
<div class="md-sidebar md-sidebar--primary"><nav class="md-nav">Table of contents</nav></div>
<main class="md-main"><article class="md-content__inner">
<h1 id="getting-started">Getting started<a class="headerlink" href="#getting-started">#</a></h1>
<p>Install MkDocs with pip.</p></article></main>
<footer class="md-footer">Made with Material</footer></body></html>"""

DOCUSAURUS = b"""<html><head><title>Intro | My Site</title></head><body>
<nav class="navbar">Docs Blog</nav>
<aside class="theme-doc-sidebar-container">Tutorial Intro</aside>
<main><article><header><h1>Intro</h1></header>
<aside class="note">Back up your data before you start.</aside>
<h2 id="setup">Setup
<a class="hash-link" href="#setup" aria-label="Direct link">\xe2\x80\x8b</a></h2>
<p>Run the installer.</p>
<nav class="pagination-nav">Next: Basics</nav></article>
<div class="theme-doc-toc-desktop">On this page Setup</div></main>
<footer class="footer">Copyright</footer></body></html>"""


# Publican (the Debian Administrator's Handbook): a download banner, a paragraph of linked
# logos, and "docnav" lists of Prev / Home / Next at the top and the bottom.
PUBLICAN = b"""<html><head><title>14.4. Introduction to AppArmor</title></head><body>
<div id="banner"><a href="http://debian-handbook.info/get/"><span class="text">Download the
ebook</span></a></div><p id="title"><a class="left" href="http://www.debian.org"><img
alt="Product Site" src="image_left.png" /></a><a class="right" href="index.html"><img
alt="Documentation Site" src="image_right.png" /></a></p><ul class="docnav top"><li
class="previous"><a href="sect.supervision.html"><strong>Prev</strong></a></li><li
class="home">The Debian Administrator's Handbook</li><li class="next"><a
href="sect.selinux.html"><strong>Next</strong></a></li></ul><div class="section"><div
class="titlepage"><div><div><h2 class="title"><a id="sect.apparmor"></a>14.4. Introduction
to AppArmor</h2></div></div></div><div class="para">AppArmor is a Mandatory Access Control
system.</div><p><img alt="A diagram of the profiles" src="profiles.png" /></p></div>
<ul class="docnav"><li class="next"><a href="sect.selinux.html"><strong>Next</strong>14.5.
Introduction to SELinux</a></li></ul></body></html>"""


# DocBook (Modular DocBook HTML Stylesheet): the title page's authors are <h3>s.
DOCBOOK = b"""<HTML><HEAD><TITLE>Users and Groups in the Debian System</TITLE></HEAD><BODY>
<DIV CLASS="TITLEPAGE"><H1 CLASS="TITLE">Users and Groups in the Debian System</H1>
<H3 CLASS="AUTHOR">Joey Hess</H3><H3 CLASS="AUTHOR">Colin Watson</H3>
<P>Copyright 2001 Joey Hess</P></DIV><H2>Introduction</H2><P>Users are listed here.</P>
</BODY></HTML>"""


# Texinfo (makeinfo 6): the node bar in a "header" div, the manual's name after the node's.
TEXINFO = b"""<html><head><title>Closure Example (libffi: the portable foreign function
interface library)</title></head><body lang="en"><div class="section" id="Closure-Example">
<div class="header"><p>Next: <a href="Thread-Safety.html" rel="next">Thread Safety</a>,
Previous: <a href="The-Closure-API.html" rel="prev">The Closure API</a>, Up:
<a href="Using-libffi.html" rel="up">Using libffi</a> &nbsp; [<a href="Index.html">Index</a>]
</p></div><hr><h3 class="section">2.6 Closure Example</h3>
<p>A trivial example that creates a new puts by binding fputs with stdout.</p>
<div class="header"><p>Written by the libffi authors, who keep it up to date for every
release of the library.</p></div></div></body></html>"""


@pytest.mark.parametrize(
    ("page", "title", "kept", "gone"),
    [
        (
            SPHINX,
            "json — JSON encoder and decoder",
            ["Basic Usage", "lightweight"],
            ["Table of Contents", "Navigation", "Copyright", "¶"],
        ),
        (
            MKDOCS,
            "Getting started",
            ["Getting started", "Install MkDocs"],
            ["Table of contents", "Made with", "Home Docs"],
        ),
        (
            TEXINFO,
            "Closure Example",
            ["2.6 Closure Example", "binding fputs", "Written by the libffi authors"],
            ["Next:", "Previous:", "Thread Safety"],
        ),
        (
            PUBLICAN,
            "14.4. Introduction to AppArmor",
            ["Mandatory Access Control", "A diagram of the profiles"],
            ["Download", "Product Site", "Documentation Site", "Prev", "SELinux", "Handbook"],
        ),
        (
            DOCUSAURUS,
            "Intro",
            ["Intro", "Setup", "installer"],
            ["Tutorial Intro", "On this page", "Next: Basics", "Copyright"],
        ),
    ],
)
def test_documentation_site_chrome_is_left_out(
    page: bytes, title: str, kept: list[str], gone: list[str]
) -> None:
    html, found, _ = _page_content(page)
    assert found == title
    for text in kept:
        assert text in html
    for text in gone:
        assert text not in html


def test_pages_joined_into_one_keep_every_main_region() -> None:
    """A converter that joins pages (pandoc, an EPUB chapter made of several) leaves one
    main region per page: every one is read, in order, each without its chrome; a main
    inside a main is read once."""
    page = b"""<html><head><title>Excerpts</title></head><body>
<div class="sphinxsidebar">Navigation</div>
<div role="main"><h1>json</h1><p>Serialize obj as JSON.</p></div>
<div class="footer">Copyright</div>
<div role="main"><h1>csv</h1><main><p>Read delimited rows.</p></main></div>
</body></html>"""
    html, _, _ = _page_content(page)
    assert html.index("Serialize obj") < html.index("Read delimited rows")
    assert html.count("Read delimited rows") == 1
    assert "Navigation" not in html and "Copyright" not in html


def test_layout_tables_become_blocks_and_data_tables_stay() -> None:
    """An HTML e-mail is laid out in nested tables: read as tables, each of its paragraphs
    was a cell of one long row. A table holding a table, a one-column table and one
    marked role="presentation" are blocks; a table of data stays a table."""
    page = b"""<html><body><table width="600"><tr><td><table role="presentation">
<tr><td><h2>Steel HR Sport</h2></td><td><p>For serious sports.</p></td></tr></table>
<table><tr><td><p>Follow your path.</p></td></tr><tr><td><p>Get in the zone.</p></td></tr>
</table><table><thead><tr><th>Model</th><th>Price</th></tr></thead>
<tbody><tr><td>Steel HR</td><td>199</td></tr></tbody></table></td></tr></table></body></html>"""
    html, _, _ = _page_content(page)
    root = lxml_html.fromstring(html)
    tables = root.xpath("//table")
    assert len(tables) == 1
    assert [c.text_content() for c in tables[0].iter("td", "th")] == [
        "Model",
        "Price",
        "Steel HR",
        "199",
    ]
    assert root.xpath("//h2")[0].text_content() == "Steel HR Sport"
    assert "Get in the zone." in html and not root.xpath("//td[.//p]")


def test_docbook_authors_are_credits_not_sections() -> None:
    html, title, _ = _page_content(DOCBOOK)
    assert title == "Users and Groups in the Debian System"
    assert '<p class="AUTHOR">Joey Hess</p>' in html
    assert "<h3" not in html.lower() and "<h2>Introduction</h2>" in html


def test_site_suffixes_leave_titles() -> None:
    assert _site_free_title("Intro | My Site", "Intro") == "Intro"
    assert _site_free_title("argparse — Parser — Python 3.11 documentation", "") == (
        "argparse — Parser"
    )
    assert _site_free_title("A plain title", "") == "A plain title"
    assert _site_free_title("Python - a guide", "") == "Python - a guide"
    assert _site_free_title("Setup | Acme Cloud", "", "Acme Cloud") == "Setup"
    assert _site_free_title("Setup | Acme Cloud", "") == "Setup | Acme Cloud"
    assert _site_free_title("Types (libffi manual)", "2.3 Types") == "Types"
    assert _site_free_title("Top (libffi manual)", "libffi") == "libffi manual"
    assert _site_free_title("Python (a language)", "Snakes") == "Python (a language)"


def test_html_report_counts_permalinks() -> None:
    els = [
        Element(kind="title", text="Basic Usage ¶", level=1),
        Element(kind="text", text="Serialize obj."),
    ]
    chunks = chunk_elements(els, title="json", size=50, overlap=5)
    report = html_report("json.html", "json", ["Basic Usage"], chunks)
    assert report.permalink_share == 1.0


def test_respace_splits_only_what_the_page_prints_as_two_words() -> None:
    words = page_words(
        "The member is defined and offered by the class; a data base or database.\n"
        "CLASS TEMPLATES 568\nimmedi\ufffeately pro-\ngrammer"
    )
    assert {"immediately", "programmer", "database"} <= words
    els = [
        Element(kind="text", text="It was definedand offeredby the class.", page=3),
        Element(kind="title", text="CLASSTEMPLATES", page=3),
        Element(kind="text", text="A database, immediately, by the programmer.", page=3),
        Element(kind="text", text="definedand", page=4),  # another page: no opinion
        Element(kind="code", text="definedand", page=3),
        Element(kind="text", text="数据库和索引", page=3),
    ]
    out = respace(els, {3: words})
    assert [e.text for e in out] == [
        "It was defined and offered by the class.",
        "CLASS TEMPLATES",
        "A database, immediately, by the programmer.",
        "definedand",
        "definedand",
        "数据库和索引",
    ]


def test_outline_without_positions_prefers_the_heading_to_the_running_header() -> None:
    outline = [OutlineEntry(0, "Usage", 3), OutlineEntry(0, "Options", 5)]
    els = [
        _at(4, "USAGE 4", 0.03),
        _at(4, "Some text about usage that runs on.", 0.2),
        _at(5, "USAGE 5", 0.03),
        _at(5, "The end of the usage text.", 0.1),
        _at(5, "Options", 0.4, "title"),
        _at(5, "Options change what it does.", 0.45),
    ]
    out = apply_outline(els, usable(outline))
    assert [(e.kind, e.text) for e in out if e.page == 5] == [
        ("text", "The end of the usage text."),
        ("title", "Options"),
        ("text", "Options change what it does."),
    ]
    assert "USAGE 4" not in [e.text for e in out]


def test_an_ellipsis_or_a_price_is_not_a_prompt() -> None:
    assert not looks_like_code("... and then the night fell")
    assert not looks_like_code("$5 million in grants")
    assert not is_code_block("(see below) $ 5 is the fee\nfor each of the two visits")


@pytest.mark.parametrize(
    "block",
    [
        "def refund(order):\n    if order.paid:\n        return order.total",
        ">>> refund(order, 5)\nRefund(id=7, amount=5)\n>>> order.total\n40",  # a session
        "$ es-rag init\nindex acme created",
        "(tutorial-env) $ python -m pip install novas\nCollecting novas",  # a venv's prompt
        "x = 1\ny = x + 1\nprint(y)",
    ],
)
def test_listings_are_code_blocks(block: str) -> None:
    assert is_code_block(block)


@pytest.mark.parametrize(
    "block",
    [
        "Acme Finance\n    12 Harbour Street\n    Lyon",  # an address, indented
        "Roses are red,\n    violets are blue",
        "After local assignment: test spam\nAfter global assignment: nonlocal spam",
        "fetch(url) returns a response",  # one line: nothing to keep
        "The call fetch(url) returns a response.\nIt raises on a timeout.",
    ],
)
def test_prose_on_several_lines_is_not_code(block: str) -> None:
    assert not is_code_block(block)
