"""Real documents for the parsing tests, written by the real writers (no fixtures on disk).

python-docx, python-pptx and openpyxl write Office files, reportlab writes PDFs with a
text layer (its built-in STSong-Light CID font covers Chinese without a font file), Pillow
draws the pages of scanned PDFs and images for OCR, and the standard library writes
e-mail; OpenDocument text and EPUB, zips of XML, are written here part by part as
LibreOffice and pandoc write them. Every writer returns the path it wrote; the
``*_FACTS`` constants say what a reader must find in the result.
"""

from __future__ import annotations

import email.message
import email.utils
import zipfile
from pathlib import Path
from typing import Any

DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
CJK_FONTS = (
    Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"),
    Path("/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc"),
    Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"),
)

# --- DOCX -----------------------------------------------------------------------------------
DOCX_TITLE = "Payments Handbook"
DOCX_ROWS = [("Region", "Daily limit", "Currency")] + [
    (f"Region {i:02d}", str(1000 * i), "EUR" if i % 2 else "USD") for i in range(1, 61)
]


def docx_handbook(path: Path) -> Path:
    """Headings three deep, prose, a caption and a 60-row table, bullets, a Chinese chapter."""
    import docx

    doc = docx.Document()
    doc.core_properties.title = DOCX_TITLE
    doc.add_heading(DOCX_TITLE, 0)
    doc.add_heading("Refunds", 1)
    doc.add_paragraph(
        "Refunds are processed within five business days. The customer receives an e-mail "
        "when the money has been sent back. Partial refunds are allowed for orders with "
        "several items."
    )
    doc.add_heading("Failed refunds", 2)
    doc.add_heading("Error codes", 3)
    doc.add_paragraph("When a refund fails the system logs ERR_REFUND_1042 and retries twice.")
    doc.add_heading("Limits", 1)
    doc.add_paragraph("Every region has its own daily limit per merchant.")
    doc.add_paragraph("Table 1: Daily limits by region")
    table = doc.add_table(rows=len(DOCX_ROWS), cols=3)
    for i, row in enumerate(DOCX_ROWS):
        for j, value in enumerate(row):
            table.cell(i, j).text = value
    doc.add_paragraph("Limits are reviewed every quarter.", style="List Bullet")
    doc.add_paragraph("Merchants may ask for a temporary raise.", style="List Bullet")
    doc.add_heading("退款政策", 1)
    doc.add_paragraph(
        "退款申请将在五个工作日内处理完毕。客户会在处理完成后收到一封确认电子邮件。"
        "如果超过十个工作日仍未收到退款，请联系客服。"
    )
    doc.save(str(path))
    return path


# --- PPTX -----------------------------------------------------------------------------------
PPTX_SLIDES = [
    (
        "Quarterly review",
        ["Revenue grew 12% in the third quarter", "Costs fell by 3%"],
        "Mention the new region in Brazil.",
    ),
    ("Outlook", ["Hiring in Q4", "Two new offices"], "Keep this slide short."),
    ("季度总结", ["收入增长了百分之十二", "成本下降了百分之三"], "强调巴西的新市场。"),
]


def pptx_deck(path: Path) -> Path:
    """Three slides (one in Chinese), each with a title, two bullets and speaker notes."""
    from pptx import Presentation

    deck = Presentation()
    for title, bullets, notes in PPTX_SLIDES:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = "\n".join(bullets)
        slide.notes_slide.notes_text_frame.text = notes
    deck.save(str(path))
    return path


# --- listings in Word and PowerPoint --------------------------------------------------------
# Neither format marks code: a listing is a paragraph whose lines are soft line breaks
# (Shift+Enter in Word, what pandoc writes), its indentation spaces, as authors paste it.
CODE_LISTING = (
    "def refund(order, amount):\n"
    "    if amount > order.total:\n"
    '        raise ValueError("too much")\n'
    "    return order.pay_back(amount)"
)
CODE_SESSION = ">>> refund(order, 5)\nRefund(id=7, amount=5)\n>>> order.total\n40"
ADDRESS = "Acme Finance\n    12 Harbour Street\n    Lyon"
# As pasting from an editor writes it: a paragraph a line, the indentation in spaces.
CODE_PASTED = "for order in overdue:\n    remind(order.customer)\n    order.flag()"
INDENTED_PROSE = ("    Dear customer,", "    your refund was paid today.")


def _broken_lines(doc: Any, text: str) -> None:
    """One Word paragraph whose lines are kept apart by line breaks (Shift+Enter)."""
    run = doc.add_paragraph().add_run()
    for i, line in enumerate(text.split("\n")):
        if i:
            run.add_break()
        run.add_text(line)


