"""The parsing pipeline on real documents, written by the real writers of ``tests.documents``.

Every file here is produced by the library a real author's tool would use (python-docx,
python-pptx, openpyxl, reportlab, Pillow, the e-mail package), parsed by the real
:class:`~es_rag.parsing.Parser` (Unstructured in its sandboxed child, Tesseract for scans)
and chunked by the real :func:`~es_rag.chunking.chunk_elements`. Nothing is mocked: a
regression in Unstructured, in the cleaning or in the chunker shows up here as a document
that reads wrong. The last test runs the real ``es-rag`` CLI over the whole folder, once per
engine.

The bookkeeping helpers below are deliberately independent of the chunker: they re-read
the source from the parsed elements (sentences, table rows, code blocks) and the chunks
from their text, so "nothing lost, nothing duplicated beyond the overlap" is checked
against the document, not against the chunker's own idea of it.
"""

from __future__ import annotations

import email.message
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lxml import html as lxml_html

from es_rag import detect
from es_rag.chunking import chunk_elements, count_words
from es_rag.engine.client import Engine
from es_rag.parsing import ParsedFile, Parser
from es_rag.types import Chunk
from tests import documents as d
from tests.conftest import missing, unique_index
from tests.integration.conftest import drop_alias

pytestmark = pytest.mark.integration

# Sizes in words (count_words): small enough that sections split into several children
# and the big tables into several parts and parents. SMALL and MEDIUM keep the corpus's
# longest sentence (29 words, Chinese) within one child, so sentence bookkeeping is exact;
# TINY cuts it, as a sentence longer than a child must be.
SMALL: dict[str, int] = {"size": 60, "overlap": 10, "parent_size": 200}
MEDIUM: dict[str, int] = {"size": 30, "overlap": 12, "parent_size": 120}
TINY: dict[str, int] = {"size": 20, "overlap": 8, "parent_size": 60}
# Where these short documents overlap at all (few sections are longer than one child),
# and which documents then must show it.
OVERLAPS: dict[str, tuple[dict[str, int], set[str]]] = {
    "25-12": ({"size": 25, "overlap": 12, "parent_size": 120}, {"handbook.docx", "deck.pptx"}),
    "22-12": ({"size": 22, "overlap": 12, "parent_size": 120}, {"mail.eml", "guide.md"}),
    "45-22": ({"size": 45, "overlap": 22, "parent_size": 200}, {"handbook.docx"}),  # Chinese
}

WRITERS: dict[str, Callable[[Path], Path]] = {
    "handbook.docx": d.docx_handbook,
    "deck.pptx": d.pptx_deck,
    "catalogue.xlsx": d.xlsx_book,
    "cities.csv": d.csv_file,
    "manual.pdf": d.pdf_text,
    "scan-en.pdf": lambda p: d.scanned_pdf(p, [d.SCAN_EN]),
    "scan-en.png": lambda p: d.png_scan(p, d.SCAN_EN),
    "mail.eml": d.eml_message,
    "listing.docx": d.docx_listing,
    "listing.pptx": d.pptx_listing,
    "policy.odt": d.odt_policy,
    "guide.epub": d.epub_guide,
    "sheets.ods": d.ods_book,
    "slides.odp": d.odp_deck,
    "newsletter.eml": d.eml_newsletter,
    "flat.fodt": d.fodt_policy,
    "commands.docx": d.docx_styled_code,
}
TEXTS: dict[str, str] = {
    "help.html": d.HTML_PAGE,
    "guide.md": d.MARKDOWN_DOC,
    "overview.txt": d.TEXT_DOC,
    "travel.rtf": d.RTF_DOC,
    "notes.txt": d.TEXT_NOTES,
}
CHINESE_SCANS = ("scan-zh.pdf", "scan-zh.png")
DISGUISED = "handbook-saved-as.pdf"  # a DOCX under a PDF's name

EXPECTED: dict[str, tuple[str, str]] = {  # file -> (type read from the bytes, title)
    "handbook.docx": (detect.DOCX, d.DOCX_TITLE),
    DISGUISED: (detect.DOCX, d.DOCX_TITLE),
    "deck.pptx": (detect.PPTX, d.PPTX_SLIDES[0][0]),  # no core title: the first slide's
    "catalogue.xlsx": (detect.XLSX, "catalogue"),
    "cities.csv": (detect.CSV, "cities"),
    "manual.pdf": (detect.PDF, "Operations Manual"),
    "scan-en.pdf": (detect.PDF, "scan-en"),
    "scan-en.png": ("image/png", "scan-en"),
    "mail.eml": (detect.EMAIL, "Refund window extended"),
    "help.html": (detect.HTML, "Help Center"),
    "guide.md": (detect.MARKDOWN, "Deployment guide"),
    "overview.txt": (detect.TEXT, "overview"),
    "travel.rtf": (detect.RTF, d.RTF_TITLE),
    "notes.txt": (detect.TEXT, "notes"),
    "listing.docx": (detect.DOCX, "Refund helpers"),
    "listing.pptx": (detect.PPTX, "Trying the refund helper"),
    "policy.odt": (detect.ODT, d.ODT_TITLE),
    "guide.epub": (detect.EPUB, d.EPUB_TITLE),
    "sheets.ods": (detect.ODS, "sheets"),
    "slides.odp": (detect.ODP, d.ODP_SLIDES[0][0]),
    "newsletter.eml": (detect.EMAIL, d.NEWSLETTER_SUBJECT),
    "flat.fodt": (detect.ODT, d.ODT_TITLE),
    "commands.docx": (detect.DOCX, "Virtual environments"),
}
ALL_FILES = [*EXPECTED, *CHINESE_SCANS]
DISTINCT = [name for name in ALL_FILES if name != DISGUISED]  # the copy reads the same

DOCX_HEADER_ROW = "| Region | Daily limit | Currency |"
DOCX_CAPTION = "Table 1: Daily limits by region"
CODE = "pip install es-rag\nes-rag init\nes-rag ingest docs/ \\\n    --tenant acme --public"


# --- fixtures --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every document once per module, in one folder (the end-to-end test ingests it)."""
    root = tmp_path_factory.mktemp("parsing-corpus")
    for name, write in WRITERS.items():
        write(root / name)
    for name, text in TEXTS.items():
        (root / name).write_text(text, encoding="utf-8")
    shutil.copyfile(root / "handbook.docx", root / DISGUISED)
    font = d.cjk_font()
    if font is not None:  # without a CJK font the Chinese scan tests report it themselves
        d.scanned_pdf(root / "scan-zh.pdf", [d.SCAN_ZH], font=font)
        d.png_scan(root / "scan-zh.png", d.SCAN_ZH, font=font)
    return root


