"""GNU Info manuals: makeinfo's layout read for its nodes' headings, examples and menus."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from es_rag import detect
from es_rag.errors import NoTextError, UnsupportedFormatError
from es_rag.info import info_elements, looks_like_info
from es_rag.parsing.child import partition_file
from es_rag.parsing.common import ParseOptions

pytestmark = pytest.mark.unit

# makeinfo 6.8's layout, as in Debian's sed.info (abridged, words changed).
MANUAL = """\
This is demo.info, produced by makeinfo version 6.8 from demo.texi.

This file documents version 1.0 of GNU 'demo'.
INFO-DIR-SECTION Text creation and manipulation
START-INFO-DIR-ENTRY
* demo: (demo).                 Demonstrate things.
END-INFO-DIR-ENTRY

\x1f
File: demo.info,  Node: Top,  Next: Introduction,  Up: (dir)

GNU 'demo'
**********

This file documents version 1.0 of GNU 'demo', a stream demonstrator.

* Menu:

* Introduction::               Introduction
* Concept Index::              A menu with all the topics in this manual.

\x1f
File: demo.info,  Node: Introduction,  Next: Overview,  Prev: Top,  Up: Top

1 Introduction
**************

'demo' is a stream demonstrator.  It reads its input once
and writes what it read.

\x1f
File: demo.info,  Node: Overview,  Next: Concept Index,  Up: Introduction

1.1 Overview
============

Normally 'demo' is invoked like this:

     demo SCRIPT INPUTFILE...

   'demo' may be invoked with the following command-line options:

'-n'
'--quiet'
     By default, 'demo' prints the pattern space at the end of each
     cycle through the script.

     This option implies '-s'.(1)

     Be careful with '-n' and '-i': the former disables printing and
     the latter edits in place:
          # WRONG USAGE: 'FILE' will be truncated.
          demo -ni 's/foo/bar/' FILE

1.1.1 Exit status
-----------------

An exit status of zero indicates success.

   ---------- Footnotes ----------

   (1) As '-i' does.

\x1f
File: demo.info,  Node: Concept Index,  Prev: Overview,  Up: Top

Concept Index
*************

\x00\x08[index\x00\x08]
* Menu:

* exit status:                          Overview.             (line 20)
* options:                              Overview.             (line 8)

\x1f
Tag Table:
Node: Top\x7f210
Node: Introduction\x7f520
\x1f
End Tag Table


\x1f
Local Variables:
coding: utf-8
End:
"""


def test_nodes_read_as_sections_examples_and_contents() -> None:
    elements, title = info_elements(MANUAL)
    assert title == "GNU 'demo'"
    got = [(e.kind, e.level, e.text) for e in elements]
    assert got == [
        ("text", None, "This file documents version 1.0 of GNU 'demo', a stream demonstrator."),
        (
            "contents",
            None,
            "* Introduction::               Introduction\n"
            "* Concept Index::              A menu with all the topics in this manual.",
        ),
        ("title", 1, "1 Introduction"),
        (
            "text",
            None,
            "'demo' is a stream demonstrator. It reads its input once and writes what it read.",
        ),
        ("title", 2, "1.1 Overview"),
        ("text", None, "Normally 'demo' is invoked like this:"),
        ("code", None, "demo SCRIPT INPUTFILE..."),
        ("text", None, "'demo' may be invoked with the following command-line options:"),
        (
            "text",
            None,
            "'-n' '--quiet' By default, 'demo' prints the pattern space at the end of each "
            "cycle through the script.",
        ),
        ("text", None, "This option implies '-s'.(1)"),  # indented, but a sentence
        (
            "text",
            None,
            "Be careful with '-n' and '-i': the former disables printing and the latter "
            "edits in place:",
        ),
        ("code", None, "# WRONG USAGE: 'FILE' will be truncated.\ndemo -ni 's/foo/bar/' FILE"),
        ("title", 3, "1.1.1 Exit status"),
        ("text", None, "An exit status of zero indicates success."),
        ("text", None, "(1) As '-i' does."),
        ("title", 1, "Concept Index"),
        (
            "contents",
            None,
            "* exit status:                          Overview.             (line 20)\n"
            "* options:                              Overview.             (line 8)",
        ),
    ]
    # No node header, preamble, tag table, cookie or editor block is text.
    text = "\n".join(e.text for e in elements)
    for gone in ("File:", "INFO-DIR", "Tag Table", "Local Variables", "\x00", "Footnotes"):
        assert gone not in text


def test_info_is_sniffed_by_content_with_its_index_cookies() -> None:
    data = MANUAL.encode()
    assert detect.sniff(data, name="demo.info") == detect.INFO
    assert detect.sniff(data, name="demo.info-1") == detect.INFO
    # A head cut inside a cookie is still text.
    cut = data.index(b"\x00\x08[index") + 5
    assert detect.sniff(data[:cut], name="demo.info", size=len(data)) == detect.INFO
    # Without makeinfo's marks a NUL is binary, as before; and other text stays text.
    with pytest.raises(UnsupportedFormatError, match="binary data"):
        detect.sniff(b"plain words\x00\x08[index\x00\x08] and more", name="x.txt")
    with pytest.raises(UnsupportedFormatError, match="binary data"):
        detect.sniff(data.replace(b"Concept Index\n", b"Concept\x00Index\n"), name="demo.info")
    assert not looks_like_info("File: notes.txt, a list of what I must file.\n")
    assert detect.sniff(b"File: notes, Node: x\n\nJust notes.\n", name="notes.txt") == detect.TEXT


def test_a_compressed_manual_parses_and_a_parts_table_is_skipped(tmp_path: Path) -> None:
    packed = tmp_path / "demo.info.gz"
    packed.write_bytes(gzip.compress(MANUAL.encode()))
    parsed = partition_file(str(packed), detect.GZIP, ParseOptions())
    assert parsed.mime == detect.INFO
    assert parsed.title == "GNU 'demo'"
    assert next(e.text for e in parsed.elements if e.kind == "title") == "1 Introduction"

    # A split manual's first file lists its parts and holds no node: nothing to index,
    # and nothing wrong (skipped, reason "no-text", as an image without words).
    table = tmp_path / "split.info"
    table.write_text(
        MANUAL.split("\x1f")[0]
        + "\x1f\nIndirect:\nsplit.info-1: 1201\nsplit.info-2: 312546\n"
        + "\x1f\nTag Table:\n(Indirect)\nNode: Top\x7f1201\n\x1f\nEnd Tag Table\n"
    )
    assert detect.sniff(table.read_bytes(), name=table.name) == detect.INFO
    with pytest.raises(NoTextError, match="split Info manual"):
        partition_file(str(table), detect.INFO, ParseOptions())
