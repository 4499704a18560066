"""File-type detection: sniff() on the first bytes, resolve() on zip and OLE containers."""

from __future__ import annotations

import io
import struct
import tarfile
import zipfile
from pathlib import Path

import pytest

from es_rag import detect
from es_rag.detect import resolve, sniff
from es_rag.errors import (
    CorruptDocumentError,
    DocumentTooLargeError,
    EmptyDocumentError,
    EncryptedDocumentError,
    InputError,
    UnsupportedFormatError,
)

pytestmark = pytest.mark.unit

LIMIT = 50 * 2**20


# --- sniff: signatures ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj", detect.PDF),
        (b"\r\n\r\n%PDF-1.4\n", detect.PDF),  # junk before the header, as Acrobat allows
        (b"PK\x03\x04\x14\x00\x06\x00", detect.ZIP),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 24, detect.OLE),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", detect.PNG),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", detect.JPEG),
        (b"II*\x00\x08\x00\x00\x00", detect.TIFF),
        (b"MM\x00*\x00\x00\x00\x08", detect.TIFF),
        (b"RIFF\x24\x00\x00\x00WEBPVP8 ", detect.WEBP),
        (b"\x1f\x8b\x08\x08\x00\x00\x00\x00\x00\x03README.md\x00", detect.GZIP),
        (b"BM" + b"\x36\x00\x0c\x00" + b"\x00" * 8 + (40).to_bytes(4, "little"), detect.BMP),
        (b"{\\rtf1\\ansi\\ansicpg1252\\deff0{\\fonttbl", detect.RTF),  # text, but markup
        (b"\xef\xbb\xbf\r\n{\\rtf1\\ansi", detect.RTF),
    ],
)
def test_signatures(head: bytes, expected: str) -> None:
    # the name lies on purpose: bytes decide, not the extension
    assert sniff(head, name="report.txt", size=len(head) + 1000) == expected


def test_a_tar_archive_is_refused_with_what_to_do() -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.addfile(tarfile.TarInfo("notes.txt"), io.BytesIO(b""))
    with pytest.raises(UnsupportedFormatError, match="a tar archive: unpack it"):
        sniff(buffer.getvalue()[: detect.SNIFF_BYTES], name="notes.tar")


@pytest.mark.parametrize(
    ("name", "inflated"),
    [
        ("README.md.gz", "README.md"),
        ("changelog.Debian.gz", "changelog.Debian"),
        ("MANUAL.TXT.GZ", "MANUAL.TXT"),
        ("docs.tgz", "docs.tar"),
        ("sub/site.tar.gz", "sub/site.tar"),
        (".gz", ".gz"),  # nothing left to name it by
        ("notes.md", "notes.md"),
    ],
)
def test_a_compressed_file_is_named_as_what_it_holds(name: str, inflated: str) -> None:
    assert detect.inflated_name(name) == inflated


def test_bm_prefix_alone_is_text_not_a_bitmap() -> None:
    head = b"BM25 is a ranking function used by search engines.\n"
    assert sniff(head, name="notes", size=len(head)) == detect.TEXT


def test_riff_that_is_not_webp_is_refused() -> None:
    head = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00"
    with pytest.raises(UnsupportedFormatError, match="binary"):
        sniff(head, name="a.wav", size=len(head))


def test_pdf_signature_must_be_near_the_start() -> None:
    head = b"x" * 2000 + b"%PDF-1.7"
    assert sniff(head, name="a", size=len(head)) == detect.TEXT


