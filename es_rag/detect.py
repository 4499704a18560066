"""What a file is, judged by its bytes; the extension only tells text formats apart.

Two steps. :func:`sniff` reads the first bytes (cheap, safe, in the caller's process) and
names a family: PDF, image, zip container, OLE container, gzip-compressed file or text.
:func:`resolve` runs in the parse child, because it opens containers (a zip's directory
can itself be hostile):
it tells DOCX, PPTX, XLSX, ODT, ODS, ODP and EPUB apart, and Outlook messages from other
OLE containers, refuses archives that would inflate past the limit, and recognises
password-protected Office files (an encrypted DOCX is an OLE container holding
``EncryptionInfo``, not a zip).

Plain-text formats carry no signature, so there the extension decides between Markdown,
CSV and plain text, and the content between HTML, XML, e-mail and the rest.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from es_rag.asciidoc import looks_like_asciidoc
from es_rag.errors import (
    CorruptDocumentError,
    DocumentTooLargeError,
    EmptyDocumentError,
    EncryptedDocumentError,
    UnsupportedFormatError,
)
from es_rag.info import info_nuls_only, looks_like_info
from es_rag.manpage import looks_like_manpage
from es_rag.rst import looks_like_rst

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
XLS = "application/vnd.ms-excel"  # Excel 97-2003, read with xlrd as XLSX is
DOC = "application/msword"  # Word 97-2003, read with antiword where it is installed
CSV = "text/csv"
TSV = "text/tab-separated-values"
HTML = "text/html"
MARKDOWN = "text/markdown"
ASCIIDOC = "text/asciidoc"
RST = "text/x-rst"
INFO = "text/x-info"  # GNU Info, makeinfo's output
MANPAGE = "text/troff"  # a manual page's source: the man or mdoc macros
TEXT = "text/plain"
EMAIL = "message/rfc822"
RTF = "application/rtf"
ODT = "application/vnd.oasis.opendocument.text"
ODS = "application/vnd.oasis.opendocument.spreadsheet"
ODP = "application/vnd.oasis.opendocument.presentation"
EPUB = "application/epub+zip"
MSG = "application/vnd.ms-outlook"
# XML other than HTML: resolve() tells XHTML and flat OpenDocument from XML es-rag refuses.
XML = "application/xml"
PNG = "image/png"
JPEG = "image/jpeg"
TIFF = "image/tiff"
BMP = "image/bmp"
WEBP = "image/webp"

# Families that sniff() can tell from the first bytes; resolve() refines "zip" and "ole".
ZIP = "application/zip"
OLE = "application/x-ole-storage"
# One compressed file, read as the document it holds (the parse child inflates it).
GZIP = "application/gzip"

IMAGES = frozenset({PNG, JPEG, TIFF, BMP, WEBP})
TEXT_FAMILY = frozenset({CSV, TSV, HTML, MARKDOWN, ASCIIDOC, RST, INFO, MANPAGE, TEXT, EMAIL, XML})
SUPPORTED_LABEL = (
    "PDF, DOCX, DOC, PPTX, XLSX, XLS, ODT, ODP, ODS, RTF, EPUB, CSV/TSV, HTML, Markdown, "
    "AsciiDoc, reStructuredText, GNU Info, manual pages, plain text, EML, MSG, "
    "PNG/JPEG/TIFF/BMP/WebP, and any of these gzip-compressed"
)

SNIFF_BYTES = 64 * 1024
_MD_SUFFIXES = {".md", ".markdown", ".mdown", ".mkd"}
# Not ".asc": that is as often an ASCII-armoured signature or key.
_ADOC_SUFFIXES = {".adoc", ".asciidoc"}
_RST_SUFFIXES = {".rst", ".rest"}
_HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
# Formats that declare their own charset: the parser decodes them, not us.
_DECLARED_CHARSET = {".html", ".htm", ".xhtml", ".eml", ".xml", ".fodt", ".fods", ".fodp"}
# Names that say XML; a file that opens with an XML declaration is XML whatever its name,
# unless the name says Markdown or text.
_XML_SUFFIXES = {".xml", ".fodt", ".fods", ".fodp", ".svg", ".rss", ".atom", ".xsl", ".xsd"}
_MAIL_HEADER = re.compile(
    r"^(from|to|cc|subject|date|received|message-id|mime-version|return-path|reply-to):",
    re.IGNORECASE | re.MULTILINE,
)
_HEADER_LINE = re.compile(r"^[A-Za-z][A-Za-z0-9-]*:[ \t]")
_MD_SIGNS = re.compile(r"^(#{1,6}\s+\S|```|~~~|\|.*\|\s*$)", re.MULTILINE)


def sniff(head: bytes, *, name: str = "", size: int | None = None) -> str:
    """A MIME type (or the ZIP / OLE family) from a file's first bytes and its name.

    Raises ``EmptyDocumentError`` for zero bytes and ``UnsupportedFormatError`` for binary
    data es-rag does not parse, whatever the file is called.
    """
    suffix = Path(name).suffix.lower()
    if not head:
        raise EmptyDocumentError("empty file (0 bytes)")
    at = head.find(b"%PDF-", 0, 1024)
    # Readers accept blank lines or junk before the header (a MacBinary wrapper, say), but
    # not text: a Markdown file that mentions %PDF- is still Markdown.
    if at == 0 or (at > 0 and (not head[:at].strip() or not _printable(head[:at]))):
        return PDF
    if head.startswith(b"PK\x03\x04"):
        return ZIP
    if head.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        return OLE
    if head.startswith(b"\x1f\x8b"):
        return GZIP
    if head[257:262] == b"ustar":
        raise UnsupportedFormatError("a tar archive: unpack it and ingest the files inside")
    image = _image(head)
    if image:
        return image
    if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{\\rtf"):
        return RTF  # text, but its markup would be indexed as words
    text = _text_head(head, suffix=suffix, truncated=size is None or size > len(head))
    if suffix in {".csv"}:
        return CSV
    if suffix in {".tsv", ".tab"}:
        return TSV
    start = text.lstrip("\ufeff \t\r\n")[:1024].lower()
    if (
        suffix in _HTML_SUFFIXES
        or start.startswith(("<!doctype html", "<html"))
        or (start.startswith("<") and "<body" in text[:4096].lower())
    ):
        return HTML
    if suffix in _XML_SUFFIXES or (
        start.startswith("<?xml") and suffix not in _MD_SUFFIXES | {".txt", ".text"}
    ):
        return XML
    if suffix not in _MD_SUFFIXES and looks_like_info(text):
        return INFO
    if suffix not in _MD_SUFFIXES and looks_like_manpage(text):
        return MANPAGE
    if suffix == ".eml" or _looks_like_mail(text):
        return EMAIL
    if suffix in _ADOC_SUFFIXES or (suffix not in _MD_SUFFIXES and looks_like_asciidoc(text)):
        # Git's manual pages and many others are AsciiDoc named .txt.
        return ASCIIDOC
    rst_name = suffix in _RST_SUFFIXES or name.lower().endswith(".rst.txt")  # Sphinx's copies
    if rst_name or (suffix not in _MD_SUFFIXES and looks_like_rst(text)):
        return RST
    if suffix in _MD_SUFFIXES or (suffix not in {".txt", ".text"} and _MD_SIGNS.search(text)):
        return MARKDOWN
    return TEXT


def inflated_name(name: str) -> str:
    """The name a gzip-compressed file's content goes by: ``README.md.gz`` is a Markdown
    file, ``changelog.gz`` a text file, ``docs.tgz`` a tar archive."""
    lower = name.lower()
    if lower.endswith(".tgz"):
        return name[:-4] + ".tar"
    if lower.endswith(".gz") and len(name) > 3:
        return name[:-3]
    return name


def _printable(data: bytes) -> bool:
    return all(32 <= b < 127 or b in b"\t\r\n" for b in data)


def _image(head: bytes) -> str | None:
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return PNG
    if head.startswith(b"\xff\xd8\xff"):
        return JPEG
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return TIFF
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return WEBP
    # "BM" alone starts many text files; the DIB header size makes it a bitmap.
    if (
        head[:2] == b"BM"
        and len(head) >= 18
        and int.from_bytes(head[14:18], "little")
        in {
            12,
            40,
            52,
            56,
            64,
            108,
            124,
        }
    ):
        return BMP
    return None


def _text_head(head: bytes, *, suffix: str, truncated: bool) -> str:
    """The head decoded as text, or the reason it is not text."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return head.decode("utf-16")
        except UnicodeDecodeError:
            # A BOM followed by garbage (or cut mid-character): judge by what decodes.
            return head[: len(head) - len(head) % 2].decode("utf-16", errors="replace")
    if b"\x00" in head and not info_nuls_only(head):
        raise UnsupportedFormatError(
            f"binary data, not a document es-rag parses (starts with {head[:8].hex()}); "
            f"supported: {SUPPORTED_LABEL}"
        )
    try:
        text = head.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the sniff window is not an error.
        if truncated and exc.start >= len(head) - 3 and exc.reason == "unexpected end of data":
            text = head[: exc.start].decode("utf-8-sig")
        elif suffix in _DECLARED_CHARSET:
            return head.decode("latin-1")  # the parser reads the declared charset
        else:
            legacy = legacy_text(head)
            if legacy is None:
                raise not_utf8(head, exc.start) from None
            text = legacy[0]
    controls = sum(1 for ch in text[:8192] if ord(ch) < 32 and ch not in "\t\n\r\f\v\x1b")
    if controls > max(8, len(text[:8192]) // 20):
        raise UnsupportedFormatError(
            f"binary data, not text ({controls} control characters in the first "
            f"{min(len(text), 8192)}); supported: {SUPPORTED_LABEL}"
        )
    return text


# Bytes that stand for letters in a one-byte code page: UTF-8 never holds four in a row
# that are not one character (its sequences are 2-4 bytes, each then ASCII or a new lead).
_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]{4,}")
# A UTF-8 sequence, or one cut by the end of the file.
_UTF8_SEQUENCE = re.compile(
    rb"[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}"
    rb"|[\xe0-\xf4][\x80-\xbf]{1,2}\Z"
)
_HIGH = bytes(range(0x80, 0x100))
_DAMAGE_PER_BYTES = 10_000  # damaged bytes a UTF-8 text may hold: one per 10 KB, at least one