def docx_listing(path: Path) -> Path:
    """A heading, prose, a listing, a console session and an address on indented lines
    (each one paragraph), then a listing pasted a paragraph a line and two paragraphs of
    indented prose."""
    from docx import Document as WordDocument

    doc = WordDocument()
    doc.add_heading("Refund helpers", level=1)
    doc.add_paragraph("The helper below pays part of an order back to the customer.")
    for block in (CODE_LISTING, CODE_SESSION, ADDRESS):
        _broken_lines(doc, block)
    doc.add_paragraph("Refunds above the order total are refused.")
    for line in CODE_PASTED.split("\n"):
        doc.add_paragraph(line)
    for line in INDENTED_PROSE:
        doc.add_paragraph(line)
    doc.save(str(path))
    return path


# Code as pandoc and many templates set it in Word: paragraphs in a "Source Code" style
# (one command alone, which no content rule can call code; a listing a line a paragraph)
# and a house style based on "Code"; a prompt after a virtual environment's name.
STYLED_COMMAND = "python3 -m venv tutorial-env"
STYLED_LISTING = "for leg in legs:\n    print(leg.speed)"
STYLED_SESSION = "(tutorial-env) $ python -m pip install novas\nCollecting novas"


def docx_styled_code(path: Path) -> Path:
    from docx import Document as WordDocument
    from docx.enum.style import WD_STYLE_TYPE

    doc = WordDocument()
    doc.styles.add_style("Source Code", WD_STYLE_TYPE.PARAGRAPH)
    # A house style whose name says nothing, based on one that does.
    doc.styles.add_style(
        "Example Block", WD_STYLE_TYPE.PARAGRAPH
    ).base_style = doc.styles.add_style("Code", WD_STYLE_TYPE.PARAGRAPH)
    doc.add_heading("Virtual environments", level=1)
    doc.add_paragraph("Create the environment with the venv module:")
    doc.add_paragraph(STYLED_COMMAND, style="Source Code")
    doc.add_paragraph("Then print every leg:")
    for line in STYLED_LISTING.split("\n"):
        doc.add_paragraph(line, style="Example Block")
    doc.add_paragraph("Install a package in the environment:")
    _broken_lines(doc, STYLED_SESSION)
    doc.add_paragraph("The environment keeps its packages apart from the system's.")
    doc.save(str(path))
    return path


def pptx_listing(path: Path) -> Path:
    """One slide: a title, and a text box holding a console session in one paragraph."""
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Trying the refund helper"
    box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(8), Inches(3))
    box.text_frame.text = CODE_SESSION.replace("\n", "\v")  # line breaks, not paragraphs
    deck.save(str(path))
    return path


# --- XLSX / CSV -----------------------------------------------------------------------------
XLSX_SHEETS = {
    "Prices": [("Product", "Price", "Currency")]
    + [(f"Widget {i:03d}", i * 3, "EUR") for i in range(1, 201)],
    "Contacts": [("Name", "Role"), ("Alice", "Support lead"), ("Bob", "Finance")],
}


def xlsx_book(path: Path) -> Path:
    """Two sheets with header rows; the first has 200 data rows (more than one chunk)."""
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)
    for name, rows in XLSX_SHEETS.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(list(row))
    book.save(str(path))
    return path


def csv_file(path: Path) -> Path:
    path.write_text("city,country,population\nLyon,France,522000\nChengdu,China,20940000\n")
    return path


# --- PDF with a text layer ------------------------------------------------------------------
PDF_HEADER = "ACME Corporation - Internal Handbook"
PDF_PAGES = [
    (
        "Shipping policy",
        [
            "Orders placed before noon are shipped on the same day from the central ware-",
            "house in Lyon. Customers can follow every parcel with the tracking number that",
            "is sent by e-mail once the parcel leaves the building.",
        ],
    ),
    (
        "Returns",
        [
            "Goods can be returned within thirty days. The return label is printed from the",
            "customer account, and the refund follows the inspection of the returned goods.",
        ],
    ),
    (
        "退货政策",
        [
            "顾客可以在三十天内退回商品，退货标签可以在客户账户中打印。退款将在仓库检查",
            "退回的商品之后发放，通常需要五个工作日。",
        ],
    ),
]