@pytest.fixture(scope="module")
def parsed(parser: Parser, corpus: Path) -> Callable[[str], ParsedFile]:
    """Parse on first use, then reuse: each file goes through the sandbox once."""
    cache: dict[str, ParsedFile] = {}

    def get(name: str) -> ParsedFile:
        if name in CHINESE_SCANS:
            _need_chinese_ocr()
        if name not in cache:
            cache[name] = parser.parse(corpus / name)
        return cache[name]

    return get


def _need_chinese_ocr() -> None:
    if d.cjk_font() is None:
        missing("no CJK font to draw the Chinese scans (apt-get install fonts-wqy-microhei)")
    if "chi_sim" not in _tesseract_languages():
        missing("Tesseract has no chi_sim data (apt-get install tesseract-ocr-chi-sim)")


@functools.cache
def _tesseract_languages() -> frozenset[str]:
    exe = shutil.which("tesseract")
    if exe is None:
        return frozenset()
    proc = subprocess.run([exe, "--list-langs"], capture_output=True, text=True, check=False)
    return frozenset((proc.stdout + proc.stderr).split())


# --- helpers: text as a reader compares it --------------------------------------------------
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")
_SENTENCE = re.compile(r"(?<=[.!?;:])\s+(?=\S)|(?<=[。！？；…])(?=.)")
_RULE = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+$")
_FENCE = "```"


def key(text: str) -> str:
    """Whitespace normalised; CJK text compared without spaces (layout adds or drops them)."""
    text = " ".join(text.split())
    return re.sub(r"\s+", "", text) if _CJK.search(text) else text


def sentences(text: str) -> list[str]:
    """Sentence boundaries as the issue defines them (English and Chinese punctuation)."""
    return [key(s) for s in _SENTENCE.split(text) if s.strip()]


def pipe_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def source_rows(html: str | None, text: str) -> list[str]:
    """A table's rows from the parser's HTML (header first), as markdown pipe rows."""
    if not html:
        return [pipe_row([" ".join(text.split())])]
    root = lxml_html.fromstring(html)
    rows = []
    for tr in root.iter("tr"):
        cells = [" ".join(c.text_content().split()) for c in tr if c.tag in ("td", "th")]
        if any(cells):
            rows.append(pipe_row(cells))
    return rows


def children(chunks: list[Chunk]) -> list[Chunk]:
    return [c for c in chunks if c.chunk_type == "child"]


def parents(chunks: list[Chunk]) -> dict[int, Chunk]:
    return {c.ordinal: c for c in chunks if c.chunk_type == "parent"}


def chunk(doc: ParsedFile, config: dict[str, int]) -> list[Chunk]:
    assert doc.title
    return chunk_elements(doc.elements, title=doc.title, count_tokens=count_words, **config)


def section_headings(doc: ParsedFile, chunks: list[Chunk]) -> set[str]:
    """Headings that are structure: the document title and every title-path component."""
    out = {key(doc.title or "").casefold()}
    for c in chunks:
        out.update(key(h).casefold() for h in c.title_path)
    return out


def source_units(doc: ParsedFile, chunks: list[Chunk]) -> list[str]:
    """What a reader must find in the children, in reading order.

    Sentences of prose, list items and speaker notes; every table row (header included);
    each code block whole. A heading is structure when it names a section (it is in a
    title path) and content when it heads nothing (an e-mail's closing "Alice").
    """
    structural = section_headings(doc, chunks)
    out: list[str] = []
    for el in doc.elements:
        if el.kind == "title":
            if key(el.text).casefold() not in structural:
                out += sentences(el.text)
        elif el.kind == "table":
            out += source_rows(el.html, el.text)
        elif el.kind == "code":
            out.append("code:" + key(el.text))
        elif el.kind == "list_item":  # a marker the reader kept is read back without it
            out += sentences(re.sub(r"^- ", "", el.text.strip()))
        elif el.text.strip():
            out += sentences(el.text)
    return out


def child_units(content: str) -> tuple[list[str], set[str]]:
    """A child read back: (body units in order, table head lines repeated by design).

    Blocks are separated by blank lines. A fenced block is one code unit; a table block's
    caption, header row and rule are its head (repeated in every part), the rows below
    are body; prose loses the "- " list marker and the "Notes:" label, then splits into
    sentences.
    """
    body: list[str] = []
    heads: set[str] = set()
    for block in content.split("\n\n"):
        lines = [line.strip() for line in block.strip().split("\n")]
        if lines[0].startswith(_FENCE):
            inner = "\n".join(lines[1:-1]) if lines[-1] == _FENCE else "\n".join(lines[1:])
            body.append("code:" + key(inner))
        elif any(line.startswith("|") for line in lines):
            rule = next((i for i, line in enumerate(lines) if _RULE.match(line)), -1)
            for line in lines[: rule + 1]:
                heads.add(key(line))
                heads.update(sentences(line))
            body += [key(line) for line in lines[rule + 1 :]]
        else:
            text = re.sub(r"^- ", "", " ".join(lines))
            text = re.sub(r"^Notes:\s*", "", text)
            body += sentences(text)
    return body, heads


def shared_prefix(prev: list[str], nxt: list[str]) -> int:
    """How many units ``nxt`` repeats from the end of ``prev`` (the overlap)."""
    for n in range(min(len(prev), len(nxt)), 0, -1):
        if prev[-n:] == nxt[:n]:
            return n
    return 0


def read_back(
    chunks: list[Chunk],
) -> tuple[list[str], set[str], list[tuple[Chunk, Chunk, list[str]]]]:
    """The children's body units with the overlap removed, the table heads, the overlaps."""
    out: list[str] = []
    heads: set[str] = set()
    overlaps: list[tuple[Chunk, Chunk, list[str]]] = []
    prev: Chunk | None = None
    prev_units: list[str] = []
    for child in children(chunks):
        units, head = child_units(child.content)
        heads |= head
        n = 0
        if prev is not None and prev.parent_ordinal == child.parent_ordinal:
            n = shared_prefix(prev_units, units)
            if n:
                overlaps.append((prev, child, units[:n]))
        out += units[n:]
        prev, prev_units = child, units
    return out, heads, overlaps