# --- sniff: text subtypes ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("head", "name", "expected"),
    [
        (b"<!DOCTYPE html><html><body>x</body></html>", "page", detect.HTML),
        (b"\n  <html lang='en'><p>x</p></html>", "page.txt", detect.HTML),
        (b"<div>\n<body>hi</body>", "fragment", detect.HTML),
        (b"just a paragraph", "page.htm", detect.HTML),
        (b"<p>tags but no body element</p>", "x", detect.TEXT),
        (b"From: a@example.com\nTo: b@example.com\nSubject: hi\n\nbody", "msg", detect.EMAIL),
        (b"Hello,\nno headers here", "mail.eml", detect.EMAIL),
        (b"# Title\n\nSome text.", "readme", detect.MARKDOWN),
        (b"plain words only", "notes.md", detect.MARKDOWN),
        (b"plain words only", "notes.markdown", detect.MARKDOWN),
        (b"```\ncode\n```", "snippet", detect.MARKDOWN),
        (b"| a | b |\n|---|---|\n| 1 | 2 |", "table", detect.MARKDOWN),
        (b"# Title\n\nSome text.", "readme.txt", detect.TEXT),  # .txt: signs do not count
        (b"#hashtag is not a heading", "tweet", detect.TEXT),
        (b"a,b\n1,2\n", "data.csv", detect.CSV),
        (b"a,b\n1,2\n", "DATA.CSV", detect.CSV),
        (b"a\tb\n1\t2\n", "data.tsv", detect.TSV),
        (b"a\tb\n1\t2\n", "data.tab", detect.TSV),
        (b"Just some plain text.\n", "notes", detect.TEXT),
        (b"Just some plain text.\n", "", detect.TEXT),
        ("\ufeffUTF-8 with a BOM".encode(), "bom.txt", detect.TEXT),
        ("héllo wörld, 你好".encode(), "u.txt", detect.TEXT),
        ("UTF-16 text".encode("utf-16"), "u16.txt", detect.TEXT),
        (b"colour \x1b[31mred\x1b[0m\tand\ttabs\f", "log.txt", detect.TEXT),
        (b'<?xml version="1.0"?><rss><channel/></rss>', "feed", detect.XML),
        (b"<svg><text>label</text></svg>", "logo.svg", detect.XML),
        (b'<?xml version="1.0"?><office:document/>', "policy.fodt", detect.XML),
        (b'<?xml version="1.0"?>\n<html><body>x</body></html>', "page.xhtml", detect.HTML),
        (b'<?xml version="1.0"?> in a note about XML', "notes.md", detect.MARKDOWN),
        (b'<?xml version="1.0"?> in a note about XML', "notes.txt", detect.TEXT),
    ],
)
def test_text_subtypes(head: bytes, name: str, expected: str) -> None:
    assert sniff(head, name=name, size=len(head)) == expected


def test_mail_needs_a_header_block_of_known_fields() -> None:
    # one header-like line, then prose: not a message
    assert sniff(b"Subject: hi\nthis is prose\n\nmore", name="x") == detect.TEXT
    # header-shaped lines, but no two mail fields
    assert sniff(b"Note: one\nAuthor: me\n\nbody", name="x") == detect.TEXT
    # continuation lines (folded headers) are allowed inside the block
    folded = b"From: a@b.c\nSubject: a long\n  folded subject\nDate: today\n\nbody"
    assert sniff(folded, name="x") == detect.EMAIL


def test_mail_with_crlf_line_ends_is_recognised() -> None:
    """RFC 5322 messages end lines with CRLF; the header block ends at CRLF CRLF."""
    head = b"From: a@example.com\r\nTo: b@example.com\r\nSubject: hi\r\n\r\nHello there.\r\n"
    assert sniff(head, name="message", size=len(head)) == detect.EMAIL


# --- sniff: refusals -----------------------------------------------------------------------
def test_empty_file() -> None:
    with pytest.raises(EmptyDocumentError):
        sniff(b"", name="a.pdf", size=0)


@pytest.mark.parametrize(
    "head",
    [
        b"\x7fELF\x02\x01\x01\x00\x00\x00\x00",
        b"MZ\x90\x00\x03\x00\x00\x00",
        b"\x1f\x8d\x08\x00\x00\x00\x00\x00",  # not quite gzip: a NUL in the header
        bytes(range(1, 32)) * 4,  # control characters, no NUL
    ],
)
def test_binary_is_refused_whatever_its_name(head: bytes) -> None:
    with pytest.raises(UnsupportedFormatError, match="binary") as info:
        sniff(head, name="innocent.txt", size=len(head))
    assert "supported:" in str(info.value)


def test_a_few_control_characters_are_still_text() -> None:
    head = b"line\x01one\nline\x02two\n" + b"plain text " * 20
    assert sniff(head, name="x.txt", size=len(head)) == detect.TEXT