def pdf_text(path: Path, *, title: str = "Operations Manual") -> Path:
    """Three pages: a running header, a page-number footer, a heading and a paragraph each;
    English lines hyphenated at a line end, a Chinese sentence broken across lines."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont
    from reportlab.pdfgen import canvas

    pdfmetrics.registerFont(UnicodeCIDFont("STSong-Light"))
    page = canvas.Canvas(str(path), pagesize=A4)
    page.setTitle(title)
    width, height = A4
    for number, (heading, lines) in enumerate(PDF_PAGES, start=1):
        chinese = any(ord(ch) > 0x2E80 for ch in heading)
        body_font = "STSong-Light" if chinese else "Helvetica"
        page.setFont("Helvetica", 8)
        page.drawString(72, height - 30, PDF_HEADER)
        page.drawString(width / 2 - 20, 25, f"Page {number} of {len(PDF_PAGES)}")
        page.setFont("STSong-Light" if chinese else "Helvetica-Bold", 18)
        page.drawString(72, height - 110, heading)
        page.setFont(body_font, 11)
        y = height - 140
        for line in lines:
            page.drawString(72, y, line)
            y -= 15
        page.showPage()
    page.save()
    return path


# --- scans (no text layer) ------------------------------------------------------------------
SCAN_EN = [
    "Scanned refund policy",
    "",
    "Refunds are processed within five business days.",
    "Contact support when the refund has not arrived.",
]
SCAN_ZH = [
    "退款政策",
    "",
    "退款申请将在五个工作日内处理完毕。",
    "如果超过十个工作日仍未收到退款，请联系客服。",
]


def cjk_font() -> Path | None:
    return next((p for p in CJK_FONTS if p.is_file()), None)


def _page_image(lines: list[str], font_path: Path, size: int = 34):
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("L", (1654, 2339), 255)  # A4 at 200 dpi
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(str(font_path), size)
    y = 200
    for line in lines:
        draw.text((160, y), line, font=font, fill=0)
        y += int(size * 1.7)
    return image


def scanned_pdf(path: Path, pages: list[list[str]], *, font: Path = DEJAVU) -> Path:
    """A PDF of page images only: what a scanner produces."""
    images = [_page_image(lines, font).convert("RGB") for lines in pages]
    images[0].save(str(path), "PDF", resolution=200, save_all=True, append_images=images[1:])
    return path


def png_scan(path: Path, lines: list[str], *, font: Path = DEJAVU) -> Path:
    _page_image(lines, font).save(str(path))
    return path


# --- HTML, Markdown, text, e-mail -------------------------------------------------------------
HTML_PAGE = """<!doctype html>
<html><head><title>Help Center</title></head>
<body>
<header><a href="/">ACME</a> <a href="/login">Log in</a></header>
<nav><ul><li><a href="/products">Products</a></li><li><a href="/pricing">Pricing</a></li></ul></nav>
<main>
<h1>Help Center</h1>
<h2>Shipping</h2>
<p>We ship to 40 countries. Parcels inside the EU arrive within three working days.</p>
<table><tr><th>Zone</th><th>Days</th></tr><tr><td>EU</td><td>3</td></tr>
<tr><td>Americas</td><td>7</td></tr></table>
<h2>Accounts</h2>
<h3>Passwords</h3>
<p>Reset your password from the login page; the link expires after one hour.</p>
</main>
<footer>Copyright 2026 ACME. All rights reserved.</footer>
</body></html>
"""

MARKDOWN_DOC = """# Deployment guide

This guide explains how to deploy the service.

## Install

Install the package and initialise the index:

```bash
pip install es-rag
es-rag init
es-rag ingest docs/ \\
    --tenant acme --public
```

## Configure

| Variable | Meaning |
|---|---|
| ES_RAG_ES_URL | the search server |
| ES_RAG_INDEX | the alias |

- Set the URL first.
- Then the index name.

## 部署说明

部署之前请先检查配置。服务启动后会自动创建索引。
"""

# Rich Text as WordPad and Word write it: a code page, a font table, document info, bold
# headings, an escaped accent (\'e9), a Unicode escape with its fallback (\u8364?) and one
# above U+FFFF written as its two UTF-16 halves (an emoji); a line break in the source is
# not a space in RTF, so a wrapped line starts with one.
RTF_TITLE = "Travel expenses"
RTF_DOC = r"""{\rtf1\ansi\ansicpg1252\deff0\nouicompat{\fonttbl{\f0\fswiss\fcharset0 Calibri;}}
{\colortbl ;\red0\green0\blue255;}
{\info{\title Travel expenses}{\author Finance}}
\viewkind4\uc1
\pard\sa200\sl276\slmult1\b\f0\fs28 MEAL ALLOWANCE\b0\fs22\par
Each traveller may claim a daily meal allowance of 45 \u8364? in the Caf\'e9 Lumi\'e8re
 and elsewhere; receipts are kept for six years.\par
Claims arrive through the expense portal \u-10179?\u-8480? within thirty days.\par
\pard\sa200\b\fs28 HOTEL NIGHTS\b0\fs22\par
Hotel nights are booked through the travel desk, never privately.\par
}
"""

TEXT_DOC = """SYSTEM OVERVIEW

The billing system sends invoices on the first day of every month. Invoices that are not paid
within thirty days trigger a reminder.

PAYMENT METHODS

Customers pay by card or by bank transfer. Card payments are confirmed at once.
"""

# Plain text with what Unstructured's grouper cut: a line of few words holding "*", a
# listing indented under a lead-in, and a list whose second item wraps.
TEXT_NOTES_LISTING = 'import importer\nfor leg in importer.legs("trip.csv"):\n    print(leg.speed)'
TEXT_NOTES = f"""RELEASE NOTES

The importer now reads trip files of any size and computes the speed of every leg
from its distance and its time, as before.

Speed = d * t

Run the importer like this:

{chr(10).join("    " + line for line in TEXT_NOTES_LISTING.split(chr(10)))}

Known limits of this release:
- files over 2 GB are refused
- only UTF-8 is read, whatever the file
  declares in its first line
"""
MAIL_BODY = "Hi Bob,\n\nSpeed = d * t\n\nAs agreed, the importer ships on Monday.\n\nAlice\n"


# --- ODT / EPUB -----------------------------------------------------------------------------
# OpenDocument text as LibreOffice Writer saves it: a title paragraph, outline headings,
# a listing in "Preformatted Text" (one paragraph a line, indentation as <text:s>), one in
# a style of its own whose only sign is its fixed-pitch font, a footnote, a nested list, a
# table padded with repeated empty cells, and what a reader does not see: a tracked
# deletion, a comment and a generated table of contents.
ODT_TITLE = "Expense policy"
ODT_LISTING = "def allowance(days):\n    return 45 * days"
ODT_MONO = "SELECT claim_id\n  FROM claims"
ODT_FOOTNOTE = "Receipts are scanned by the finance office."
ODT_HIDDEN = ("withdrawn paragraph about taxis", "check this with legal", "Meals ....... 1")
_ODF_NS = (
    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" '
    'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
    'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
    'xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0" '
    'xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0" '
    'xmlns:dc="http://purl.org/dc/elements/1.1/" '
    'xmlns:meta="urn:oasis:names:tc:opendocument:xmlns:meta:1.0" '
    'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"'
)
ODT_CONTENT = f"""<?xml version="1.0" encoding="UTF-8"?>
<office:document-content {_ODF_NS} office:version="1.3">
<office:font-face-decls>
<style:font-face style:name="DejaVu Sans Mono" svg:font-family="'DejaVu Sans Mono'"
 style:font-family-generic="modern" style:font-pitch="fixed"/>
<style:font-face style:name="Liberation Serif" svg:font-family="'Liberation Serif'"
 style:font-family-generic="roman" style:font-pitch="variable"/>
</office:font-face-decls>
<office:automatic-styles>
<style:style style:name="P1" style:family="paragraph"
 style:parent-style-name="Preformatted_20_Text"/>
<style:style style:name="P2" style:family="paragraph" style:parent-style-name="Text_20_body">
<style:text-properties style:font-name="Liberation Serif"/></style:style>
</office:automatic-styles>
<office:body><office:text>
<text:tracked-changes><text:changed-region text:id="ct1"><text:deletion>
<office:change-info><dc:creator>Eve</dc:creator></office:change-info>
<text:p>A {ODT_HIDDEN[0]}.</text:p></text:deletion></text:changed-region></text:tracked-changes>
<text:sequence-decls>
<text:sequence-decl text:display-outline-level="0" text:name="Table"/></text:sequence-decls>
<text:p text:style-name="Title">{ODT_TITLE}</text:p>
<text:table-of-content text:name="Contents"><text:index-body>
<text:p text:style-name="Contents_20_1">{ODT_HIDDEN[2]}</text:p>
</text:index-body></text:table-of-content>
<text:h text:style-name="Heading_20_1" text:outline-level="1">Meals</text:h>
<text:p text:style-name="Text_20_body">Each traveller may claim<text:s/>a daily
 meal allowance of 45 euros<text:note text:id="ftn1" text:note-class="footnote"><text:note-citation
>1</text:note-citation><text:note-body><text:p text:style-name="Footnote">{ODT_FOOTNOTE}</text:p>
</text:note-body></text:note>.<office:annotation><dc:creator>Eve</dc:creator><text:p
>{ODT_HIDDEN[1]}</text:p></office:annotation><text:change text:change-id="ct1"/></text:p>
<text:p text:style-name="Text_20_body">The allowance is computed like this:</text:p>
<text:p text:style-name="P1">def allowance(days):</text:p>
<text:p text:style-name="P1"><text:s text:c="4"/>return 45 * days</text:p>
<text:p text:style-name="P1"/>
<text:h text:style-name="Heading_20_2" text:outline-level="2">Reporting</text:h>
<text:p text:style-name="Text_20_body">The monthly report reads the claims table:</text:p>
<text:p text:style-name="Mono_20_Block">SELECT claim_id</text:p>
<text:p text:style-name="Mono_20_Block"><text:s text:c="2"/>FROM claims</text:p>
<text:h text:style-name="Heading_20_1" text:outline-level="1">Hotels</text:h>
<text:p text:style-name="P2">Hotel nights are booked through the travel desk:</text:p>
<text:list text:style-name="L1">
<text:list-item><text:p>in Lyon, at the harbour hotel</text:p></text:list-item>
<text:list-item><text:p>in Paris, near the office</text:p>
<text:list><text:list-item><text:p>never more than three nights</text:p></text:list-item>
</text:list>
</text:list-item>
</text:list>
<table:table table:name="Rates">
<table:table-column table:number-columns-repeated="4"/>
<table:table-header-rows><table:table-row>
<table:table-cell><text:p>City</text:p></table:table-cell>
<table:table-cell><text:p>Nightly rate</text:p></table:table-cell>
<table:table-cell table:number-columns-repeated="2"/>
</table:table-row></table:table-header-rows>
<table:table-row>
<table:table-cell><text:p>Lyon</text:p></table:table-cell>
<table:table-cell><text:p>120 EUR</text:p></table:table-cell>
<table:table-cell table:number-columns-repeated="2"/>
</table:table-row>
<table:table-row>
<table:table-cell><text:p>Paris</text:p></table:table-cell>
<table:table-cell><text:p>180 EUR</text:p></table:table-cell>
<table:table-cell table:number-columns-repeated="2"/>
</table:table-row>
</table:table>
</office:text></office:body></office:document-content>
"""
ODT_STYLES = f"""<?xml version="1.0" encoding="UTF-8"?>
<office:document-styles {_ODF_NS} office:version="1.3">
<office:font-face-decls>
<style:font-face style:name="DejaVu Sans Mono" svg:font-family="'DejaVu Sans Mono'"
 style:font-pitch="fixed"/>