def holding(kids: list[Chunk], text: str) -> Chunk:
    """The first child whose content holds ``text`` (failing clearly when none does)."""
    found = [c for c in kids if text in c.content]
    assert found, (text, [c.content[:60] for c in kids])
    return found[0]


def everything(doc: ParsedFile) -> str:
    return "\n".join(e.text for e in doc.elements)


# --- type and title --------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(EXPECTED))
def test_type_read_from_content_and_title(name: str, parsed: Callable[[str], ParsedFile]) -> None:
    """The type comes from the bytes (a DOCX saved as .pdf is a DOCX) and the title from
    the file's own metadata: DOCX core title, PDF Title, <title>, subject, else the stem."""
    mime, title = EXPECTED[name]
    doc = parsed(name)
    assert (doc.mime, doc.title) == (mime, title)
    if name == DISGUISED:
        original = parsed("handbook.docx")
        assert [(e.kind, e.text) for e in doc.elements] == [
            (e.kind, e.text) for e in original.elements
        ]


# --- DOCX ------------------------------------------------------------------------------------
def test_docx_headings_become_title_paths(parsed: Callable[[str], ParsedFile]) -> None:
    """Word's heading levels survive: three deep, in order, the document title first."""
    doc = parsed("handbook.docx")
    levels = {e.text: e.level for e in doc.elements if e.kind == "title"}
    assert levels["Refunds"] == 1 and levels["Failed refunds"] == 2
    assert levels["Error codes"] == 3 and levels["退款政策"] == 1
    assert [e.text for e in doc.elements if e.kind == "list_item"] == [
        "Limits are reviewed every quarter.",
        "Merchants may ask for a temporary raise.",
    ]
    kids = children(chunk(doc, SMALL))
    error = holding(kids, "ERR_REFUND_1042")
    assert error.title_path == ("Payments Handbook", "Refunds", "Failed refunds", "Error codes")
    assert error.context_header == "Payments Handbook > Refunds > Failed refunds > Error codes"
    refunds = holding(kids, "five business days")
    assert refunds.title_path == ("Payments Handbook", "Refunds")
    chinese = holding(kids, "五个工作日内")
    assert chinese.title_path == ("Payments Handbook", "退款政策")
    assert "处理完毕。客户会在" in chinese.content  # sentences of one paragraph, no space


def test_docx_title_heading_is_not_a_chunk_of_its_own(
    parsed: Callable[[str], ParsedFile],
) -> None:
    """The Title-style heading repeats the document title, which every chunk already
    carries in its title path and context header: it opens the document, it is not a
    searchable chunk that says only "Payments Handbook"."""
    chunks = chunk(parsed("handbook.docx"), SMALL)
    bare = [c.content for c in children(chunks) if key(c.content) == d.DOCX_TITLE]
    assert bare == []


def test_docx_big_table_splits_by_rows_with_header_and_caption(
    parsed: Callable[[str], ParsedFile],
) -> None:
    """A 60-row table cannot fit one child: every part repeats the caption and the header
    row, no row is cut, and every data row is in exactly one part."""
    chunks = chunk(parsed("handbook.docx"), SMALL)
    parts = [c for c in children(chunks) if re.search(r"^\| Region \d\d \|", c.content, re.M)]
    assert len(parts) >= 3
    expected = [pipe_row(list(r)) for r in d.DOCX_ROWS[1:]]
    seen: list[str] = []
    for part in parts:
        lines = part.content.split("\n")
        start = lines.index(DOCX_CAPTION)
        assert lines[start + 1] == DOCX_HEADER_ROW, part.content
        assert lines[start + 2] == "| --- | --- | --- |", part.content
        assert part.content.count(DOCX_HEADER_ROW) == 1
        assert part.title_path == ("Payments Handbook", "Limits")
        rows = [line for line in lines if re.match(r"^\| Region \d\d \|", line)]
        assert rows and all(row in expected for row in rows), rows  # intact, not cut
        seen += rows
    assert Counter(seen) == Counter(expected)  # each of the 60 rows exactly once
    assert seen == expected  # and in order


# --- PDF with a text layer -------------------------------------------------------------------
def test_pdf_pages_furniture_and_broken_lines(parsed: Callable[[str], ParsedFile]) -> None:
    """Page furniture goes, lines the layout broke are mended, pages are remembered."""
    doc = parsed("manual.pdf")
    assert doc.pages == 3 and doc.ocr is False
    text = everything(doc)
    assert d.PDF_HEADER not in text
    assert not re.search(r"Page \d+ of 3", text), text
    assert "warehouse in Lyon" in text and "ware-" not in text and "ware- house" not in text
    english = " ".join(d.PDF_PAGES[0][1]).replace("ware- house", "warehouse")
    chinese = "".join(d.PDF_PAGES[2][1])
    by_text = {e.text: e for e in doc.elements}
    assert english in by_text and by_text[english].page == 1
    assert chinese in by_text and by_text[chinese].page == 3  # one string, no space
    for number, (heading, _) in enumerate(d.PDF_PAGES, start=1):
        assert by_text[heading].kind == "title" and by_text[heading].page == number


@pytest.mark.parametrize("config", [SMALL, TINY], ids=["small", "tiny"])
def test_pdf_chunks_carry_the_page_they_are_on(
    config: dict[str, int], parsed: Callable[[str], ParsedFile]
) -> None:
    """A child's page_start/page_end are the page its text is printed on."""
    chunks = chunk(parsed("manual.pdf"), config)
    assert all(d.PDF_HEADER not in c.content for c in chunks)
    printed = {  # each page's body as printed (the hyphenated line end mended)
        n: key(" ".join(lines).replace("ware- house", "warehouse"))
        for n, (_, lines) in enumerate(d.PDF_PAGES, start=1)
    }
    for child in children(chunks):
        [page] = [n for n, text in printed.items() if key(child.content) in text]
        assert (child.page_start, child.page_end) == (page, page), child
        assert child.title_path == ("Operations Manual", d.PDF_PAGES[page - 1][0])