@pytest.mark.parametrize(
    ("name", "expected"),
    [("latin1.txt", detect.TEXT), ("latin1.md", detect.MARKDOWN), ("latin1.csv", detect.CSV),
     ("latin1", detect.TEXT)],
)  # fmt: skip
def test_western_european_text_in_a_one_byte_code_page_is_read(name: str, expected: str) -> None:
    head = "café’s crème, naïve façade – “Größe” costs 5 €\n".encode("cp1252")
    assert sniff(head, name=name, size=len(head)) == expected
    assert detect.legacy_text(head) == (head.decode("cp1252"), "cp1252")


def test_utf8_with_a_damaged_byte_is_read_with_a_replacement_character() -> None:
    # bash-doc's changelog: 147 KB of UTF-8 in which one character lost its second byte
    data = "Marc Aurèle La France\n".encode() * 500 + b"from O\xc4uz <oguz>\n"
    text, encoding = detect.legacy_text(data) or ("", "")
    assert encoding == "utf-8" and text.endswith("from O\ufffduz <oguz>\n")
    assert sniff(data[: detect.SNIFF_BYTES], name="changelog", size=len(data)) == detect.TEXT


@pytest.mark.parametrize(
    ("head", "byte"),
    [
        ("Привет, мир: это текст в кодировке Windows-1251.\n".encode("cp1251"), "0xcf"),
        ("Καλημέρα κόσμε, κείμενο σε Windows-1253.\n".encode("cp1253"), "0xca"),
        ("中文文本，使用 GBK 编码保存。\n".encode("gbk"), "0xd6"),
        ("日本語のテキスト、Shift_JIS。\n".encode("shift_jis"), "0x93"),
        # UTF-8 with Latin-1 bytes in it, more than one per 10 KB: as Windows-1252 "é"
        # would read "Ã©", as UTF-8 every accent of the Latin-1 part would be lost
        ("déjà vu, ".encode() + "café crème, naïve façade\n".encode("latin-1"), "0xe9"),
        (b"undefined in Windows-1252: \x81\x8d\n", "0x81"),
    ],
)
def test_other_encodings_are_refused_not_guessed(head: bytes, byte: str) -> None:
    with pytest.raises(UnsupportedFormatError, match="not UTF-8 text") as info:
        sniff(head, name="notes.txt", size=len(head))
    assert byte in str(info.value) and "Windows-1252" in str(info.value)
    assert detect.legacy_text(head) is None


@pytest.mark.parametrize(("name", "expected"), [("x.html", detect.HTML), ("x.eml", detect.EMAIL)])
def test_declared_charset_formats_may_be_non_utf8(name: str, expected: str) -> None:
    head = "Subject: café\nFrom: a@b.c\n\n<html>crème</html>".encode("latin-1")
    assert sniff(head, name=name, size=len(head)) == expected


@pytest.mark.parametrize(
    ("char", "cut"), [("é", 1), ("中", 1), ("中", 2), ("😀", 1), ("😀", 2), ("😀", 3)]
)
def test_multibyte_char_cut_by_the_sniff_window_is_not_an_error(char: str, cut: int) -> None:
    full = ("text before " * 10 + char).encode()
    head = full[: len(full) - cut]
    with pytest.raises(UnicodeDecodeError):
        head.decode("utf-8")  # the window really ends inside the character
    assert sniff(head, name="a.txt", size=len(full) + 100) == detect.TEXT


def test_truncated_char_at_the_true_end_of_file_is_damage() -> None:
    head = ("ends with " + "中").encode()[:-1]
    assert sniff(head, name="a.txt", size=len(head)) == detect.TEXT  # the whole file
    assert detect.legacy_text(head) == ("ends with \ufffd", "utf-8")  # not "ä¸" (cp1252)


def test_invalid_byte_before_the_window_end_is_still_an_error() -> None:
    head = b"abc \x81 def" + b" more" * 10  # 0x81: nothing in Windows-1252 either
    with pytest.raises(UnsupportedFormatError):
        sniff(head, name="a.txt", size=10**6)


