"""AsciiDoc read for its structure: what each block means, as es_rag.markdown then reads it."""

from __future__ import annotations

import time

import pytest

from es_rag import detect
from es_rag.asciidoc import looks_like_asciidoc, to_markdown
from es_rag.markdown import text_elements
from es_rag.types import Element

pytestmark = pytest.mark.unit


def read(source: str) -> list[Element]:
    return text_elements(to_markdown(source))


def titles(source: str) -> list[tuple[int | None, str]]:
    return [(e.level, e.text) for e in read(source) if e.kind == "title"]


# A manual page as Git writes them (its Documentation/*.txt), trimmed.
MANUAL = """\
git-commit(1)
=============
:git-commit: 1

NAME
----
git-commit - Record changes to the repository

SYNOPSIS
--------
[verse]
'git commit' [-a | --interactive] [--amend]
\t   [--dry-run] [-F <file> | -m <msg>]

DESCRIPTION
-----------
Create a new commit; HEAD is "detached" as described in
linkgit:git-checkout[1].

OPTIONS
-------
-a::
--all::
\tTell the command to automatically stage files that have
\tbeen modified and deleted.

--cleanup=<mode>::
\tHow the message is cleaned up:
+
--
strip::
\tStrip leading and trailing empty lines.
scissors::
\tSame as `whitespace` except that everything from the line below is cut.

\t\t# ------------------------ >8 ------------------------
--

include::date-formats.txt[]

[[examples]]
EXAMPLES
--------
[source,shell]
----
$ git commit -a
----

// a comment nobody reads
SEE ALSO
--------
linkgit:git-add[1]
"""


def test_sections_in_both_title_forms() -> None:
    assert titles(MANUAL) == [
        (1, "git-commit(1)"),
        (2, "NAME"),
        (2, "SYNOPSIS"),
        (2, "DESCRIPTION"),
        (2, "OPTIONS"),
        (2, "EXAMPLES"),
        (2, "SEE ALSO"),
    ]
    assert titles("= Guide\n\n== Install\n\n=== On Debian ===\n\n#### Markdown's form\n") == [
        (1, "Guide"),
        (2, "Install"),
        (3, "On Debian"),
        (4, "Markdown's form"),
    ]
    # The five two-line levels, Asciidoctor's underline characters.
    levels = "\n\n".join(f"T{c}\n{c * 2}" for c in "=-~^+")
    assert [level for level, _ in titles(levels)] == [1, 2, 3, 4, 5]


def test_markup_that_plain_text_would_take_for_headings_is_left_out() -> None:
    words = " ".join(e.text for e in read(MANUAL))
    for markup in (":git-commit: 1", "[[examples]]", "[verse]", "[source,shell]", "include::"):
        assert markup not in words
    assert "a comment nobody reads" not in words
    assert "linkgit" not in words and "git-checkout(1)" in words and "git-add(1)" in words


def test_listings_literals_and_indented_paragraphs_are_code() -> None:
    elements = read(MANUAL)
    code = [e.text for e in elements if e.kind == "code"]
    assert "$ git commit -a" in code
    # Indented under a description after a blank line: a literal paragraph, not a heading.
    assert any(c.startswith("# ----") for c in code)
    assert ("# ------------------------ >8 ------------------------") not in [
        e.text for e in elements if e.kind == "title"
    ]
    literal = read("Run this:\n\n  make -j4\n    install\n\nThen rest.\n")
    assert [(e.kind, e.text) for e in literal] == [
        ("text", "Run this:"),
        ("code", "make -j4\n  install"),
        ("text", "Then rest."),
    ]


def test_labelled_terms_stay_with_their_description() -> None:
    texts = [e.text for e in read(MANUAL)]
    both = next(t for t in texts if t.startswith("-a, --all:"))
    assert "automatically stage files" in both
    assert any(t.startswith("strip:") and "empty lines" in t for t in texts)


def test_a_delimiter_after_a_paragraph_line_does_not_make_it_a_title() -> None:
    # Asciidoctor reads two-line titles only where a block starts.
    source = "Some prose first\nRun this:\n----\nmake\n----\n"
    assert titles(source) == []
    assert [e.kind for e in read(source)] == ["text", "code"]


def test_lists_nest_by_their_markers() -> None:
    text = to_markdown("* fruit\n** apple\n* bread\n")
    assert text.splitlines() == ["- fruit", "  - apple", "- bread"]
    assert to_markdown(". one\n.. one.a\n").splitlines() == ["1. one", "   1. one.a"]