# --- scans -----------------------------------------------------------------------------------
def test_an_image_with_no_words_is_no_text_not_an_empty_file(
    parser: Parser, tmp_path: Path
) -> None:
    """OCR ran and found nothing: ``NoTextError`` (recorded as skipped), told apart from a
    text file with nothing in it and from an image whose OCR is off (both failures)."""
    from PIL import Image

    from es_rag.errors import EmptyDocumentError, NoTextError

    Image.new("RGB", (320, 200), "white").save(tmp_path / "blank.png")
    with pytest.raises(NoTextError, match="no text in it"):
        parser.parse(tmp_path / "blank.png")
    (tmp_path / "blank.txt").write_text("  \n\n")
    with pytest.raises(EmptyDocumentError) as empty:
        parser.parse(tmp_path / "blank.txt")
    assert not isinstance(empty.value, NoTextError)


@pytest.mark.parametrize("name", ["scan-en.pdf", "scan-en.png", *CHINESE_SCANS])
def test_scans_are_read_by_ocr(name: str, parsed: Callable[[str], ParsedFile]) -> None:
    """Page images with no text layer are OCRed, English and Chinese alike: the heading is
    a heading, the two body lines are one paragraph (Chinese rejoined without a space)."""
    lines = d.SCAN_ZH if "zh" in name else d.SCAN_EN
    doc = parsed(name)
    assert doc.ocr is True
    assert all(e.page == 1 for e in doc.elements)
    heading, body = lines[0], lines[2:]
    joined = ("" if "zh" in name else " ").join(body)
    texts = [key(e.text) for e in doc.elements]
    assert key(heading) in texts, texts
    assert any(key(joined) == t for t in texts), texts
    titles = [key(e.text) for e in doc.elements if e.kind == "title"]
    assert titles[:1] == [key(heading)]
    first = children(chunk(doc, SMALL))[0]
    assert first.title_path == (Path(name).stem, heading)
    assert (first.page_start, first.page_end) == (1, 1)


# --- PPTX ------------------------------------------------------------------------------------
def test_pptx_slides_and_speaker_notes(parsed: Callable[[str], ParsedFile]) -> None:
    """Each slide's content carries its slide number; its notes follow its content."""
    doc = parsed("deck.pptx")
    assert doc.pages == len(d.PPTX_SLIDES)
    for number, (title, bullets, notes) in enumerate(d.PPTX_SLIDES, start=1):
        slide = [e for e in doc.elements if e.page == number]
        assert [(e.kind, e.text) for e in slide] == [
            ("title", title),
            *(("text", b) for b in bullets),
            ("notes", notes),
        ]
    positions = [e.page for e in doc.elements]
    assert positions == sorted(positions)  # slide by slide, notes inside their slide
    for config in (SMALL, TINY):
        kids = children(chunk(doc, config))
        assert all(c.page_start == c.page_end for c in kids)  # no child spans two slides
        for number, (title, bullets, notes) in enumerate(d.PPTX_SLIDES, start=1):
            path = (title,) if number == 1 else (d.PPTX_SLIDES[0][0], title)
            mine = [c for c in kids if (c.page_start, c.page_end) == (number, number)]
            assert mine and all(c.title_path == path for c in mine)
            content = "\n\n".join(c.content for c in mine)
            assert all(b in content for b in bullets)
            assert key(content).rfind(key(notes)) > max(key(content).find(b) for b in bullets)


def test_odp_slides_notes_listing_and_table(parsed: Callable[[str], ParsedFile]) -> None:
    """An OpenDocument presentation reads as a PPTX does: the slide number as page (an
    empty slide still counts), the title placeholder as the slide's heading, speaker notes
    after the slide's content, a console session kept as code, a table with its header."""
    doc = parsed("slides.odp")
    assert doc.pages == len(d.ODP_SLIDES)
    shape = [(e.page, e.kind) for e in doc.elements if e.kind != "list_item"]
    assert shape == [
        (1, "title"),
        (1, "notes"),
        (2, "title"),
        (2, "code"),
        (3, "title"),
        (3, "table"),
        (5, "title"),
    ]
    assert [e.text for e in doc.elements if e.kind == "code"] == [d.CODE_SESSION]
    kids = children(chunk(doc, SMALL))
    assert all(c.page_start == c.page_end for c in kids)
    rates = holding(kids, "180 EUR")
    assert rates.page_start == 3 and "| City | Nightly rate |" in rates.content
    questions = holding(kids, "travel budgets")
    assert (questions.page_start, questions.title_path) == (5, (d.ODP_SLIDES[0][0], "Questions"))
    notes = holding(kids, d.ODP_NOTES)
    assert notes.page_start == 1 and "Churn fell to 3%" in notes.content


def test_pptx_notes_label_stays_with_its_notes(parsed: Callable[[str], ParsedFile]) -> None:
    """The "Notes:" label belongs to the speaker notes: a child that ends on the bare
    label (its notes in the next child) gives a reader a label without text."""
    for config in (SMALL, TINY):
        for child in children(chunk(parsed("deck.pptx"), config)):
            assert not child.content.rstrip().endswith("Notes:"), child.content


# --- spreadsheets ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["catalogue.xlsx", "sheets.ods"])
def test_spreadsheet_sheets_head_their_rows(name: str, parsed: Callable[[str], ParsedFile]) -> None:
    """Each sheet is a section named after the sheet; a sheet too big for one child is
    split by rows, each part led by the header row; every row is there once. The same
    workbook as XLSX (openpyxl) and as ODS (pandas through odfpy)."""
    doc = parsed(name)
    assert [e.text for e in doc.elements if e.kind == "title"] == list(d.XLSX_SHEETS)
    assert [e.page for e in doc.elements if e.kind == "title"] == [1, 2]
    kids = children(chunk(doc, SMALL))
    for sheet, rows in d.XLSX_SHEETS.items():
        header = pipe_row([str(v) for v in rows[0]])
        expected = [pipe_row([str(v) for v in r]) for r in rows[1:]]
        mine = [c for c in kids if c.title_path == (Path(name).stem, sheet)]
        assert mine, sheet
        seen = []
        for part in mine:
            lines = part.content.split("\n")
            assert lines[:2] == [header, "| " + " | ".join(["---"] * len(rows[0])) + " |"]
            seen += lines[2:]
        assert seen == expected
        if sheet == "Prices":
            assert len(mine) >= 3  # 200 rows do not fit one child of 60 words