</office:font-face-decls>
<office:styles>
<style:style style:name="Standard" style:family="paragraph"/>
<style:style style:name="Text_20_body" style:display-name="Text body" style:family="paragraph"
 style:parent-style-name="Standard"/>
<style:style style:name="Preformatted_20_Text" style:display-name="Preformatted Text"
 style:family="paragraph" style:parent-style-name="Standard"/>
<style:style style:name="Mono_20_Block" style:display-name="Mono Block" style:family="paragraph"
 style:parent-style-name="Standard">
<style:text-properties style:font-name="DejaVu Sans Mono"/></style:style>
</office:styles>
</office:document-styles>
"""
ODT_META = f"""<?xml version="1.0" encoding="UTF-8"?>
<office:document-meta {_ODF_NS} office:version="1.3"><office:meta>
<dc:title>{ODT_TITLE}</dc:title><meta:generator>LibreOffice/7.4</meta:generator>
</office:meta></office:document-meta>
"""
ODT_MANIFEST = """<?xml version="1.0" encoding="UTF-8"?>
<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0"
 manifest:version="1.3">
<manifest:file-entry manifest:full-path="/"
 manifest:media-type="application/vnd.oasis.opendocument.text"/>
<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>
<manifest:file-entry manifest:full-path="styles.xml" manifest:media-type="text/xml"/>
<manifest:file-entry manifest:full-path="meta.xml" manifest:media-type="text/xml"/>
</manifest:manifest>
"""


Parts = dict[str, "str | bytes | None"]


def odf_package(path: Path, parts: Parts, *, mimetype: str) -> Path:
    """A zip as OpenDocument and EPUB require it: ``mimetype`` first and stored; a part
    given as None is left out."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(zipfile.ZipInfo("mimetype"), mimetype)
        for name, data in parts.items():
            if data is not None:
                archive.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)
    return path


def odt_policy(path: Path, replace: Parts | None = None) -> Path:
    """The policy above; ``replace`` swaps, adds or (None) removes parts."""
    parts: Parts = {
        "content.xml": ODT_CONTENT,
        "styles.xml": ODT_STYLES,
        "meta.xml": ODT_META,
        "META-INF/manifest.xml": ODT_MANIFEST,
    }
    return odf_package(
        path, {**parts, **(replace or {})}, mimetype="application/vnd.oasis.opendocument.text"
    )


def fodt_policy(path: Path) -> Path:
    """The policy as one flat XML file (.fodt), as Writer saves "Flat XML ODF": the
    package's meta, styles and content in one document."""

    def part(xml: str, tag: str) -> str:
        return xml[xml.index(f"<{tag}>") : xml.index(f"</{tag}>") + len(tag) + 3]

    flat = (
        ODT_CONTENT.replace(
            "<office:document-content",
            '<office:document office:mimetype="application/vnd.oasis.opendocument.text"',
            1,
        )
        .replace("</office:document-content>", "</office:document>")
        .replace(
            "<office:automatic-styles>",
            part(ODT_META, "office:meta")
            + part(ODT_STYLES, "office:styles")
            + "<office:automatic-styles>",
        )
    )
    path.write_text(flat, encoding="utf-8")
    return path


def ods_book(path: Path) -> Path:
    """The XLSX workbook's sheets as pandas writes a spreadsheet (through odfpy)."""
    import pandas as pd

    with pd.ExcelWriter(path, engine="odf") as writer:
        for name, rows in XLSX_SHEETS.items():
            frame = pd.DataFrame(rows[1:], columns=list(rows[0]))
            frame.to_excel(writer, sheet_name=name, index=False)
    return path


