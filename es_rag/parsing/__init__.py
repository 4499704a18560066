"""Files → es-rag :class:`~es_rag.types.Element` lists, with Unstructured, in a sandbox.

:class:`Parser` is the caller's side: it checks the size, sniffs the type from the bytes
(:mod:`es_rag.detect`), sends the file to a limited child (:mod:`es_rag.sandbox`), cleans
what comes back (:mod:`es_rag.cleaning`) and insists on text: a file that should hold text
but parses to nothing is an error, never an empty success. Everything that reads the
file's bytes with a real parser (:func:`partition_file`) runs in the child.

- ``common``: what both sides share (options, the parsed file, element conversion);
- ``child``: the per-format partitioners that run in the child;
- ``ocr``: OCR of scans and images.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
import tempfile
from functools import cache
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from es_rag import detect
from es_rag.config import Settings
from es_rag.errors import EmptyDocumentError, InputError, NoTextError
from es_rag.parsing.common import (
    JUNK_TITLE,
    SANDBOX_ENV,
    ParsedFile,
    ParseOptions,
    PdfStrategy,
    sniff_file,
)
from es_rag.types import Element

# The sandbox, the child's partitioners and the cleaning are imported where a file is
# parsed: a process that only asks ``parser_version`` or ``file_problem`` (a re-ingest
# that finds every file unchanged) would otherwise spend a twentieth of a second on them.
if TYPE_CHECKING:
    from es_rag.parsing.child import partition_file
    from es_rag.sandbox import SharedServer

__all__ = [
    "ParseOptions",
    "ParsedFile",
    "Parser",
    "PdfStrategy",
    "file_problem",
    "parser_version",
    "partition_file",
]

# 2: cleaning shares the CJK ranges of es_rag.cjk (〇, kana, rare Han)
# 3: PDF outlines give the headings; running headers naming a section, code and sentence
#    fragments taken for headings, tables of contents and indexes, documentation sites'
#    navigation and permalinks are handled (es_rag.outline, es_rag.headings)
# 4: code keeps its indentation; listings in DOCX/PPTX and indented ones in plain text are
#    code; plain text and mail bodies are grouped by es-rag (no cut at "*" or "·"); RTF is
#    read for its words; prompts (">>> ", "$ ") are not headings; a bare number is a page
#    number only on pages laid out for print
# 5: OpenDocument (zipped and flat), EPUB and Outlook MSG read, other XML refused; EML
#    through the standard library's parser, its HTML part through the HTML path; layout
#    tables read as blocks; every main region of a page; Publican's chrome and blocks of
#    linked images left out; Word code styles read
# 6: a mail's attachments read after its body (ES_RAG_MAIL_ATTACHMENTS), and named in a
#    line after its sender and recipients; Excel and Word 97-2003 (.xls, .doc) read
# 7: AsciiDoc (es_rag.asciidoc) and reStructuredText (es_rag.rst) read for their
#    structure, also in files named .txt
# 8: gzip-compressed documents read as the file they hold; guessed headings numbered as a
#    hierarchy take levels from their numbers; a PDF's title is not guessed from a type
#    that recurs down its first page (a manual page's NAME, SYNOPSIS, ...); UTF-8 with a
#    few damaged bytes, and text plainly Western European in Windows-1252 (Latin-1), read
#    instead of refused; HTML
#    lists made of links (generated indexes, site maps, toctrees) are contents
# 9: a line of colon-separated fields ("user1:x:1000:1000:…") is never a guessed heading; GNU
#    Info manuals read for their nodes' structure (headings, examples, menus as contents);
#    manual pages (troff: man and mdoc) read for what man shows
ES_RAG_PARSING = "9"
_LAYOUT = frozenset({detect.PDF, *detect.IMAGES})
# Read in this process under ``parse_inline_max_kb``: es-rag's own reader, no Unstructured.
INLINE = frozenset({detect.MARKDOWN, detect.ASCIIDOC, detect.INFO, detect.MANPAGE})
# Mail is missing on purpose: a message's body and each attachment are cleaned in the
# child, each by its own type's rules (es_rag.parsing.child._with_attachments), so that an
# attached Word file's declared headings are not guessed at again as a mail's would be.
_GUESSED_TITLES = frozenset({detect.PDF, detect.TEXT, detect.RTF, detect.DOC, *detect.IMAGES})


# Where a worker's shared parse server listens; set by its main process for its children.
PARSE_SOCKET_ENV = "ES_RAG_PARSE_SOCKET"


def __getattr__(name: str) -> Any:
    if name == "partition_file":
        from es_rag.parsing.child import partition_file

        return partition_file
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _server_env() -> dict[str, str]:
    # Tesseract's OpenMP threads fight each other (and the worker's other parses): one
    # thread per parse ran 6x faster here (1.8 s against 10.3 s for a page).
    return {**SANDBOX_ENV, "OMP_THREAD_LIMIT": os.environ.get("OMP_THREAD_LIMIT", "1")}


def start_shared_server() -> SharedServer:
    """One parse server for every process a worker forks after this (``Parser`` finds it
    in ``ES_RAG_PARSE_SOCKET``); it dies with the calling thread's process."""
    from es_rag.sandbox import SharedServer

    folder = tempfile.mkdtemp(prefix="es-rag-parse-")
    server = SharedServer(os.path.join(folder, "server.sock"), env=_server_env())
    server.start()
    os.environ[PARSE_SOCKET_ENV] = server.path
    return server