def legacy_text(data: bytes) -> tuple[str, str] | None:
    """Text that is not valid UTF-8 but plainly readable, and how it was read; else None.

    - UTF-8 with a few damaged bytes (a changelog that many hands edited: bash-doc's has
      one byte of 147 KB cut from its character): read as UTF-8, each damaged byte a
      U+FFFD, where there is at most one per 10 KB ("utf-8").
    - Western European text from an older editor ("Caf\\xe9 au lait"), Windows-1252, a
      superset of Latin-1 ("cp1252"): where it holds no UTF-8 sequence (a UTF-8 file
      with one stray byte would read as mojibake), its non-ASCII bytes decode, are at
      most a third of it, and never come four in a row (as é, ü, ß come in words).

    Cyrillic or Greek in their one-byte code pages, and Chinese or Japanese in two-byte
    ones, make runs of non-ASCII letters: None, and the file is refused, never guessed.
    """
    if _UTF8_SEQUENCE.search(data):
        text = data.decode("utf-8", errors="replace")
        damaged = text.count("\ufffd") - data.count("\ufffd".encode())
        allowed = max(1, len(data) // _DAMAGE_PER_BYTES)
        return (text.removeprefix("\ufeff"), "utf-8") if damaged <= allowed else None
    high = len(data) - len(data.translate(None, _HIGH))
    if not high or high * 3 > len(data):
        return None
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:  # 0x81, 0x8d, 0x8f, 0x90, 0x9d stand for nothing
        return None
    return None if _NON_ASCII_RUN.search(text) else (text, "cp1252")


def not_utf8(data: bytes, at: int) -> UnsupportedFormatError:
    return UnsupportedFormatError(
        f"not UTF-8 text (invalid byte 0x{data[at]:02x} at offset {at}), nor damaged UTF-8 "
        "nor Western European text in Windows-1252; save the file as UTF-8"
    )


def _looks_like_mail(text: str) -> bool:
    """An RFC 822 header block: every line before the first blank one is ``Name: value``."""
    block = text.replace("\r\n", "\n").split("\n\n", 1)[0]
    lines = [line for line in block.split("\n") if line and not line[0].isspace()]
    if len(lines) < 2 or not all(_HEADER_LINE.match(line) for line in lines):
        return False
    return len(set(m.group(1).lower() for m in _MAIL_HEADER.finditer(block))) >= 2


def resolve(path: str | Path, sniffed: str, *, max_unzipped_bytes: int) -> str:
    """The supported MIME type of a ZIP / OLE container or an XML file (in the parse
    child); others pass."""
    if sniffed == ZIP:
        return _zip_kind(Path(path), max_unzipped_bytes)
    if sniffed == OLE:
        return _ole_kind(Path(path))
    if sniffed == XML:
        return _xml_kind(Path(path))
    return sniffed


_ODF_OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"


def _xml_kind(path: Path) -> str:
    """XHTML is HTML; a flat OpenDocument file (.fodt, .fods, .fodp) is its format; other
    XML (data, configuration, feeds, drawings) is not a document es-rag reads: its markup
    would be indexed as words."""
    from lxml import etree

    events = etree.iterparse(str(path), events=("start",), resolve_entities=False, no_network=True)
    try:
        _, root = next(events)  # the root element: the rest need not be read here
    except StopIteration:
        raise CorruptDocumentError("an XML file without a root element") from None
    except etree.XMLSyntaxError as exc:
        raise CorruptDocumentError(f"XML that is not well-formed: {exc}") from None
    name = etree.QName(root.tag)
    if name.localname.lower() == "html":
        return HTML
    if name.namespace == _ODF_OFFICE and name.localname == "document":
        kind = root.get(f"{{{_ODF_OFFICE}}}mimetype") or ""
        if kind in (ODT, ODS, ODP):
            return kind
    raise UnsupportedFormatError(
        f"an XML file (root element <{name.localname}>), not a document: es-rag reads XML "
        "only as XHTML and flat OpenDocument (.fodt, .fods, .fodp)"
    )


def _zip_kind(path: Path, max_unzipped_bytes: int) -> str:
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            names = {info.filename for info in infos}
            mimetype = archive.read("mimetype")[:100] if "mimetype" in names else b""
    except (zipfile.BadZipFile, EOFError, OSError, KeyError) as exc:
        raise CorruptDocumentError(f"a damaged zip container: {exc}") from exc
    inflated = sum(info.file_size for info in infos)
    if len(infos) > 100_000 or inflated > max_unzipped_bytes:
        raise DocumentTooLargeError(
            f"the archive inflates to {inflated / 2**20:,.0f} MB in {len(infos):,} parts "
            f"(limit {max_unzipped_bytes / 2**20:,.0f} MB): a zip bomb or an oversized file"
        )
    if "word/document.xml" in names:
        return DOCX
    if "ppt/presentation.xml" in names:
        return PPTX
    if "xl/workbook.xml" in names:
        return XLSX
    for kind in (ODT, ODS, ODP):
        if mimetype.strip() == kind.encode():
            return kind
    if mimetype.startswith(b"application/vnd.oasis.opendocument"):
        raise UnsupportedFormatError(
            f"OpenDocument drawing, formula, template or database "
            f"({mimetype.decode('ascii', 'replace')}): export it as ODT, ODS, ODP or PDF"
        )
    if mimetype.startswith(b"application/epub") or "META-INF/container.xml" in names:
        return EPUB
    raise UnsupportedFormatError(
        "a zip archive, not an Office document: unpack it and ingest the files inside"
    )


def _is_ole(path: Path) -> bool:
    """Whether the file is an intact OLE container (whatever it holds)."""
    import olefile

    try:
        with olefile.OleFileIO(str(path)) as ole:
            ole.listdir()
    except Exception:  # olefile raises plain errors on damaged containers
        return False
    return True


def _is_msg(path: Path) -> bool:
    """An Outlook message: an OLE container of MAPI property streams at its root."""
    import olefile

    try:
        with olefile.OleFileIO(str(path)) as ole:
            return ole.exists("__properties_version1.0") and any(
                len(entry) == 1 and entry[0].startswith("__substg1.0_") for entry in ole.listdir()
            )
    except Exception:  # olefile raises plain errors on damaged containers
        return False


def _ole_kind(path: Path) -> str:
    import msoffcrypto

    if _is_msg(path):
        return MSG
    try:
        with path.open("rb") as fh:
            office = msoffcrypto.OfficeFile(fh)
            encrypted = office.is_encrypted()
    except Exception as exc:  # msoffcrypto raises its own and plain errors on junk
        if _is_ole(path):
            raise UnsupportedFormatError(
                "an OLE container that is neither an Office document nor an Outlook message "
                "(a Visio or installer file?)"
            ) from exc
        raise CorruptDocumentError(f"a damaged OLE container: {type(exc).__name__}: {exc}") from exc
    if encrypted:
        raise EncryptedDocumentError("a password-protected Office file; remove the password")
    kind = getattr(office, "format", None)
    if kind in ("xls97", "doc97"):
        return XLS if kind == "xls97" else DOC
    raise UnsupportedFormatError("a legacy binary PowerPoint file (.ppt): save it as PPTX")