def test_a_paragraph_after_a_list_ends_it_unless_attached() -> None:
    assert to_markdown("* item\n\nProse.\n").splitlines() == ["- item", "", "Prose."]
    attached = to_markdown("* item\n+\nMore of the item.\n").splitlines()
    assert attached[-1] == "  More of the item."


def test_tables_become_pipe_tables_when_rows_are_lines() -> None:
    source = '[cols="1,1"]\n|===\n|Name |Role\n|ada |admin\n|bob |reader\n|===\n'
    lines = to_markdown(source).splitlines()
    assert lines == ["| Name | Role |", "|---|---|", "| ada | admin |", "| bob | reader |"]
    # One cell a line: the words, in order.
    loose = to_markdown("|===\n|Name\n|ada\n\n|Role\n|admin\n|===\n")
    assert [w for w in loose.split() if w.isalpha()] == ["Name", "ada", "Role", "admin"]


def test_cross_references_macros_and_attributes_read_as_words() -> None:
    source = (
        ":product: Acme Search\n:unused!:\n\n"
        "See <<install,the install guide>> or <<upgrade>> and "
        "https://example.org/docs[the docs], kbd:[Ctrl+C], {product}{nbsp}9, {undefined}.\n"
    )
    text = to_markdown(source).strip()
    assert text == (
        "See the install guide or upgrade and the docs, Ctrl+C, Acme Search 9, {undefined}."
    )
    # The underline matches the title as written; "{litdd}" is Git's "--".
    assert titles(
        "git-credential-cache{litdd}daemon(1)\n====================================\n"
    ) == [(1, "git-credential-cache--daemon(1)")]


def test_containers_keep_their_content_and_anchors_leave_titles() -> None:
    source = "[NOTE]\n====\nBack up first.\n====\n\n== Restore[[restore]]\n\n____\nA quote.\n____\n"
    assert [(e.kind, e.text) for e in read(source)] == [
        ("text", "Back up first."),
        ("title", "Restore"),
        ("text", "A quote."),
    ]


def test_fences_in_code_cannot_close_the_block() -> None:
    source = "----\n```\nnot the end\n----\n\nAfter.\n"
    elements = read(source)
    assert [e.kind for e in elements] == ["code", "text"]
    assert elements[0].text == "```\nnot the end"
    # An underline that underlines no title would open a "~~~" fence in Markdown.
    assert [e.text for e in read("Prose\nmore prose\n~~~~~~~~~\n\nAfter.\n")] == [
        "Prose\nmore prose",
        "After.",
    ]


@pytest.mark.parametrize(
    ("text", "name", "expected"),
    [
        (MANUAL, "git-commit.txt", detect.ASCIIDOC),
        (MANUAL, "README", detect.ASCIIDOC),
        ("Just words.\n", "guide.adoc", detect.ASCIIDOC),
        ("Just words.\n", "guide.asciidoc", detect.ASCIIDOC),
        # Markdown's name wins over anything its text looks like.
        (MANUAL, "notes.md", detect.MARKDOWN),
        # One sign is chance: a "<<x>>" in prose, or one "== x" line.
        ("Shift with <<x>> in C++.\n", "notes.txt", detect.TEXT),
        ("Notes\n\n== not much\n", "notes.txt", detect.TEXT),
        # reStructuredText: "::" literal blocks and field lists are not counted.
        (
            "Title\n=====\n\n:Author: Ada\n:Version: 1\n\nExample::\n\n    code\n",
            "index.txt",
            detect.TEXT,
        ),
        # An ASCII-armoured signature is not AsciiDoc, whatever ".asc" says elsewhere.
        ("-----BEGIN PGP SIGNATURE-----\n\nabc\n", "file.asc", detect.TEXT),
    ],
)
def test_detection(text: str, name: str, expected: str) -> None:
    assert detect.sniff(text.encode(), name=name) == expected


def test_two_kinds_of_signs_make_asciidoc() -> None:
    assert looks_like_asciidoc("[[top]]\nText\n\ninclude::part.adoc[]\n")
    assert not looks_like_asciidoc("[[top]]\nText only.\n")


@pytest.mark.parametrize(
    "source",
    [
        "= a" + " " * 60_000 + "b",
        "link:" * 20_000,
        "<<" + "a" * 60_000,
        "x::" * 20_000,
        "|===\n" + "|a" * 30_000 + "\n|===",
        "." * 60_000,
        "----\n" * 30_000,
    ],
)
def test_hostile_lines_take_linear_time(source: str) -> None:
    # Read in the worker's own process (no child's time limit): no regex may backtrack
    # over a long line. Generous bound: these take milliseconds.
    start = time.perf_counter()
    to_markdown(source)
    looks_like_asciidoc(source)
    assert time.perf_counter() - start < 5
