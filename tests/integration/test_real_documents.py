"""Title paths on real documents that nobody here wrote (issue 16).

Debian's documentation packages are fetched with ``apt-get download`` (cached under
``ES_RAG_DEBIAN_DOCS``, default ``~/.cache/es-rag/debian-docs``) and go through es-rag's
own parser (the sandbox, default settings) and chunker:

- the C++ Annotations book (LaTeX, 1,151 pages, an outline of 627 entries, running
  headers that change with the chapter, code listings full of lines a parser takes for
  headings);
- the Auto Multiple Choice manual (DocBook through LaTeX), English and Japanese, whose
  LaTeX listings (``\\begin{question}``) were headings before;
- pages of the Python library reference (Sphinx HTML, permalinks, sidebars), of
  MkDocs' user guide (MkDocs HTML) and of the Debian Administrator's Handbook (Publican
  HTML: a download banner, linked logos, Prev/Next lists).

The figures are those of ``scripts/eval_structure.py`` (es_rag.structure_check), held to
the issue's targets. The book runs with ``--long`` (its parse alone takes 2.5 minutes).
One test also ingests the English manual into the real search server
and checks that its table of contents is stored but left out of search.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from es_rag import detect
from es_rag.chunking import chunk_elements
from es_rag.config import Settings
from es_rag.engine.client import Engine
from es_rag.headings import heading_key
from es_rag.parsing import ParsedFile, Parser
from es_rag.pipeline import Ingestor
from es_rag.query.search import Searcher
from es_rag.structure_check import (
    MARKUP_TITLE,
    StructureReport,
    beside_html,
    debian_package,
    html_heading_keys,
    html_headings,
    html_report,
    pdf_report,
    pdf_text,
    read_alone,
    sphinx_sources,
)
from es_rag.types import AccessControl, Chunk, Document

CACHE = Path(os.environ.get("ES_RAG_DEBIAN_DOCS", Path.home() / ".cache/es-rag/debian-docs"))
AMC = "usr/share/doc/auto-multiple-choice"
AMC_EN = f"{AMC}/auto-multiple-choice.en.pdf"
BOOK = ("c++-annotations-pdf", "usr/share/doc/c++-annotations/cplusplus.pdf")
PYTHON_DOC = ("python3.11-doc", "python3.13-doc", "python3.12-doc")

pytestmark = pytest.mark.skipif(
    shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None,
    reason="the real documents come from Debian's archive: apt-get and dpkg-deb are needed",
)


def _chunks(parsed: ParsedFile, title: str) -> list[Chunk]:
    settings = Settings()
    return chunk_elements(
        parsed.elements,
        title=title,
        size=settings.chunk_size,
        overlap=settings.chunk_overlap,
        parent_size=settings.parent_chunk_size,
    )


_PARSED: dict[Path, ParsedFile] = {}


def _parse(parser: Parser, path: Path) -> ParsedFile:
    """Each file is parsed once per session: the search test reuses the manual's parse."""
    if path not in _PARSED:
        _PARSED[path] = parser.parse(path)
    return _PARSED[path]


def _public(path: Path, parsed: ParsedFile) -> Document:
    """The parsed file as a document every caller of tenant "t" may read."""
    return Document(
        doc_id=str(path),
        text="",
        acl=AccessControl(tenant_id="t", visibility="public"),
        title=parsed.title,
        source_uri=path.as_uri(),
        mime_type=parsed.mime,
        elements=tuple(parsed.elements),
    )


def _pdf(parser: Parser, package: str, inner: str) -> tuple[StructureReport, list[Chunk]]:
    path = debian_package((package,), CACHE) / inner
    parsed = _parse(parser, path)
    title = parsed.title or path.stem
    chunks = _chunks(parsed, title)
    text = pdf_text(path, parsed.outline)
    return pdf_report(path.name, title, parsed.pages, parsed.outline, chunks, text), chunks


def _holds_targets(report: StructureReport, chunks: list[Chunk]) -> None:
    assert report.covered >= 0.9, report
    assert report.code_elements == 0, report
    assert report.running_header_share <= 0.01, report
    # A section per chunk was the symptom: 4,351 parents for 5,498 children.
    assert report.parents_per_child < 0.9, report
    paths = {c.title_path for c in chunks if c.chunk_type == "child"}
    assert all(p[0] == report.title for p in paths)