def test_csv_rows_with_their_header(parsed: Callable[[str], ParsedFile]) -> None:
    """A CSV is one table: the header row first, then every row, titled by the file."""
    doc = parsed("cities.csv")
    [child] = children(chunk(doc, SMALL))
    assert child.title_path == ("cities",)
    assert child.content.split("\n") == [
        "| city | country | population |",
        "| --- | --- | --- |",
        "| Lyon | France | 522000 |",
        "| Chengdu | China | 20940000 |",
    ]


# --- HTML, Markdown, text, e-mail ------------------------------------------------------------
def test_html_keeps_main_content_only(parsed: Callable[[str], ParsedFile]) -> None:
    """Navigation, the site header and the footer are not content."""
    doc = parsed("help.html")
    for el in doc.elements:
        for junk in ("ACME", "Log in", "Products", "Pricing", "Copyright", "rights reserved"):
            assert junk not in el.text, (junk, el)
    kids = children(chunk(doc, SMALL))
    shipping = holding(kids, "40 countries")
    assert shipping.title_path == ("Help Center", "Shipping")
    assert "| Zone | Days |\n| --- | --- |\n| EU | 3 |\n| Americas | 7 |" in shipping.content
    password = holding(kids, "Reset your password")
    assert password.title_path == ("Help Center", "Accounts", "Passwords")


def test_html_lists_of_links_are_contents(parser: Parser, tmp_path: Path) -> None:
    """A chapter page listing its pages (Sphinx's toctree) or a generated index: its
    entries are contents (stored, left out of search), its own words stay text; a list
    whose items say something beside their link is text too."""
    modules = "".join(
        f'<li><a href="lib/m{n}.html">m{n} \u2014 Module number {n}</a>'
        f'<ul><li><a href="lib/m{n}.html#api">API of m{n}</a></li></ul></li>'
        for n in range(6)
    )
    described = "".join(
        f'<li><a href="r{n}.html">Recipe {n}</a>: how to bake bread of kind {n} at home.</li>'
        for n in range(10)
    )
    page = tmp_path / "internet.html"
    page.write_text(
        "<html><head><title>Internet Protocols</title></head><body><main>"
        "<h1>Internet Protocols</h1><p>The modules in this chapter implement protocols.</p>"
        f"<ul>{modules}</ul><h2>Recipes</h2><ul>{described}</ul></main></body></html>"
    )
    doc = parser.parse(page)
    kinds = {e.text: e.kind for e in doc.elements}
    assert kinds["The modules in this chapter implement protocols."] == "text"
    assert kinds["m3 \u2014 Module number 3"] == "contents"
    assert kinds["API of m3"] == "contents"
    assert kinds["Recipe 4: how to bake bread of kind 4 at home."] == "list_item"
    listed = [c for c in chunk(doc, SMALL) if "Module number 3" in c.content]
    assert listed and all("contents" in c.element_types for c in listed)


def _plain_and_packed(parser: Parser, plain: Path, text: str, mime: str) -> ParsedFile:
    """``text`` as ``plain`` (read in this process) and gzip-compressed beside it (inflated
    and read in the sandbox): both must be ``mime`` with the same elements; the
    compressed one is returned."""
    import gzip

    plain.write_text(text, encoding="utf-8")
    packed = plain.with_name(plain.name + ".gz")
    packed.write_bytes(gzip.compress(text.encode()))
    docs = [parser.parse(plain), parser.parse(packed)]
    assert [doc.mime for doc in docs] == [mime, mime]
    assert docs[0].elements == docs[1].elements
    return docs[1]


def test_info_manuals_compressed_or_not(parser: Parser, tmp_path: Path) -> None:
    """A GNU Info manual as Debian ships it (gzip: inflated and read in the sandbox) and
    uncompressed (read in this process): the same elements, its nodes' headings as the
    title path, examples as code, menus and indexes kept out of search; a split manual's
    table of parts is nothing to index, and says so."""
    import gzip

    from es_rag.errors import NoTextError
    from tests.unit.test_info import MANUAL

    doc = _plain_and_packed(parser, tmp_path / "demo.info", MANUAL, detect.INFO)
    assert doc.title == "GNU 'demo'"
    chunks = chunk(doc, SMALL)
    usage = next(c for c in chunks if "demo -ni" in c.content)
    assert usage.title_path[-1] == "1.1 Overview" and "code" in usage.element_types
    menus = [c for c in chunks if "(line 20)" in c.content]
    assert menus and all("contents" in c.element_types for c in menus)
    table = tmp_path / "demo-split.info.gz"
    table.write_bytes(
        gzip.compress(
            (MANUAL.split("\x1f")[0] + "\x1f\nIndirect:\ndemo-split.info-1: 1201\n").encode()
        )
    )
    with pytest.raises(NoTextError, match="split Info manual"):
        parser.parse(table)


def test_manual_pages_compressed_or_not(parser: Parser, tmp_path: Path) -> None:
    """A manual page as a system ships it (gzip: inflated and read in the sandbox) and as a
    project's source tree holds it (read in this process): what man shows, the options
    under their section; a page that only includes another says so."""
    import gzip

    from es_rag.errors import NoTextError
    from tests.unit.test_manpage import MAN

    doc = _plain_and_packed(parser, tmp_path / "demo.1", MAN, detect.MANPAGE)
    assert doc.title == "DEMO(1)"
    chunks = chunk(doc, SMALL)
    option = next(c for c in chunks if "-a, --all: do not ignore" in c.content)
    assert option.title_path[-1] == "DESCRIPTION"
    assert not any("\\f" in c.content or "\n.TP" in c.content for c in chunks)
    alias = tmp_path / "alias.1.gz"
    alias.write_bytes(gzip.compress(b".so man1/demo.1\n"))
    with pytest.raises(NoTextError, match="only includes another"):
        parser.parse(alias)


@pytest.mark.parametrize(
    "config", [SMALL, {"size": 8, "overlap": 2, "parent_size": 40}], ids=["small", "size-8"]
)
def test_markdown_code_block_stays_whole(
    config: dict[str, int], parsed: Callable[[str], ParsedFile]
) -> None:
    """A fenced block is one unit even when it is longer than a child (size 8 here)."""
    doc = parsed("guide.md")
    assert [e.text for e in doc.elements if e.kind == "code"] == [CODE]
    kids = children(chunk(doc, config))
    fenced = f"```\n{CODE}\n```"
    holders = [c for c in kids if "pip install" in c.content or "es-rag init" in c.content]
    assert len(holders) == 1 and fenced in holders[0].content
    assert holders[0].title_path == ("Deployment guide", "Install")
    assert all(c.content.count("```") % 2 == 0 for c in kids)
    table = holding(kids, "ES_RAG_ES_URL")
    assert table.content.startswith("| Variable | Meaning |\n| --- | --- |")
    assert table.title_path == ("Deployment guide", "Configure")
    assert any(c.title_path == ("Deployment guide", "部署说明") for c in kids)


