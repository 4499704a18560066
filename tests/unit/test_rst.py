"""reStructuredText read with docutils: sections by their underlines' order, Sphinx's
directives and roles read for what they show."""

from __future__ import annotations

from pathlib import Path

import pytest

from es_rag import detect
from es_rag.errors import ParseLimitError
from es_rag.rst import looks_like_rst, text_elements

pytestmark = pytest.mark.unit

PAGE = """\
:mod:`argparse` --- Parser for command-line options
===================================================

.. module:: argparse
   :synopsis: Command-line option and argument parsing library.

.. moduleauthor:: Steven Bethard <steven.bethard@gmail.com>

.. versionadded:: 3.2

.. availability:: Unix, not WASI.

**Source code:** :source:`Lib/argparse.py`

.. index:: pair: command-line; options

Tutorial
--------

See :ref:`the tutorial <argparse-tutorial>` and :func:`~os.path.join`.

.. code-block:: python
   :emphasize-lines: 1

   import argparse
   parser = argparse.ArgumentParser()

Options
^^^^^^^

prog
   The name of the program.

:param name: the option's name
:returns: the parser

* first item
  with a second line

  * nested item

#. step one
#. step two

.. function:: parse_args(args=None, namespace=None)

   Convert argument strings to objects.

.. note::

   A note keeps its words.

.. toctree::
   :maxdepth: 2

   howto/argparse

.. frobnicate:: unknown

   Words of a directive nobody registered.

=====  =====
Name   Value
=====  =====
alpha  1
beta   2
=====  =====

.. raw:: html

   <script>alert(1)</script>

.. include:: /etc/passwd
"""


def test_sections_by_the_order_of_their_underlines() -> None:
    titles = [(e.level, e.text) for e in text_elements(PAGE) if e.kind == "title"]
    assert titles == [
        (1, "argparse --- Parser for command-line options"),
        (2, "Tutorial"),
        (3, "Options"),
    ]


def test_directives_are_read_for_their_content() -> None:
    elements = text_elements(PAGE)
    pairs = [(e.kind, e.text) for e in elements]
    assert ("code", "import argparse\nparser = argparse.ArgumentParser()") in pairs
    assert ("text", "Added in version 3.2.") in pairs
    assert ("text", "Availability: Unix, not WASI.") in pairs
    assert ("text", "parse_args(args=None, namespace=None)") in pairs
    assert ("text", "Convert argument strings to objects.") in pairs
    assert ("text", "A note keeps its words.") in pairs
    assert ("text", "Words of a directive nobody registered.") in pairs
    words = " ".join(e.text for e in elements)
    for gone in ("toctree", "maxdepth", "howto/argparse", "moduleauthor", "synopsis", "pair:"):
        assert gone not in words


def test_roles_read_as_what_they_show() -> None:
    words = " ".join(e.text for e in text_elements(PAGE))
    assert "See the tutorial and join." in words
    assert "Source code: Lib/argparse.py" in words
    assert ":ref:" not in words and ":func:" not in words and "<string>" not in words


def test_lists_terms_and_tables() -> None:
    pairs = [(e.kind, e.text) for e in text_elements(PAGE)]
    assert ("list_item", "- first item with a second line") in pairs
    assert ("list_item", "  - nested item") in pairs
    assert ("list_item", "1. step one") in pairs and ("list_item", "2. step two") in pairs
    assert ("text", "prog: The name of the program.") in pairs
    assert ("text", "param name: the option's name") in pairs
    table = next(e for e in text_elements(PAGE) if e.kind == "table")
    assert table.text == "Name Value\nalpha 1\nbeta 2"
    assert table.html is not None and "<td>alpha</td>" in table.html


def test_no_file_and_no_raw_markup_is_read() -> None:
    words = " ".join(e.text for e in text_elements(PAGE))
    assert "root:" not in words and "<script>" not in words and "alert" not in words


def test_a_lone_title_stays_a_section() -> None:
    assert [(e.kind, e.level) for e in text_elements("Title\n=====\n\nWords.\n")] == [
        ("title", 1),
        ("text", None),
    ]


@pytest.mark.parametrize(
    ("text", "name", "expected"),
    [
        (PAGE, "argparse.rst.txt", detect.RST),
        (PAGE, "README", detect.RST),
        ("Just words.\n", "index.rst", detect.RST),
        ("Just words.\n", "argparse.rst.txt", detect.RST),
        (PAGE, "notes.md", detect.MARKDOWN),
        # One sign is chance: Markdown writes ``code`` too.
        ("Use ``make`` here.\n", "notes.txt", detect.TEXT),
    ],
)
def test_detection(text: str, name: str, expected: str) -> None:
    assert detect.sniff(text.encode(), name=name) == expected


def test_two_kinds_of_signs_make_rst() -> None:
    assert looks_like_rst(".. note::\n\n   Use :func:`open`.\n")
    assert not looks_like_rst("Use :func:`open`.\n")


def test_nesting_past_the_parser_is_a_clear_error(tmp_path: Path) -> None:
    # docutils recurses once per nested block: past Python's stack it is a refusal that
    # names the limit, not a crash of the parse.
    from es_rag.parsing import ParseOptions
    from es_rag.parsing.child import partition_file

    path = tmp_path / "deep.rst"
    path.write_text("\n".join("  " * i + f"* item {i}\n" for i in range(2000)))
    with pytest.raises(ParseLimitError) as caught:
        partition_file(str(path), detect.RST, ParseOptions())
    assert caught.value.limit == "depth"