def test_book_with_an_outline(parser: Parser, request: pytest.FixtureRequest) -> None:
    if not request.config.getoption("--long"):
        # CI holds the two manuals (101 and 78 pages, outlines, LaTeX listings) to the same
        # targets; the book adds 2.5 minutes of parsing. scripts/eval_structure.py reports it.
        pytest.skip("the 1,151-page book runs with --long (2.5 min of parsing)")
    report, chunks = _pdf(parser, *BOOK)
    assert report.title == "C++ Annotations Version 12.2.0"  # no /Title: the title page
    assert report.headings > 600
    _holds_targets(report, chunks)
    assert report.navigation_children > 0  # its table of contents and index
    paths = {c.title_path[1:] for c in chunks if c.chunk_type == "child"}
    ends = {p[-1] for p in paths if p}
    assert "22.3 The keyword `typename'" in ends or any("typename" in e for e in ends)
    for code in ("int main() {", "public:", "private:", "} int main() {"):
        assert all(code not in p for p in paths)
    assert not any("CLASSTEMPLATES" in e or "CHAPTER" in e for p in paths for e in p)


@pytest.mark.parametrize(
    ("inner", "title"),
    [
        (AMC_EN, "Auto Multiple Choice"),
        (f"{AMC}/auto-multiple-choice.ja.pdf", "Auto Multiple Choice"),
    ],
)
def test_manual_with_latex_listings(parser: Parser, inner: str, title: str) -> None:
    report, chunks = _pdf(parser, "auto-multiple-choice-doc-pdf", inner)
    assert report.title == title
    _holds_targets(report, chunks)
    assert report.navigation_children > 0
    elements = {e for c in chunks for e in c.title_path}
    assert not [e for e in elements if "\\begin" in e or "\\end" in e or "\\def" in e]
    # The manual's own headings may name a command ("Command \\explain"); the report's
    # code_elements counts the others, and _holds_targets wants none.


@pytest.mark.parametrize(
    ("packages", "pattern", "title"),
    [
        (PYTHON_DOC, "usr/share/doc/python3*/html/library/json.html", "json — JSON encoder"),
        (PYTHON_DOC, "usr/share/doc/python3*/html/library/argparse.html", "argparse — Parser"),
        (PYTHON_DOC, "usr/share/doc/python3*/html/library/functools.html", "functools — "),
        (
            ("mkdocs-doc",),
            "usr/share/doc/mkdocs/html/user-guide/configuration.html",
            "Configuration",
        ),
        (
            ("debian-handbook",),
            "usr/share/doc/debian-handbook/html/en-US/sect.apparmor.html",
            "14.4. Introduction to AppArmor",
        ),
    ],
)
def test_documentation_site_pages(
    parser: Parser, packages: tuple[str, ...], pattern: str, title: str
) -> None:
    path = next(debian_package(packages, CACHE).glob(pattern))
    parsed = parser.parse(path)
    assert parsed.title and parsed.title.startswith(title), parsed.title
    assert "documentation" not in parsed.title and "MkDocs" not in parsed.title
    chunks = _chunks(parsed, parsed.title)
    report = html_report(path.name, parsed.title, html_headings(path.read_bytes()), chunks)
    assert report.permalink_share == 0.0, report
    assert report.covered >= 0.9, report
    elements = {e for c in chunks for e in c.title_path}
    assert not {"Table of Contents", "Navigation", "This Page", "Quick search"} & elements
    chrome = ("¶", "Quick search", "Download the ebook", "Product Site", "Documentation Site")
    assert not [c.content for c in chunks if any(x in c.content for x in chrome)]


@pytest.mark.one_engine(
    "what the parser marks as navigation in a real book; search leaves it out with one term"
    " filter, the same on every engine"
)
def test_table_of_contents_is_stored_but_not_searched(
    parser: Parser,
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    searcher_for: Callable[[Settings], Searcher],
    engine: Engine,
) -> None:
    path = debian_package(("auto-multiple-choice-doc-pdf",), CACHE) / AMC_EN
    parsed = _parse(parser, path)  # the parser's own output for the file, parsed once
    settings = make_settings(chunk_size=200, chunk_overlap=30)
    result = ingestor_for(settings).ingest(_public(path, parsed))
    assert result.status == "indexed", result
    engine.refresh(settings.index)
    searcher = searcher_for(settings)
    # The words of the table of contents' first lines: its chunk would match them best.
    question = "Operating system Software Recommended versions LaTeX Numerical limitations"
    hits = searcher.search(question, tenant="t", k=10, strategy="bm25").hits
    assert hits
    assert not [h for h in hits if ". . . ." in h.text]
    navigation = searcher.search(
        question, tenant="t", k=10, strategy="bm25", filters=["element_types=contents"]
    ).hits
    assert navigation and all(". . ." in h.text or "Contents" in h.text for h in navigation)
    # On its own BM25 score the table of contents would have been among the ten: only
    # the filter kept it out.
    assert navigation[0].score > hits[-1].score