# --- resolve: zip containers ---------------------------------------------------------------
@pytest.fixture(scope="module")
def office(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import docx
    import openpyxl
    import pptx

    root = tmp_path_factory.mktemp("office")
    document = docx.Document()
    document.add_heading("Handbook", level=1)
    document.add_paragraph("Refunds take five days.")
    document.save(str(root / "a.docx"))
    book = openpyxl.Workbook()
    book.active["A1"] = "Name"
    book.save(root / "a.xlsx")
    deck = pptx.Presentation()
    deck.slides.add_slide(deck.slide_layouts[0])
    deck.save(str(root / "a.pptx"))
    return {"docx": root / "a.docx", "xlsx": root / "a.xlsx", "pptx": root / "a.pptx"}


@pytest.mark.parametrize(
    ("kind", "expected"), [("docx", detect.DOCX), ("xlsx", detect.XLSX), ("pptx", detect.PPTX)]
)
def test_office_documents_by_their_members(
    office: dict[str, Path], kind: str, expected: str
) -> None:
    path = office[kind]
    data = path.read_bytes()
    sniffed = sniff(data[: detect.SNIFF_BYTES], name="no-extension", size=len(data))
    assert sniffed == detect.ZIP
    assert resolve(path, sniffed, max_unzipped_bytes=LIMIT) == expected


def test_office_kind_does_not_depend_on_the_name(office: dict[str, Path], tmp_path: Path) -> None:
    renamed = tmp_path / "slides.docx"
    renamed.write_bytes(office["xlsx"].read_bytes())
    assert resolve(renamed, detect.ZIP, max_unzipped_bytes=LIMIT) == detect.XLSX


def _zip(path: Path, members: dict[str, bytes], *, compress: bool = False) -> Path:
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_plain_zip_is_refused(tmp_path: Path) -> None:
    path = _zip(tmp_path / "a.zip", {"report.txt": b"hello", "data/x.csv": b"a,b"})
    with pytest.raises(UnsupportedFormatError, match="zip archive"):
        resolve(path, detect.ZIP, max_unzipped_bytes=LIMIT)


@pytest.mark.parametrize(
    "mimetype",
    [
        b"application/vnd.oasis.opendocument.graphics",
        b"application/vnd.oasis.opendocument.text-template",
    ],
)
def test_opendocument_drawings_and_templates_are_refused(tmp_path: Path, mimetype: bytes) -> None:
    path = _zip(tmp_path / "a.bin", {"mimetype": mimetype, "content.xml": b"<x/>"})
    with pytest.raises(UnsupportedFormatError, match="export it as ODT, ODS, ODP or PDF"):
        resolve(path, detect.ZIP, max_unzipped_bytes=LIMIT)


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        ({"mimetype": b"application/vnd.oasis.opendocument.text"}, detect.ODT),
        ({"mimetype": b"application/vnd.oasis.opendocument.spreadsheet"}, detect.ODS),
        ({"mimetype": b"application/vnd.oasis.opendocument.presentation"}, detect.ODP),
        ({"mimetype": b"application/epub+zip"}, detect.EPUB),
        # A mimetype saved with a line end, or none at all (the container names the book).
        ({"mimetype": b"application/epub+zip\n"}, detect.EPUB),
        ({"META-INF/container.xml": b"<container/>"}, detect.EPUB),
    ],
)
def test_opendocument_and_epub_are_read(
    tmp_path: Path, parts: dict[str, bytes], expected: str
) -> None:
    path = _zip(tmp_path / "a.bin", {**parts, "content.xml": b"<x/>"})
    assert resolve(path, detect.ZIP, max_unzipped_bytes=LIMIT) == expected


@pytest.mark.parametrize(
    ("xml", "expected"),
    [
        (b'<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"/>', detect.HTML),
        (
            b'<office:document xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"'
            b' office:mimetype="application/vnd.oasis.opendocument.spreadsheet"/>',
            detect.ODS,
        ),
    ],
)
def test_xml_that_is_a_document(tmp_path: Path, xml: bytes, expected: str) -> None:
    path = tmp_path / "a.xml"
    path.write_bytes(xml)
    assert resolve(path, detect.XML, max_unzipped_bytes=LIMIT) == expected