@cache
def parser_version() -> str:
    """Goes into every row and the index's _meta: a new parser can mean new chunks."""
    try:
        unstructured = importlib_metadata.version("unstructured")
    except importlib_metadata.PackageNotFoundError:  # pragma: no cover - it is a dependency
        unstructured = "absent"
    return f"unstructured-{unstructured}+es-rag-{ES_RAG_PARSING}"


class Parser:
    """Parses files in a sandbox; one per process (the sandbox's server is reused)."""

    def __init__(self, settings: Settings) -> None:
        from es_rag.sandbox import Limits, Sandbox

        self.settings = settings
        self.options = ParseOptions(
            pdf_strategy=settings.pdf_strategy,
            ocr=settings.ocr,
            ocr_languages=tuple(x for x in settings.ocr_languages.split("+") if x.strip()),
            ocr_dpi=settings.ocr_dpi,
            max_unzipped_bytes=settings.parse_max_unzipped_mb * 2**20,
            max_input_bytes=settings.parse_max_mb * 2**20,
            max_text_bytes=settings.parse_max_text_mb * 2**20,
            mail_attachments=settings.mail_attachments,
        )
        self.sandbox = Sandbox(
            Limits(
                memory_mb=settings.parse_memory_mb,
                cpu_seconds=settings.parse_cpu_seconds,
                wall_seconds=settings.parse_timeout,
            ),
            env=_server_env(),
            shared=os.environ.get(PARSE_SOCKET_ENV) if settings.parse_shared_server else None,
        )

    def parse(self, path: str | Path) -> ParsedFile:
        """The file's cleaned elements; raises an ``InputError`` subclass on bad input."""
        path = Path(path)
        mime = self.sniff(path)
        parsed: ParsedFile
        if mime in INLINE and path.stat().st_size <= self.settings.parse_inline_max_kb * 1024:
            # A fork and a child's limits cost more than reading a small note (es-rag's
            # own reader, linear in the input); the sandbox is for parsers of the rest.
            from es_rag.parsing.child import partition_file

            parsed = partition_file(str(path), mime, self.options)
        else:
            parsed = self.sandbox.call(
                "es_rag.parsing.child:partition_file",
                str(path),
                mime,
                self.options,
                warm=f"es_rag.parsing.child:warm_{_family(mime)}",
            )
            parsed.stats = dataclasses.asdict(self.sandbox.last)
        elements = cleaned(parsed)
        if not any(e.text.strip() for e in elements):
            if parsed.ocr and parsed.mime in detect.IMAGES:
                raise NoTextError("an image with no text in it (OCR found no words)")
            raise EmptyDocumentError("empty document: no text to index (only whitespace)")
        parsed.elements = elements
        # A spreadsheet's first heading is its first sheet's name, not the workbook's title.
        opening = elements if parsed.mime not in (detect.XLSX, detect.XLS, detect.ODS) else []
        parsed.title = _title(parsed.title, opening) or Path(detect.inflated_name(path.name)).stem
        return parsed

    def sniff(self, path: Path) -> str:
        """The type from the first bytes, after the size checks (in this process)."""
        problem = file_problem(path)
        if problem:
            raise InputError(problem)
        try:
            return sniff_file(path, self.options)
        except OSError as exc:
            raise InputError(f"cannot read the file: {exc.strerror or exc}") from exc

    def close(self) -> None:
        self.sandbox.close()


def file_problem(path: Path) -> str | None:
    """Why ``path`` is not a regular file to parse, or None.

    Checked before it is opened: opening a named pipe would block until someone writes.
    One ``lstat`` for a plain file (a folder of many small files pays it once each).
    """
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EBADF):
            return "no such file or directory"  # what Path.exists said of these
        raise
    if stat.S_ISLNK(mode):
        try:
            path.resolve(strict=True)
        except RuntimeError:  # Python < 3.13 reports a loop this way
            return "a symbolic link loop"
        except OSError as exc:
            return "a symbolic link loop" if exc.errno == errno.ELOOP else "a broken symbolic link"
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            return "a link to a folder (not followed); give the folder itself"
    if stat.S_ISDIR(mode):
        return "a directory, not a file"
    if not stat.S_ISREG(mode):
        return "not a regular file (a device, socket or pipe)"
    return None


def cleaned(parsed: ParsedFile) -> list[Element]:
    """A parsed file's elements cleaned by its type's rules (es_rag.cleaning.clean): a
    file's, and a mail attachment's in the child (es_rag.parsing.child._attachment)."""
    from es_rag.cleaning import clean

    return clean(
        parsed.elements,
        layout=parsed.mime in _LAYOUT or parsed.ocr,
        guessed_titles=parsed.mime in _GUESSED_TITLES or parsed.ocr,
        outline=parsed.outline,
    )


def _family(mime: str) -> str:
    if mime == detect.PDF:
        return "pdf"
    if mime in detect.IMAGES:
        return "image"
    if mime in (detect.ZIP, detect.OLE):
        return "office"
    return "text"


def _title(meta_title: str | None, elements: list[Element]) -> str | None:
    """The file's own title when it is a real one, else a heading that opens the document
    (a numbered one, "1. Introduction", is a section)."""
    from es_rag.cleaning import numbered

    if meta_title:
        meta_title = " ".join(meta_title.split())
        if meta_title and not JUNK_TITLE.match(meta_title):
            return meta_title
    for el in elements[:3]:
        if el.kind == "title" and el.level == 1 and not numbered(el.text):
            # declared, or guessed at the top of a document that numbers its sections
            return " ".join(el.text.split())
        if el.kind not in ("title", "header"):
            break
    return None