def huge_repeat_ods(path: Path) -> Path:
    """A sheet whose one row, a value in each of 1,000 columns, repeats 10,000 times: ten
    million cells once spelt out, in a file of a few hundred bytes."""
    row = (
        '<table:table-row table:number-rows-repeated="10000"><table:table-cell '
        'table:number-columns-repeated="1000"><text:p>same</text:p></table:table-cell>'
        "</table:table-row>"
    )
    content = (
        f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {_ODF_NS}>'
        f'<office:body><office:spreadsheet><table:table table:name="Data">{row}'
        "</table:table></office:spreadsheet></office:body></office:document-content>"
    )
    return odf_package(
        path,
        {"content.xml": content, "META-INF/manifest.xml": ODT_MANIFEST},
        mimetype="application/vnd.oasis.opendocument.spreadsheet",
    )


# A presentation as odfpy writes one: title placeholders, an outline list, speaker notes,
# a console session in a text box (line breaks, not paragraphs), a table, and an empty
# slide before the last (the slide numbers must stay true).
ODP_SLIDES = [
    ("Quarterly review", ["Revenue grew 12% in the quarter", "Churn fell to 3%"]),
    ("Trying the refund helper", None),  # the console session
    ("Rates", None),  # the table
    ("", None),
    ("Questions", ["Ask the finance team about travel budgets"]),
]
ODP_NOTES = "Mention the Lyon office first."
ODP_RATES = [("City", "Nightly rate"), ("Lyon", "120 EUR"), ("Paris", "180 EUR")]


def odp_deck(path: Path) -> Path:
    from odf.draw import Frame, Page, TextBox
    from odf.namespaces import PRESENTATIONNS
    from odf.opendocument import OpenDocumentPresentation
    from odf.presentation import Notes
    from odf.style import MasterPage, PageLayout, PageLayoutProperties
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import LineBreak, List, ListItem, P

    doc = OpenDocumentPresentation()
    layout = PageLayout(name="Slide")
    layout.addElement(PageLayoutProperties(pagewidth="28cm", pageheight="21cm"))
    doc.automaticstyles.addElement(layout)
    master = MasterPage(name="Default", pagelayoutname=layout)
    doc.masterstyles.addElement(master)

    def frame(parent, kind: str | None, y: int):  # type: ignore[no-untyped-def]
        made = Frame(width="24cm", height="3cm", x="2cm", y=f"{y}cm")
        if kind:
            made.setAttrNS(PRESENTATIONNS, "class", kind)
        parent.addElement(made)
        return made

    for number, (title, bullets) in enumerate(ODP_SLIDES, start=1):
        page = Page(masterpagename=master, name=f"page{number}")
        doc.presentation.addElement(page)
        if title:
            box = TextBox()
            frame(page, "title", 1).addElement(box)
            box.addElement(P(text=title))
        if bullets:
            box = TextBox()
            frame(page, "outline", 5).addElement(box)
            items = List()
            box.addElement(items)
            for bullet in bullets:
                item = ListItem()
                item.addElement(P(text=bullet))
                items.addElement(item)
        if title == "Trying the refund helper":
            box = TextBox()
            frame(page, None, 5).addElement(box)
            para = P()
            for i, line in enumerate(CODE_SESSION.split("\n")):
                if i:
                    para.addElement(LineBreak())
                para.addText(line)
            box.addElement(para)
        if title == "Rates":
            table = Table(name="Rates")
            table.addElement(TableColumn(numbercolumnsrepeated=2))
            for row in ODP_RATES:
                tr = TableRow()
                for value in row:
                    cell = TableCell()
                    cell.addElement(P(text=value))
                    tr.addElement(cell)
                table.addElement(tr)
            frame(page, None, 5).addElement(table)
        if number == 1:
            notes = Notes()
            page.addElement(notes)
            box = TextBox()
            frame(notes, "notes", 12).addElement(box)
            box.addElement(P(text=ODP_NOTES))
    doc.save(str(path))
    return path


# An EPUB 3 as pandoc and Sphinx write one: a package whose manifest lists the chapters out
# of order (the spine gives the reading order), a navigation document (a table of contents,
# not text), an obfuscated font (encryption.xml, which is not DRM), and chapters with a
# heading tree, a listing and a nav bar of their own.
EPUB_TITLE = "Field Guide to the Harbour"
EPUB_LISTING = "$ tide --port lyon\n  high water 06:12"
EPUB_CHAPTERS = {
    "text/ch01.xhtml": """<h1>Birds</h1>
<p>Herons nest in the reeds on the north bank from March onwards.</p>
<h2>Gulls</h2><p>Gulls follow the fishing boats back to the quay every evening.<a
epub:type="noteref" href="#n1">1</a></p>
<aside epub:type="footnote" id="n1"><p>Ringed gulls were counted in 2019.</p></aside>""",
    "text/ch02.xhtml": f"""<nav epub:type="landmarks">
<a href="ch01.xhtml">Previous chapter</a></nav>
<h1>Tides</h1><p>The harbour master publishes the tide table every Monday.</p>
<pre>{EPUB_LISTING}</pre>
<h2>Spring tides</h2><p>Spring tides flood the lower car park twice a year.</p>""",
}
EPUB_NAV_ONLY = "Contents of the guide"
EPUB_FOOTNOTE = "Ringed gulls were counted in 2019."