@pytest.mark.parametrize(
    ("xml", "error", "match"),
    [
        (b'<?xml version="1.0"?><rss><channel/></rss>', UnsupportedFormatError, "<rss>"),
        (
            b'<office:document xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"'
            b' office:mimetype="application/vnd.oasis.opendocument.graphics"/>',
            UnsupportedFormatError,
            "<document>",
        ),
        (b"<a><b></a>", CorruptDocumentError, "not well-formed"),
        (b'<?xml version="1.0"?>', CorruptDocumentError, "not well-formed"),
    ],
)
def test_xml_that_is_not_a_document(
    tmp_path: Path, xml: bytes, error: type[Exception], match: str
) -> None:
    path = tmp_path / "a.xml"
    path.write_bytes(xml)
    with pytest.raises(error, match=match):
        resolve(path, detect.XML, max_unzipped_bytes=LIMIT)


def test_zip_bomb_by_declared_size(tmp_path: Path) -> None:
    path = _zip(
        tmp_path / "bomb.docx",
        {"[Content_Types].xml": b"<x/>", "word/document.xml": b"\0" * (3 * 2**20)},
        compress=True,
    )
    assert path.stat().st_size < 100_000  # small on disk ...
    with pytest.raises(DocumentTooLargeError, match="zip bomb"):
        resolve(path, detect.ZIP, max_unzipped_bytes=2**20)  # ... but inflates past the limit
    # under a generous limit the same file is an ordinary DOCX
    assert resolve(path, detect.ZIP, max_unzipped_bytes=LIMIT) == detect.DOCX


def test_bomb_check_counts_all_members(tmp_path: Path) -> None:
    members = {f"part{i}.xml": b"a" * 200_000 for i in range(6)}  # 1.2 MB in all
    path = _zip(tmp_path / "many.zip", {**members, "word/document.xml": b"<x/>"}, compress=True)
    with pytest.raises(DocumentTooLargeError):
        resolve(path, detect.ZIP, max_unzipped_bytes=2**20)


@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_truncated_zip_is_corrupt(office: dict[str, Path], tmp_path: Path, keep: float) -> None:
    data = office["docx"].read_bytes()
    path = tmp_path / "cut.docx"
    path.write_bytes(data[: int(len(data) * keep)])
    assert sniff(path.read_bytes()[:100], name=path.name) == detect.ZIP
    with pytest.raises(CorruptDocumentError, match="damaged zip"):
        resolve(path, detect.ZIP, max_unzipped_bytes=LIMIT)


def test_zip_signature_followed_by_junk_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "junk.docx"
    path.write_bytes(b"PK\x03\x04" + b"\xde\xad\xbe\xef" * 64)
    with pytest.raises(CorruptDocumentError):
        resolve(path, detect.ZIP, max_unzipped_bytes=LIMIT)


def test_other_families_pass_through(tmp_path: Path) -> None:
    path = tmp_path / "x.pdf"
    path.write_bytes(b"%PDF-1.7\n")
    assert resolve(path, detect.PDF, max_unzipped_bytes=LIMIT) == detect.PDF
    assert resolve(path, detect.TEXT, max_unzipped_bytes=LIMIT) == detect.TEXT