def test_rtf_is_read_as_its_words_not_its_markup(parsed: Callable[[str], ParsedFile]) -> None:
    """RTF is text on disk: read as plain text, its control words would be indexed."""
    doc = parsed("travel.rtf")
    text = everything(doc)
    assert "45 € in the Café Lumière and elsewhere; receipts" in text  # escapes, wrapped line
    assert "portal \U0001f6e0 within" in text  # two UTF-16 halves, one character
    assert not re.search(r"\\[a-z]+|[{}]|Calibri|Finance", text)  # markup, fonts, info
    kids = children(chunk(doc, SMALL))
    assert [c.title_path for c in kids] == [
        (d.RTF_TITLE, "MEAL ALLOWANCE"),
        (d.RTF_TITLE, "HOTEL NIGHTS"),
    ]


@pytest.mark.parametrize("name", ["listing.docx", "listing.pptx"])
def test_listings_in_office_files_keep_lines_and_indentation(
    name: str, parsed: Callable[[str], ParsedFile]
) -> None:
    """Word and PowerPoint do not mark code; a paragraph that reads as a listing or a
    console session, or a run of one-line paragraphs that does, is kept as written, fenced
    in one chunk, instead of joined into one run-on line; indented prose stays prose."""
    doc = parsed(name)
    codes = [e.text for e in doc.elements if e.kind == "code"]
    kids = children(chunk(doc, {"size": 12, "overlap": 2, "parent_size": 60}))
    if name.endswith(".docx"):
        assert codes == [d.CODE_LISTING, d.CODE_SESSION, d.CODE_PASTED]
        prose = [e for e in doc.elements if e.text.startswith(("Acme Finance", "Dear", "your"))]
        assert [e.kind for e in prose] == ["text"] * 3
    else:
        assert codes == [d.CODE_SESSION]  # its last line, "40", is not a page number
    for code in codes:
        holders = [c for c in kids if f"```\n{code}\n```" in c.content]
        assert len(holders) == 1, [c.content for c in kids]


def test_odt_headings_listings_and_what_a_reader_sees(
    parsed: Callable[[str], ParsedFile],
) -> None:
    """OpenDocument text, read by es-rag (Unstructured needs pandoc for it): declared
    headings give the title path, code styles (by name, or by a fixed-pitch font) keep a
    listing whole and indented, a footnote is kept, and what Writer does not show (a
    tracked deletion, a comment, the generated table of contents) is not indexed."""
    doc = parsed("policy.odt")
    text = everything(doc)
    assert [e.text for e in doc.elements if e.kind == "code"] == [d.ODT_LISTING, d.ODT_MONO]
    assert d.ODT_FOOTNOTE in text
    assert "claim a daily meal allowance of 45 euros." in text  # <text:s/> is a space
    assert not [hidden for hidden in d.ODT_HIDDEN if hidden in text]
    kids = children(chunk(doc, SMALL))
    assert holding(kids, "allowance(days)").title_path == (d.ODT_TITLE, "Meals")
    assert holding(kids, "SELECT claim_id").title_path == (d.ODT_TITLE, "Meals", "Reporting")
    rates = holding(kids, "180 EUR")
    assert rates.title_path == (d.ODT_TITLE, "Hotels")
    assert "| City | Nightly rate |" in rates.content  # the padding cells are gone
    assert holding(kids, "never more than three nights").title_path == (d.ODT_TITLE, "Hotels")


def test_epub_chapters_in_spine_order(parsed: Callable[[str], ParsedFile]) -> None:
    """An EPUB's chapters are read in the spine's order (not the manifest's), each through
    the HTML path; the navigation document and a chapter's own nav bar are not text."""
    doc = parsed("guide.epub")
    text = everything(doc)
    assert text.index("Herons nest") < text.index("tide table")
    assert d.EPUB_NAV_ONLY not in text and "Previous chapter" not in text
    assert "Map label" not in text  # an SVG in the spine is a picture
    assert d.EPUB_FOOTNOTE in text  # EPUB 3 sets footnotes in <aside>: not chrome
    kids = children(chunk(doc, SMALL))
    assert holding(kids, "fishing boats").title_path == (d.EPUB_TITLE, "Birds", "Gulls")
    tides = holding(kids, "tide --port lyon")
    assert f"```\n{d.EPUB_LISTING}\n```" in tides.content
    assert tides.title_path == (d.EPUB_TITLE, "Tides")


def test_mail_in_a_charset_python_does_not_know_is_read(parser: Parser, tmp_path: Path) -> None:
    mail = tmp_path / "odd.eml"
    mail.write_bytes(
        b"From: a@example.com\nTo: b@example.com\nSubject: Odd charset\n"
        b"Content-Type: text/plain; charset=x-unknown-cs\n\nThe valve needs grease.\n"
    )
    doc = parser.parse(mail)
    assert doc.title == "Odd charset"
    assert [e.text for e in doc.elements][-1] == "The valve needs grease."


def _pdf_lines(path: Path, lines: list[tuple[int, str]]) -> Path:
    """One page of (font size, line) from the top, without metadata: the title is guessed."""
    from reportlab.pdfgen import canvas

    page = canvas.Canvas(str(path))
    y = 780
    for size, text in lines:
        page.setFont("Helvetica-Bold" if size > 11 else "Helvetica", size)
        page.drawString(72, y, text)
        y -= size * 2
    page.save()
    return path


