"""EPUB 2 and 3 → its chapters' XHTML in reading order (in the child).

Unstructured reads EPUB through pandoc, which es-rag does not ship; an EPUB is XHTML in a
zip, so es-rag follows the package itself: ``META-INF/container.xml`` names the package
document, whose spine lists the chapters in reading order; each chapter then goes
through the HTML path (es_rag.parsing.child), chrome removal included. The navigation
document (EPUB 3's ``nav``) and the NCX are tables of contents, not text, and are left out.
A book whose chapters are encrypted (DRM) is refused; font obfuscation, which only hides
embedded fonts, is not encryption of the text.
"""

from __future__ import annotations

import posixpath
import zipfile
from urllib.parse import unquote

from es_rag.errors import CorruptDocumentError, EncryptedDocumentError
from es_rag.parsing.opendoc import parse_xml

_OPF = "http://www.idpf.org/2007/opf"
_DC = "http://purl.org/dc/elements/1.1/"
_CONTAINER = "urn:oasis:names:tc:opendocument:xmlns:container"
_ENC = "http://www.w3.org/2001/04/xmlenc#"
_CHAPTER_TYPES = frozenset({"application/xhtml+xml", "text/html", "application/xml"})
# Algorithms that obfuscate embedded fonts (IDPF, Adobe): the text is not encrypted.
_FONT_OBFUSCATION = frozenset(
    {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}
)


def epub_chapters(path: str) -> tuple[list[tuple[str, bytes]], str | None]:
    """The spine's chapters (name, bytes) in reading order, and the book's ``dc:title``."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if "META-INF/container.xml" not in names:
                raise CorruptDocumentError("an EPUB without META-INF/container.xml")
            container = parse_xml(archive.read("META-INF/container.xml"), "container.xml")
            rootfile = container.find(f".//{{{_CONTAINER}}}rootfile")
            opf_name = rootfile.get("full-path") if rootfile is not None else None
            if not opf_name or opf_name not in names:
                raise CorruptDocumentError("an EPUB whose container names no package document")
            encrypted = _encrypted(archive, names)
            package = parse_xml(archive.read(opf_name), opf_name)
            base = posixpath.dirname(opf_name)
            items: dict[str, tuple[str, str, str]] = {}
            for item in package.iter(f"{{{_OPF}}}item"):
                href = unquote((item.get("href") or "").split("#", 1)[0])
                name = posixpath.normpath(posixpath.join(base, href)) if href else ""
                items[item.get("id") or ""] = (
                    name,
                    (item.get("media-type") or "").strip().lower(),
                    item.get("properties") or "",
                )
            chapters: list[tuple[str, bytes]] = []
            for ref in package.iter(f"{{{_OPF}}}itemref"):
                name, media, properties = items.get(ref.get("idref") or "", ("", "", ""))
                if media not in _CHAPTER_TYPES or "nav" in properties.split():
                    continue  # images, SVG, the navigation document
                if name not in names:
                    raise CorruptDocumentError(f"the EPUB's spine names {name!r}, which it lacks")
                if name in encrypted:
                    raise EncryptedDocumentError(
                        "an EPUB whose chapters are encrypted (DRM); es-rag reads only "
                        "unprotected books"
                    )
                chapters.append((name, archive.read(name)))
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise CorruptDocumentError(f"a damaged EPUB: {exc}") from None
    if not chapters:
        raise CorruptDocumentError("an EPUB whose spine lists no chapter in XHTML")
    title = None
    found = package.find(f".//{{{_DC}}}title")
    if found is not None:
        title = " ".join("".join(found.itertext()).split()) or None
    return chapters, title


def _encrypted(archive: zipfile.ZipFile, names: set[str]) -> set[str]:
    """The parts ``META-INF/encryption.xml`` lists as encrypted, font obfuscation aside."""
    if "META-INF/encryption.xml" not in names:
        return set()
    root = parse_xml(archive.read("META-INF/encryption.xml"), "encryption.xml")
    out = set()
    for data in root.iter(f"{{{_ENC}}}EncryptedData"):
        method = data.find(f"{{{_ENC}}}EncryptionMethod")
        if method is not None and method.get("Algorithm") in _FONT_OBFUSCATION:
            continue
        ref = data.find(f".//{{{_ENC}}}CipherReference")
        if ref is not None and ref.get("URI"):
            out.add(posixpath.normpath(unquote(ref.get("URI") or "")))
    return out