def epub_drm(chapter: str) -> str:
    """META-INF/encryption.xml of a book whose ``chapter`` is encrypted (DRM)."""
    return f"""<?xml version="1.0"?>
<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container"
 xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>
<enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>
<enc:CipherData><enc:CipherReference URI="{chapter}"/></enc:CipherData>
</enc:EncryptedData></encryption>"""


def _xhtml(title: str, body: str) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">
<head><meta charset="utf-8"/><title>{title}</title></head>
<body>{body}</body></html>
"""


def epub_guide(path: Path, replace: Parts | None = None) -> Path:
    """The guide above; ``replace`` swaps, adds or (None) removes parts."""
    opf = f"""<?xml version="1.0" encoding="UTF-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
<dc:identifier id="id">urn:uuid:0f3a</dc:identifier><dc:title>{EPUB_TITLE}</dc:title>
<dc:language>en</dc:language></metadata>
<manifest>
<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
<item id="c2" href="text/ch02.xhtml" media-type="application/xhtml+xml"/>
<item id="c1" href="text/ch01.xhtml" media-type="application/xhtml+xml"/>
<item id="font" href="fonts/Serif.otf" media-type="font/otf"/>
<item id="map" href="images/map.svg" media-type="image/svg+xml"/>
</manifest>
<spine><itemref idref="nav" linear="no"/><itemref idref="c1"/><itemref idref="map"/>
<itemref idref="c2"/></spine></package>
"""
    nav = (
        f'<nav epub:type="toc"><h1>{EPUB_NAV_ONLY}</h1>'
        '<ol><li><a href="text/ch01.xhtml">Birds</a></li></ol></nav>'
    )
    parts: Parts = {
        "META-INF/container.xml": """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>
</rootfiles></container>""",
        "META-INF/encryption.xml": """<?xml version="1.0"?>
<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container"
 xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>