def test_pdf_title_is_a_title_page_line_not_the_heading_style(
    parser: Parser, tmp_path: Path
) -> None:
    """A PDF without a title: the first page's line in the largest type names it, unless
    that type recurs down the page between smaller lines, as a manual page's NAME,
    SYNOPSIS and DESCRIPTION do (groff's PDFs, Debian's bash.pdf, were titled with the
    headings joined: "NAME SYNOPSIS COPYRIGHT DESCRIPTION OPTIONS")."""
    body = "The shell reads commands from the terminal or from a file given to it."
    manual = _pdf_lines(
        tmp_path / "bash.pdf",
        [(14, "NAME"), (11, "bash - GNU Bourne-Again SHell"), (14, "SYNOPSIS"),
         (11, "bash [options] [file]"), (14, "DESCRIPTION"), (11, body)],
    )  # fmt: skip
    assert parser.parse(manual).title == "bash"
    book = _pdf_lines(
        tmp_path / "book.pdf",
        [(20, "Reference Manual of"), (20, "the Garden Irrigation System"), (11, body),
         (14, "Introduction"), (11, body)],
    )  # fmt: skip
    assert parser.parse(book).title == "Reference Manual of the Garden Irrigation System"


def test_word_code_styles_make_code(parsed: Callable[[str], ParsedFile]) -> None:
    """Unstructured reports no paragraph style; es-rag reads them (python-docx): a command
    alone in "Source Code", a listing a line a paragraph in a style based on "Code" (one
    block), and a console session after a virtual environment's prompt are code; prose
    stays prose."""
    doc = parsed("commands.docx")
    assert [e.text for e in doc.elements if e.kind == "code"] == [
        d.STYLED_COMMAND,
        d.STYLED_LISTING,
        d.STYLED_SESSION,
    ]
    assert [e.kind for e in doc.elements if e.text.startswith("The environment")] == ["text"]


def test_plain_text_keeps_asterisks_listings_and_list_items(
    parsed: Callable[[str], ParsedFile], parser: Parser, tmp_path: Path
) -> None:
    """Unstructured's grouper cut "Speed = d * t" into the headings "Speed = d" and "t"
    and joined an indented listing into one line; es-rag groups plain text itself."""
    doc = parsed("notes.txt")
    texts = [(e.kind, e.text) for e in doc.elements]
    assert ("text", "Speed = d * t") in texts
    assert ("code", d.TEXT_NOTES_LISTING) in texts
    item = "only UTF-8 is read, whatever the file declares in its first line"
    assert ("list_item", item) in texts
    kids = children(chunk(doc, SMALL))
    assert sum(f"```\n{d.TEXT_NOTES_LISTING}\n```" in c.content for c in kids) == 1
    # A mail's plain-text body is grouped the same way.
    mail = tmp_path / "speed.eml"
    msg = email.message.EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "alice@example.com", "bob@example.com", "Speed"
    msg.set_content(d.MAIL_BODY)
    mail.write_bytes(bytes(msg))
    assert "Speed = d * t" in [e.text for e in parser.parse(mail).elements]


def test_plain_text_headings(parsed: Callable[[str], ParsedFile]) -> None:
    """Plain text has no markup: its upper-case lines are the only structure it has."""
    kids = children(chunk(parsed("overview.txt"), SMALL))
    assert [c.title_path for c in kids] == [
        ("overview", "SYSTEM OVERVIEW"),
        ("overview", "PAYMENT METHODS"),
    ]
    assert "thirty days trigger a reminder" in kids[0].content


def test_email_subject_sender_and_body(parsed: Callable[[str], ParsedFile]) -> None:
    """Who wrote a message is part of what it says: the sender stays searchable."""
    doc = parsed("mail.eml")
    text = everything(doc)
    assert "alice@example.com" in text and "bob@example.com" in text
    assert "From February the refund window is 45 days instead of 30." in text
    assert all(c.title_path[0] == "Refund window extended" for c in chunk(doc, SMALL))


def test_html_mail_reads_as_blocks_with_its_data_table(
    parsed: Callable[[str], ParsedFile],
) -> None:
    """A newsletter's HTML part (preferred to its plain text) is laid out in tables inside
    a table: its heading and paragraphs read as such, the bar of links is not a table, the
    price list is one, with its header. The encoded subject and sender are decoded."""
    doc = parsed("newsletter.eml")
    assert doc.elements[0].text == (
        "From: Zoë Durand <zoe@example.com>; To: Members <members@example.com>."
    )
    assert [(e.kind, e.text) for e in doc.elements if e.kind == "title"] == [
        ("title", "Spring menu")
    ]
    tables = [e for e in doc.elements if e.kind == "table"]
    assert [t.text for t in tables] == ["Drink Price Espresso 2.10 EUR Flat white 3.40 EUR"]
    assert any(
        e.text.startswith("Our roaster now sources beans from a cooperative in Huila")
        for e in doc.elements
    )
    kids = children(chunk(doc, SMALL))
    prices = holding(kids, "Flat white")
    assert "| Drink | Price |" in prices.content
    assert prices.title_path == (d.NEWSLETTER_SUBJECT, "Spring menu")


# --- invariants over every document ----------------------------------------------------------
@pytest.mark.parametrize("name", DISTINCT)
def test_children_point_at_their_parent(name: str, parsed: Callable[[str], ParsedFile]) -> None:
    """Each child names a parent of the same section whose text contains the child's."""
    chunks = chunk(parsed(name), SMALL)
    by_ordinal = parents(chunks)
    assert by_ordinal and children(chunks)
    current: Chunk | None = None
    for c in chunks:
        if c.chunk_type == "parent":
            current = c
            continue
        assert c.parent_ordinal is not None and current is not None
        parent = by_ordinal[c.parent_ordinal]
        assert parent is current  # parents come first, followed by their own children
        assert (c.title_path, c.context_header) == (parent.title_path, parent.context_header)
        assert c.context_header == " > ".join(c.title_path)
        assert key(c.content) in key(parent.content), (c, parent)
        if c.page_start is not None:
            assert parent.page_start is not None and parent.page_end is not None
            assert parent.page_start <= c.page_start <= (c.page_end or 0) <= parent.page_end
    assert all(any(c.parent_ordinal == o for c in children(chunks)) for o in by_ordinal)


@pytest.mark.parametrize("config", [SMALL, MEDIUM], ids=["small", "medium"])
@pytest.mark.parametrize("name", DISTINCT)
def test_nothing_lost_nothing_duplicated(
    name: str, config: dict[str, int], parsed: Callable[[str], ParsedFile]
) -> None:
    """Every sentence, row and code block of the source is in the children, in order;
    with the overlap taken out, nothing appears twice and nothing else appears."""
    doc = parsed(name)
    chunks = chunk(doc, config)
    source = source_units(doc, chunks)
    body, heads, _ = read_back(chunks)
    want, got = Counter(source), Counter(body)
    lost = [u for u in want if got[u] < want[u] and u not in heads]
    extra = {u: got[u] - want[u] for u in got if got[u] > want[u]}
    assert (lost, extra) == ([], {}), f"lost {lost}, duplicated or not in the source {extra}"
    assert body == [u for u in source if got[u]], "out of order"