# --- AsciiDoc: Git's manual pages, and the HTML that AsciiDoc rendered from them ----------
GIT_DOC = "usr/share/doc/git-doc"


def test_asciidoc_pages_have_the_headings_of_their_html(parser: Parser) -> None:
    """Each page's headings, in order, against those of the HTML that AsciiDoc made of the
    same source (read with lxml, not with es-rag's HTML reader). Read as plain text before,
    anchors and attribute entries were headings and "=== Title" was not."""
    # Git's sources that include no other file (es-rag reads a file alone).
    root = debian_package(("git-doc",), CACHE) / GIT_DOC
    pages = read_alone(beside_html(root), detect.ASCIIDOC)
    assert len(pages) >= 100, "git-doc's AsciiDoc sources were not found"
    same, markup = 0, []
    for source, html in pages:
        parsed = parser.parse(source)
        assert parsed.mime == detect.ASCIIDOC
        titles = [e.text for e in parsed.elements if e.kind == "title"]
        markup += [t for t in titles if MARKUP_TITLE.search(t)]
        same += [heading_key(t) for t in titles] == html_heading_keys(html)
    assert not markup
    # 124 of 131 on git-doc 2.39: the others lose a heading that looks like code
    # ("browser.<tool>.path"), as a Markdown file's would, or one the source indents.
    assert same / len(pages) >= 0.9, (same, len(pages))


@pytest.mark.one_engine("what the parser makes of an AsciiDoc file, searched with BM25")
def test_asciidoc_question_and_answer_found_together(
    parser: Parser,
    make_settings: Callable[..., Settings],
    ingestor_for: Callable[[Settings], Ingestor],
    searcher_for: Callable[[Settings], Searcher],
    engine: Engine,
) -> None:
    """Git's FAQ is a labelled list: each question a term, its answer the description. A
    question finds the chunk that holds its answer, under the FAQ's section."""
    path = debian_package(("git-doc",), CACHE) / GIT_DOC / "gitfaq.txt"
    parsed = parser.parse(path)
    settings = make_settings()
    assert ingestor_for(settings).ingest(_public(path, parsed)).status == "indexed"
    engine.refresh(settings.index)
    hits = (
        searcher_for(settings)
        .search(
            "made a mistake in the last commit, how do I change it",
            tenant="t",
            k=3,
            strategy="bm25",
        )
        .hits
    )
    assert hits
    top = hits[0]
    assert "How do I change it?" in top.text and "git commit --amend" in " ".join(top.text.split())
    assert top.title_path[-1] == "Common Issues", top.title_path


def test_rst_sources_have_the_headings_of_their_sphinx_html(parser: Parser) -> None:
    """Sphinx publishes each page's reStructuredText beside its HTML (``_sources/*.rst.txt``):
    Python's library reference, its headings in order against the HTML's. Read as plain
    text before, none matched: ``.. versionadded::`` and ``.. code-block::`` were headings,
    and sections underlined with ``^`` or ``*`` were not."""
    root = next(debian_package(PYTHON_DOC, CACHE).glob("usr/share/doc/python3.*/html"))
    library = [p for p in sphinx_sources(root) if p[0].parent.name == "library"][:80]
    sources = [source for source, _ in library]
    same, markup = 0, []
    for source, html in library:
        parsed = parser.parse(source)
        assert parsed.mime == detect.RST, source
        titles = [e.text for e in parsed.elements if e.kind == "title"]
        markup += [t for t in titles if MARKUP_TITLE.search(t)]
        same += [heading_key(t) for t in titles] == html_heading_keys(html)
    assert not markup
    # 78 of the first 80 on Python 3.11's: the others lose a heading written as code
    # (``import __main__``), as a Markdown file's would.
    assert same / len(sources) >= 0.9, (same, len(sources))
