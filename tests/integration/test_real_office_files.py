"""Outlook messages and OpenDocument files that real tools wrote, from the test data that
Python libraries ship in their source packages (nobody here wrote them):

- msg-parser 1.2.0: three Outlook ``.msg`` files (a marketing mail laid out in nested HTML
  tables, a Chinese delivery-failure notice whose sender is an RFC 2047 encoded word, a
  message carrying another as attachment);
- odfpy 1.4.1: files made by OpenOffice, LibreOffice and KSpread, odfpy's own API manual
  among them (28,945 words, 576 headings), and one that declares an external entity;
- oletools 0.60.2: Word, Excel and PowerPoint 97-2003 files, some password-protected;
- Debian's r-cran-readxl: Excel workbooks saved twice, as .xls and as .xlsx.

The source packages are fetched once with ``pip download --no-binary`` into
``ES_RAG_SAMPLES`` (default ``~/.cache/es-rag/samples``), the Debian one with ``apt-get
download`` into ``ES_RAG_DEBIAN_DOCS``, and parsed by es-rag's real parser (the sandbox,
default settings).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest

from es_rag import detect
from es_rag.config import Settings
from es_rag.errors import EmptyDocumentError, EncryptedDocumentError, UnsupportedFormatError
from es_rag.parsing import Parser
from es_rag.structure_check import debian_package

pytestmark = pytest.mark.integration

CACHE = Path(os.environ.get("ES_RAG_SAMPLES", Path.home() / ".cache/es-rag/samples"))
DEBIAN = Path(os.environ.get("ES_RAG_DEBIAN_DOCS", Path.home() / ".cache/es-rag/debian-docs"))


def source_package(name: str, version: str) -> Path:
    """The unpacked source distribution of ``name==version`` (downloaded once)."""
    root = CACHE / f"{name}-{version}"
    if (root / ".unpacked").exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)

    def archives() -> list[Path]:
        stem = f"{name.replace('-', '_')}-{version}"
        return list(CACHE.glob(f"{stem}.tar.gz")) + list(CACHE.glob(f"{name}-{version}.zip"))

    found = archives()
    if not found:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        done = subprocess.run(
            [*pip, "-q", "-d", str(CACHE), f"{name}=={version}"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        found = archives()
        if done.returncode != 0 or not found:
            pytest.skip(f"pip could not download {name}=={version}: {done.stderr[-300:]}")
    root.mkdir(exist_ok=True)
    if found[0].suffix == ".zip":
        with zipfile.ZipFile(found[0]) as zipped:
            zipped.extractall(root)
    else:
        with tarfile.open(found[0]) as archive:
            archive.extractall(root, filter="data")
    (root / ".unpacked").touch()
    return root


def _msg(name: str) -> Path:
    return source_package("msg-parser", "1.2.0") / f"msg_parser-1.2.0/tests/files/{name}"


def _odf(name: str) -> Path:
    root = source_package("odfpy", "1.4.1") / "odfpy-1.4.1"
    return root / name if name.startswith("api") else root / "tests/examples" / name


@pytest.fixture(scope="module")
def bodies_only() -> Iterator[Parser]:
    """Mail bodies without their attachments (complete.msg carries a 376-page PDF and a
    Word file of the same specification: two minutes of parsing on two cores)."""
    parser = Parser(Settings(mail_attachments=False))
    yield parser
    parser.close()


def test_outlook_html_mail_laid_out_in_tables(bodies_only: Parser) -> None:
    """A marketing mail: its HTML body is tables inside tables. Read as tables, every
    paragraph was a cell of a few long rows; they are blocks now, each its own text."""
    doc = bodies_only.parse(_msg("complete.msg"))
    assert doc.mime == detect.MSG
    assert doc.title == "Test Multiple attachments complete email!!"
    assert doc.elements[0].text.startswith('From: "Vikram Arsid" <admin@fegraph.onmicrosoft.com>')
    assert "qademo@hiddenfire.onmicrosoft.com" in doc.elements[0].text
    # Named, not read (ES_RAG_MAIL_ATTACHMENTS=false); six embedded messages have no name.
    assert doc.elements[1].text == (
        "Attachments: [MS-OXPROPS]-181001.docx, [MS-OXPROPS].txt, [MS-OXPROPS].pdf, "
        "hugues-de-buyer-mimeure-313867-unsplash.jpg."
    )
    assert not [e for e in doc.elements if e.text.startswith("Attachment: ")]
    assert not [e for e in doc.elements if e.kind == "table"]
    texts = [e.text for e in doc.elements]
    assert "Follow your path" in texts and "Get in the zone" in texts


def test_outlook_mail_with_real_attachments(parser: Parser, request: pytest.FixtureRequest) -> None:
    """The same mail with its attachments read: Microsoft's [MS-OXPROPS] specification as
    Word, text and a 376-page PDF, and a photograph without text (not read)."""
    if not request.config.getoption("--long"):
        # test_mail_attachments_are_read_after_the_body holds the same path in CI.
        pytest.skip("complete.msg's attachments run with --long (2 min of parsing)")
    doc = parser.parse(_msg("complete.msg"))
    assert [e.text for e in doc.elements if e.kind == "title" and e.level == 1] == [
        "Attachment: [MS-OXPROPS]-181001.docx",
        "Attachment: [MS-OXPROPS].txt",
        "Attachment: [MS-OXPROPS].pdf",
    ]
    assert len(doc.text.split()) > 150_000
    assert max(e.page or 0 for e in doc.elements) == 376  # the PDF's pages travel along
    assert "Follow your path" in [e.text for e in doc.elements]


def test_outlook_plain_text_mail_with_an_encoded_sender(parser: Parser) -> None:
    doc = parser.parse(_msg("other.msg"))
    assert doc.title == "投递状态通知 (Failure Notice)"
    assert doc.elements[0].text == (
        "From: Mail Delivery Subsystem <mailer-daemon@tjdpf.org.cn>; To: yosipnps@model.com."
    )
    # The bounced message rides along as an embedded message, stored without bytes:
    # named, not opened.
    assert doc.elements[1].text == "Attachments: default_attachment.eml."
    assert any("这是一个永久性的错误" in e.text for e in doc.elements)


def test_outlook_message_with_a_message_attached(parser: Parser) -> None:
    """An embedded Outlook message (its own storage, no file bytes, no name) is not
    opened: the outer message is what is read."""
    doc = parser.parse(_msg("outer.msg"))
    assert doc.title == "outer subject"
    assert [e.text for e in doc.elements] == ["To: outer@foo.bar.", "Outer body"]


def test_mail_attachments_are_read_after_the_body(parser: Parser, bodies_only: Parser) -> None:
    """A mail (composed here) carrying files that real writers made: odfpy's manual from
    OpenOffice and a spreadsheet, a mail forwarded with its own attachment, a PGP
    signature and bytes of no known format."""
    manual = _odf("api-for-odfpy.odt")
    forwarded = EmailMessage()
    forwarded["Subject"] = "Pythagorean triples"
    forwarded.set_content("The forwarded note says the table holds a triple.\n")
    forwarded.add_attachment(b"A second-level attachment.\n", "text", "plain", filename="deep.txt")
    mail = EmailMessage()
    mail["Subject"] = "ODF reading for the team"
    mail["From"] = "Ana <ana@example.org>"
    mail["To"] = "team@example.org"
    mail.set_content("Hello,\n\nthe manual and the sheet are attached.\n")
    mail.add_attachment(
        manual.read_bytes(), "application", "vnd.oasis.opendocument.text", filename=manual.name
    )
    mail.add_attachment(
        _odf("pythagoras.ods").read_bytes(),
        "application",
        "vnd.oasis.opendocument.spreadsheet",
        filename="pythagoras.ods",
    )
    mail.add_attachment(forwarded)
    mail.add_attachment(bytes(range(256)) * 8, "application", "octet-stream", filename="blob.bin")
    mail.add_attachment(
        b"-----BEGIN PGP SIGNATURE-----\n\niQEzBAEBCAAdFiEE\n-----END PGP SIGNATURE-----\n",
        "application",
        "pgp-signature",
        filename="signature.asc",
    )
    path = CACHE / "odf-reading.eml"
    path.write_bytes(mail.as_bytes())

    doc = parser.parse(path)
    assert doc.mime == detect.EMAIL and doc.title == "ODF reading for the team"
    texts = [e.text for e in doc.elements]
    assert texts[:3] == [
        "From: Ana <ana@example.org>; To: team@example.org.",
        "Attachments: api-for-odfpy.odt, pythagoras.ods, Pythagorean triples, blob.bin.",
        "Hello,",
    ]
    headings = [(e.text, e.level) for e in doc.elements if e.kind == "title"]
    opened = [text for text, level in headings if level == 1]
    assert opened == [
        "Attachment: api-for-odfpy.odt",
        "Attachment: pythagoras.ods",
        "Attachment: Pythagorean triples",
    ]
    # The manual's own headings sit one level under its attachment heading.
    start = headings.index(("Attachment: api-for-odfpy.odt", 1))
    inside = headings[start + 1 : headings.index(("Attachment: pythagoras.ods", 1))]
    assert len(inside) >= 500 and min(level or 0 for _, level in inside) == 2
    assert len(doc.text.split()) >= 20_000
    assert ("table", "3 4 5 7") in [(e.kind, e.text) for e in doc.elements]
    # The forwarded mail is read, its own attachment only named; the signature and the
    # unknown bytes are not text.
    assert "Attachments: deep.txt." in texts
    assert any("the table holds a triple" in t for t in texts)
    assert not any("second-level attachment" in t for t in texts)
    assert not any("PGP" in t for t in texts)
    assert "Attachment: blob.bin" not in texts

    plain = bodies_only.parse(path)
    body = "the manual and the sheet are attached."
    assert [e.text for e in plain.elements] == [*texts[:3], body]


def test_openoffice_manual(parser: Parser) -> None:
    """odfpy's API manual, written in OpenOffice: its headings give the title paths, its
    generated table of contents is not text."""
    doc = parser.parse(_odf("api-for-odfpy.odt"))
    assert doc.mime == detect.ODT
    assert doc.title == "Application Programmer's Interface for ODFPY"
    headings = [e.text for e in doc.elements if e.kind == "title"]
    assert len(headings) >= 500
    assert sum(e.kind == "code" for e in doc.elements) >= 10
    assert len(doc.text.split()) >= 20_000  # 22,942 words split at spaces


def test_spreadsheets_and_presentations_from_real_writers(parser: Parser) -> None:
    sheet = parser.parse(_odf("pythagoras.ods"))
    assert [(e.kind, e.text) for e in sheet.elements] == [("title", "Sheet1"), ("table", "3 4 5 7")]
    kspread = parser.parse(_odf("pythagoras-kspread.ods"))
    assert [e.kind for e in kspread.elements] == ["title", "table"]
    deck = parser.parse(_odf("ol.odp"))
    assert deck.mime == detect.ODP and deck.title == "OL"
    assert sum(e.kind == "list_item" for e in deck.elements) == 14


@pytest.mark.skipif(
    shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None,
    reason="the workbooks come from Debian's archive: apt-get and dpkg-deb are needed",
)
def test_excel_97_workbooks_read_as_their_xlsx_twins(parser: Parser) -> None:
    """readxl (an R package) ships each of its example workbooks twice, as Excel 97-2003
    and as XLSX, both saved by Excel: the .xls reads exactly as its twin."""
    root = debian_package(["r-cran-readxl"], DEBIAN) / "usr/lib/R/site-library/readxl/extdata"
    names = sorted(p.stem for p in root.glob("*.xls"))
    assert len(names) >= 5
    for name in names:
        old, new = parser.parse(root / f"{name}.xls"), parser.parse(root / f"{name}.xlsx")
        assert (old.mime, new.mime) == (detect.XLS, detect.XLSX)
        assert [(e.kind, e.text, e.page) for e in old.elements] == [
            (e.kind, e.text, e.page) for e in new.elements
        ], name
    deaths = parser.parse(root / "deaths.xls")
    assert [e.text for e in deaths.elements if e.kind == "title"] == ["arts", "other"]
    assert any("David Bowie" in e.text for e in deaths.elements if e.kind == "table")


def _oletools(name: str) -> Path:
    return source_package("oletools", "0.60.2") / f"oletools-0.60.2/tests/test-data/{name}"


@pytest.mark.skipif(shutil.which("antiword") is None, reason="antiword is not installed")
def test_word_97_documents(parser: Parser) -> None:
    """Word 97-2003 files that oletools tests its analysers on, saved by Word (German and
    English, umlauts, fields, embedded objects): their text, a paragraph at a time."""
    clean = parser.parse(_oletools("msodde/harmless-clean.doc"))
    assert clean.mime == detect.DOC
    assert [(e.kind, e.text) for e in clean.elements[:2]] == [
        ("title", "Test"),
        ("text", "This is a harmless test document."),
    ]
    assert any("ünicöde" in e.text for e in clean.elements)
    dde = parser.parse(_oletools("msodde/dde-test-from-office2016.doc"))
    assert dde.title == "This is a dde test file"  # its summary information
    assert "Hope this works." in [e.text for e in dde.elements]
    embedded = parser.parse(_oletools("oleobj/embedded-unicode.doc"))
    assert not any("[pic]" in e.text for e in embedded.elements)  # antiword's placeholder
    assert embedded.text.startswith("This file contains an embedded object")


@pytest.mark.parametrize(
    ("name", "error", "says"),
    [
        ("encrypted/encrypted.doc", EncryptedDocumentError, "password"),
        ("encrypted/encrypted.xls", EncryptedDocumentError, "password"),
        ("encrypted/encrypted.ppt", EncryptedDocumentError, "password"),
        ("oleobj/embedded-simple-2007.ppt", UnsupportedFormatError, "save it as PPTX"),
        ("oleobj/sample_with_lnk_file.doc", EmptyDocumentError, "no text"),
    ],
)
def test_legacy_office_files_that_are_refused(
    parser: Parser, name: str, error: type[Exception], says: str
) -> None:
    if name.endswith(".doc") and shutil.which("antiword") is None:
        pytest.skip("antiword is not installed")
    with pytest.raises(error, match=says):
        parser.parse(_oletools(name))


def test_excel_97_from_oletools(parser: Parser) -> None:
    """A German Excel 2007 workbook saved as .xls, with an embedded object."""
    doc = parser.parse(_oletools("oleobj/embedded-simple-2007.xls"))
    assert doc.mime == detect.XLS and doc.elements[0].text == "Tabelle1"
    assert "This spreadsheet contains an embedded object" in doc.text


def test_external_entity_is_not_read(parser: Parser) -> None:
    """nasty.odt declares an entity whose text lives in another file: never fetched."""
    doc = parser.parse(_odf("nasty.odt"))
    assert [e.text for e in doc.elements] == ["Test:"]