def overlap_cases(
    config: dict[str, int], parsed: Callable[[str], ParsedFile]
) -> Iterator[tuple[str, ParsedFile, list[Chunk]]]:
    """Documents whose every sentence fits one child at this size (else cutting is right)."""
    for name in DISTINCT:
        if name in CHINESE_SCANS and (
            d.cjk_font() is None or "chi_sim" not in _tesseract_languages()
        ):
            continue
        doc = parsed(name)
        longest = max(
            (
                count_words(s)
                for e in doc.elements
                if e.kind not in ("table", "code")
                for s in _SENTENCE.split(e.text)
            ),
            default=0,
        )
        if longest <= config["size"]:
            yield name, doc, chunk(doc, config)


@pytest.mark.parametrize("case", list(OVERLAPS))
def test_overlap_is_whole_sentences_within_the_limit(
    case: str, parsed: Callable[[str], ParsedFile]
) -> None:
    """Consecutive children of one parent repeat the previous child's last sentences: whole
    ones, never a table row or code, never more than the overlap."""
    config, expected = OVERLAPS[case]
    limit = min(config["overlap"], config["size"] // 2)
    found: set[str] = set()
    for name, doc, chunks in overlap_cases(config, parsed):
        source = set(source_units(doc, chunks))
        _, _, overlaps = read_back(chunks)
        for prev, nxt, shared in overlaps:
            found.add(name)
            assert nxt.parent_ordinal == prev.parent_ordinal
            assert all(u in source for u in shared), (name, shared)  # whole sentences
            assert not any(u.startswith(("|", "code:")) for u in shared), (name, shared)
            assert count_words(" ".join(shared)) <= limit, (name, shared)
    assert expected <= found, found


@pytest.mark.parametrize("case", list(OVERLAPS))
def test_every_child_adds_text_of_its_own(case: str, parsed: Callable[[str], ParsedFile]) -> None:
    """A child that is nothing but the previous child's overlap is a duplicate in the
    index: it is retrieved, embedded and shown twice, and adds nothing."""
    config, _ = OVERLAPS[case]
    repeats = []
    for name, _, chunks in overlap_cases(config, parsed):
        prev: list[str] = []
        previous: Chunk | None = None
        for child in children(chunks):
            units, _ = child_units(child.content)
            same_parent = previous is not None and previous.parent_ordinal == child.parent_ordinal
            if same_parent and shared_prefix(prev, units) == len(units):
                repeats.append((name, child.content))
            prev, previous = units, child
    assert repeats == []


def test_overlap_never_starts_a_child_with_a_fragment(
    parsed: Callable[[str], ParsedFile],
) -> None:
    """Even where a sentence is longer than a child (and must be cut), what is carried
    over as overlap is whole sentences: no child opens on a stray piece of punctuation."""
    for name in ("manual.pdf", "handbook.docx", "deck.pptx"):
        for child in children(chunk(parsed(name), TINY)):
            assert not re.match(r"^[。，、；：！？.,;:!?]", child.content), (name, child)


# --- end to end: the CLI over the folder, once per engine ------------------------------------
def es_rag(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The command as users run it: a separate process (as in test_cli.py)."""
    return subprocess.run(
        [sys.executable, "-m", "es_rag.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def search(env: dict[str, str], query: str) -> list[dict[str, Any]]:
    proc = es_rag(env, "search", query, "--tenant", "t", "--json")
    assert proc.returncode == 0, proc.stderr
    hits: list[dict[str, Any]] = json.loads(proc.stdout)["hits"]
    assert hits, query
    return hits


def hit_where(hits: list[dict[str, Any]], test: Callable[[dict[str, Any]], bool]) -> dict:
    found = [h for h in hits if test(h)]
    assert found, [(h["doc_id"], h["text"][:80]) for h in hits]
    return found[0]


@pytest.mark.one_engine("what the parser finds in each format (OCR included)")
def test_cli_ingests_every_format_and_finds_it(
    corpus: Path, es_url: str, engine: Engine, minilm_path: str
) -> None:
    """One real ``es-rag ingest`` of the whole folder, then searches through the CLI: the
    structure the parser found (titles, table headers, pages) reaches the index."""
    env = {
        **os.environ,
        "ES_RAG_ES_URL": es_url,
        "ES_RAG_INDEX": unique_index("parsing"),
        "ES_RAG_EMBEDDING_MODEL": minilm_path,
        "HF_HUB_OFFLINE": "1",
    }
    try:
        proc = es_rag(env, "ingest", str(corpus), "--tenant", "t", "--public", "--json")
        assert proc.returncode == 0, proc.stderr + proc.stdout
        results = json.loads(proc.stdout)["results"]
        files = sorted(str(p) for p in corpus.iterdir())
        assert sorted(r["doc_id"] for r in results) == files
        assert all(r["status"] == "indexed" and r["chunks"] > 0 for r in results), results

        limits = search(env, "daily limit of Region 07 in EUR")
        table = hit_where(limits, lambda h: "| Region 07 | 7000 | EUR |" in h["text"])
        assert DOCX_HEADER_ROW in table["text"] and DOCX_CAPTION in table["text"]
        assert table["title_path"] == ["Payments Handbook", "Limits"]

        shipping = search(env, "orders shipped from the central warehouse in Lyon")
        pdf = hit_where(shipping, lambda h: h["doc_id"].endswith("manual.pdf"))
        assert pdf["title_path"] == ["Operations Manual", "Shipping policy"]
        assert (pdf["page_start"], pdf["page_end"]) == (1, 1)
        assert "warehouse" in pdf["text"] and d.PDF_HEADER not in pdf["text"]

        tides = search(env, "when does the harbour master publish the tide table")
        book = hit_where(tides, lambda h: h["doc_id"].endswith("guide.epub"))
        assert book["title_path"] == [d.EPUB_TITLE, "Tides"]
    finally:
        drop_alias(engine, env["ES_RAG_INDEX"])
        status = f"{env['ES_RAG_INDEX']}-status"
        if engine.index_exists(status):
            engine.delete_index(status)