<enc:EncryptionMethod Algorithm="http://www.idpf.org/2008/embedding"/>
<enc:CipherData><enc:CipherReference URI="OEBPS/fonts/Serif.otf"/></enc:CipherData>
</enc:EncryptedData></encryption>""",
        "OEBPS/content.opf": opf,
        "OEBPS/nav.xhtml": _xhtml("Contents", nav),
        "OEBPS/fonts/Serif.otf": b"\x00obfuscated font bytes",
        "OEBPS/images/map.svg": (
            '<svg xmlns="http://www.w3.org/2000/svg"><text>Map label</text></svg>'
        ),
        **{f"OEBPS/{name}": _xhtml(name, body) for name, body in EPUB_CHAPTERS.items()},
    }
    return odf_package(path, {**parts, **(replace or {})}, mimetype="application/epub+zip")


def eml_message(path: Path) -> Path:
    msg = email.message.EmailMessage()
    msg["From"] = "Alice Martin <alice@example.com>"
    msg["To"] = "bob@example.com"
    msg["Subject"] = "Refund window extended"
    msg["Date"] = email.utils.format_datetime(
        email.utils.parsedate_to_datetime("Mon, 05 Jan 2026 10:00:00 +0000")
    )
    msg.set_content(
        "Hi Bob,\n\nFrom February the refund window is 45 days instead of 30.\n"
        "Please update the help center.\n\nAlice\n"
    )
    path.write_bytes(bytes(msg))
    return path


# A newsletter as mailing tools send one: a plain-text part and an HTML part laid out in
# nested tables (with a bar of links and a spacer grid), holding one table of data; the
# subject and the sender's name outside ASCII (RFC 2047 encoded words on the wire).
NEWSLETTER_SUBJECT = "Café news — April"
NEWSLETTER_PRICES = [("Drink", "Price"), ("Espresso", "2.10 EUR"), ("Flat white", "3.40 EUR")]
NEWSLETTER_HTML = f"""<html><body><table width="600" cellpadding="0"><tr><td>
<table width="100%"><tr><td><h1>Spring menu</h1></td><td><img src="logo.png" alt=""></td></tr>
<tr><td><p>Our roaster now sources beans from a cooperative in Huila.</p></td><td></td></tr>
</table>
<table border="1"><tr><th>{NEWSLETTER_PRICES[0][0]}</th><th>{NEWSLETTER_PRICES[0][1]}</th></tr>
{"".join(f"<tr><td>{a}</td><td>{b}</td></tr>" for a, b in NEWSLETTER_PRICES[1:])}</table>
<table><tr><td><a href="https://example.com/ig">Instagram</a></td>
<td><a href="https://example.com/fb">Facebook</a></td></tr></table>
</td></tr></table></body></html>"""


def eml_newsletter(path: Path) -> Path:
    msg = email.message.EmailMessage()
    msg["From"] = "Zoë Durand <zoe@example.com>"
    msg["To"] = "Members <members@example.com>"
    msg["Subject"] = NEWSLETTER_SUBJECT
    msg.set_content("Spring menu\n\nOur roaster now sources beans from a cooperative.\n")
    msg.add_alternative(NEWSLETTER_HTML, subtype="html", cte="quoted-printable")
    path.write_bytes(bytes(msg))
    return path


# --- hostile or broken input ------------------------------------------------------------------
def encrypted_pdf(path: Path) -> Path:
    from reportlab.pdfgen import canvas

    page = canvas.Canvas(str(path), encrypt="s3cret-password")
    page.drawString(72, 720, "Secret text behind a password")
    page.showPage()
    page.save()
    return path


def encrypted_docx(path: Path, plain: Path) -> Path:
    """``plain`` (a DOCX) encrypted with a password, as Word does it (an OLE container)."""
    from msoffcrypto.format.ooxml import OOXMLFile

    with plain.open("rb") as src, path.open("wb") as out:
        OOXMLFile(src).encrypt("s3cret", out)
    return path


def zip_bomb_docx(path: Path, plain: Path, *, inflated_mb: int) -> Path:
    """A valid DOCX whose document.xml inflates to ``inflated_mb`` MB (mostly spaces)."""
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "word/document.xml":
                continue
            out.writestr(info, data)
        with out.open("word/document.xml", "w", force_zip64=True) as member:
            member.write(
                b'<?xml version="1.0"?><w:document xmlns:w="http://schemas.'
                b'openxmlformats.org/wordprocessingml/2006/main"><w:body>'
            )
            block = b" " * (1 << 20)
            for _ in range(inflated_mb):
                member.write(block)
            member.write(b"</w:body></w:document>")
    return path


def heavy_pdf(path: Path, *, operators: int) -> Path:
    """A small file whose one page holds ``operators`` text-drawing operators (compressed):
    pdfminer walks every one of them, for far longer than any limit allows."""
    import zlib

    stream = zlib.compress(b"BT /F1 1 Tf 1 0 0 1 10 10 Tm (x) Tj ET\n" * operators, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    path.write_bytes(bytes(out))
    return path


def huge_range_xlsx(path: Path) -> Path:
    """One header cell and one cell at the last row and column: a 17-billion-cell range."""
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet["A1"] = "header"
    sheet["XFD1048576"] = "far away"
    book.save(str(path))
    return path


def nested_html(path: Path, *, depth: int) -> Path:
    path.write_text(
        "<html><body>" + "<div>" * depth + "deep text" + "</div>" * depth + "</body></html>"
    )
    return path


def png_bomb(path: Path, *, width: int, height: int) -> Path:
    """A valid all-white 1-bit PNG of ``width`` x ``height`` pixels, written row by row:
    tens of kilobytes on disk that a decoder inflates to one byte per pixel."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack("!I", len(data)) + kind + data + struct.pack("!I", crc)

    row = b"\x00" + b"\xff" * ((width + 7) // 8)  # filter byte "none", then white pixels
    deflate = zlib.compressobj(9)
    idat = bytearray()
    for _ in range(height):
        idat += deflate.compress(row)
    idat += deflate.flush()
    header = struct.pack("!IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1 bit, grayscale
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", bytes(idat))
        + chunk(b"IEND", b"")
    )
    return path


def _replace_document_xml(path: Path, plain: Path, body: bytes) -> Path:
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            data = body if info.filename == "word/document.xml" else src.read(info.filename)
            out.writestr(info, data)
    return path


def damaged_docx(path: Path, plain: Path) -> Path:
    """``plain`` (a DOCX) with garbage in place of word/document.xml: a valid zip, a
    broken document."""
    return _replace_document_xml(path, plain, b"\x00\x01 garbage <w:body <<< not xml")


def entity_bomb_docx(path: Path, plain: Path, *, levels: int = 9) -> Path:
    """``plain`` (a DOCX) whose document.xml is a "billion laughs": ten entities of ten
    entities... ``levels`` deep, 3 * 10**levels characters once expanded, from ~1 KB."""
    entities = b'<!ENTITY lol0 "lol">' + b"".join(
        b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1)) * 10) for i in range(1, levels + 1)
    )
    body = (
        b'<?xml version="1.0"?><!DOCTYPE lolz [' + entities + b"]>"
        b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        b"<w:body><w:p><w:r><w:t>&lol%d;</w:t></w:r></w:p></w:body></w:document>" % levels
    )
    return _replace_document_xml(path, plain, body)


def deep_markdown(path: Path, *, depth: int) -> Path:
    """Markdown with text before, inside and after a blockquote nested ``depth`` deep."""
    path.write_text(
        "# Notes\n\nThe introduction is shallow.\n\n"
        + ">" * depth
        + " The deep quotation.\n\nThe conclusion is shallow again.\n"
    )
    return path