# --- resolve: OLE containers ---------------------------------------------------------------
def _ole(streams: dict[str, bytes]) -> bytes:
    """A minimal but valid OLE compound file (CFB v3, 512-byte sectors) with these streams.

    Each stream is padded to 4096 bytes so it lives in regular sectors (no mini stream).
    """
    endofchain, freesect, fatsect, nostream = 0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFD, 0xFFFFFFFF
    fat = [fatsect, endofchain]  # sector 0: the FAT, sector 1: the directory
    data = b""
    entries: list[tuple[str, int, int]] = []
    for name, blob in streams.items():
        blob = blob.ljust(max(4096, -(-len(blob) // 512) * 512), b"\0")
        start = len(fat)
        count = len(blob) // 512
        fat += [start + i + 1 for i in range(count - 1)] + [endofchain]
        data += blob
        entries.append((name, start, len(blob)))
    assert len(fat) <= 128 and len(entries) <= 3

    def entry(name: str, kind: int, right: int, child: int, start: int, size: int) -> bytes:
        raw = name.encode("utf-16-le") + b"\0\0"
        return (
            raw.ljust(64, b"\0")
            + struct.pack("<HBB3I", len(raw), kind, 1, nostream, right, child)
            + b"\0" * 36
            + struct.pack("<IQ", start, size)
        )

    directory = entry("Root Entry", 5, nostream, 1 if entries else nostream, endofchain, 0)
    for i, (name, start, size) in enumerate(entries):
        right = i + 2 if i + 1 < len(entries) else nostream
        directory += entry(name, 2, right, nostream, start, size)
    header = (
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
        + b"\0" * 16
        + struct.pack("<HHHHH", 0x3E, 3, 0xFFFE, 9, 6)
        + b"\0" * 6
        + struct.pack("<9I", 0, 1, 1, 0, 4096, endofchain, 0, endofchain, 0)
        + struct.pack("<109I", 0, *([freesect] * 108))
    )
    fat_sector = struct.pack("<128I", *(fat + [freesect] * (128 - len(fat))))
    return header + fat_sector + directory.ljust(512, b"\0") + data


def _word_fib(*, encrypted: bool) -> bytes:
    """The start of a Word 97 WordDocument stream: FibBase with fEncrypted as asked."""
    flags = 1 << 8 if encrypted else 0
    return struct.pack("<HHHHHH", 0xA5EC, 0xC1, 0, 0x0409, 0, flags)


def test_encrypted_docx_is_an_ole_container(office: dict[str, Path], tmp_path: Path) -> None:
    from msoffcrypto.format.ooxml import OOXMLFile

    path = tmp_path / "locked.docx"
    with office["docx"].open("rb") as src, path.open("wb") as out:
        OOXMLFile(src).encrypt("pw", out)
    data = path.read_bytes()
    sniffed = sniff(data[: detect.SNIFF_BYTES], name=path.name, size=len(data))
    assert sniffed == detect.OLE
    with pytest.raises(EncryptedDocumentError, match="password"):
        resolve(path, sniffed, max_unzipped_bytes=LIMIT)


def test_legacy_doc_is_word_97(tmp_path: Path) -> None:
    """Word 97-2003 is read (with antiword); whatever the file is called."""
    path = tmp_path / "old.xls"
    path.write_bytes(_ole({"WordDocument": _word_fib(encrypted=False)}))
    assert sniff(path.read_bytes()[:512], name=path.name) == detect.OLE
    assert resolve(path, detect.OLE, max_unzipped_bytes=LIMIT) == detect.DOC


def test_password_protected_legacy_doc_is_encrypted(tmp_path: Path) -> None:
    path = tmp_path / "locked.doc"
    path.write_bytes(_ole({"WordDocument": _word_fib(encrypted=True)}))
    with pytest.raises(EncryptedDocumentError):
        resolve(path, detect.OLE, max_unzipped_bytes=LIMIT)


def test_damaged_ole_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "broken.doc"
    path.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600)
    with pytest.raises(CorruptDocumentError, match="damaged OLE"):
        resolve(path, detect.OLE, max_unzipped_bytes=LIMIT)


def test_valid_ole_that_is_not_office_is_unsupported_not_corrupt(tmp_path: Path) -> None:
    """An intact OLE file of another kind (Outlook .msg, Visio, MSI) is not damaged."""
    path = tmp_path / "mail.msg"
    path.write_bytes(_ole({"__properties_version1.0": b"\x00" * 32}))
    with pytest.raises(InputError) as info:
        resolve(path, detect.OLE, max_unzipped_bytes=LIMIT)
    assert isinstance(info.value, UnsupportedFormatError), repr(info.value)


def test_ole_helper_builds_a_readable_file() -> None:
    """Guard for the helper above: olefile itself lists the stream."""
    import olefile

    ole = olefile.OleFileIO(io.BytesIO(_ole({"WordDocument": _word_fib(encrypted=False)})))
    assert ole.listdir() == [["WordDocument"]]
    assert ole.openstream("WordDocument").read(2) == b"\xec\xa5"
