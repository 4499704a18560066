"""Clean-up of parsed elements: Unicode, broken lines, page furniture, guessed headings."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from es_rag.cleaning import (
    MAX_TITLE_CJK,
    MAX_TITLE_WORDS,
    clean,
    demote_sentences,
    is_page_number,
    join_broken_lines,
    merge_continuations,
    normalize_text,
    number_levels,
    numbered,
    remove_furniture,
)
from es_rag.parsing.common import paragraphs
from es_rag.types import Element, ElementKind

pytestmark = pytest.mark.unit

Box = tuple[tuple[float, float], ...]


def box(top: float, bottom: float) -> Box:
    """Corner points of a full-width box between two heights (fractions of the page)."""
    return ((0.1, top), (0.9, top), (0.9, bottom), (0.1, bottom))


TOP, MIDDLE, BOTTOM = box(0.02, 0.05), box(0.40, 0.50), box(0.95, 0.98)
BODY_WORDS = ["refund", "ledger", "invoice", "customer", "payment", "account", "balance", "audit"]


def texts(elements: Sequence[Element]) -> list[str]:
    return [el.text for el in elements]


def body(page: int, n: int = 0) -> str:
    """A body paragraph unique to its page (it differs in words, not only in digits)."""
    word = BODY_WORDS[(page * 3 + n) % len(BODY_WORDS)]
    return f"The {word} section on this page {'continues ' * (page + n)}with details."


# --- normalize_text ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("ﬁnance and ﬂow", "finance and flow"),  # ligatures
        ("ＡＢＣ１２３", "ABC123"),  # full-width Latin and digits
        ("a\u00a0b\u202fc", "a b c"),  # no-break spaces
        ("co\u00adop", "coop"),  # soft hyphen
        ("zero\u200bwidth\u200c\u200d\u2060joiners\ufeff", "zerowidthjoiners"),
        ("a   b\t\t c", "a b c"),
        ("  padded  ", "padded"),
        ("x \r\n  y", "x\ny"),  # CRLF, and spaces around line breaks
        ("para one\n\npara two", "para one\n\npara two"),  # paragraph breaks stay
        ("", ""),
        (" \u200b ", ""),
        ("ascii only, unchanged.", "ascii only, unchanged."),
    ],
)
def test_normalize_text(raw: str, expected: str) -> None:
    assert normalize_text(raw) == expected


def test_full_width_cjk_punctuation_is_kept() -> None:
    text = "你好，世界。真的！吗？「引号」：；"
    assert normalize_text(text) == text
    # NFKC still applies around it
    assert normalize_text("数据ＡＩ，模型ﬁ。") == "数据AI，模型fi。"


def test_ideographic_space_is_a_space() -> None:
    """U+3000 is a space, not punctuation: NFKC makes it " ", and runs collapse."""
    assert normalize_text("full\u3000\u3000width space") == "full width space"


# --- join_broken_lines ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("infor-\nmation", "information"),
        ("infor- \n  mation", "information"),
        ("infor- mation", "information"),  # Unstructured already joined the lines
        ("é-\ntat", "état"),
        ("pre- and post-war", "pre- and post-war"),
        ("pre- or post-processing", "pre- or post-processing"),
        ("Vor- und Nachteile", "Vor- und Nachteile"),
        ("well-\nKnown", "well- Known"),  # a capital after the break: not a hyphenation
        ("COVID-\n19 cases", "COVID- 19 cases"),
        ("处理\n完成", "处理完成"),
        ("处理 完成", "处理完成"),
        ("数据，\n处理", "数据，处理"),
        ("line one\nline two", "line one line two"),
        ("使用\nPython", "使用 Python"),  # CJK next to Latin keeps its space
        ("no breaks here", "no breaks here"),
    ],
)
def test_join_broken_lines(raw: str, expected: str) -> None:
    assert join_broken_lines(raw) == expected


# --- page numbers ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "3",
        "Page 3",
        "Page 3 of 10",
        "page 12 / 40",
        "p. 5",
        "- 4 -",
        "— 9 —",
        "(7)",
        "[8]",
        "iv",
        "XII",
        "Page iv",
        "3/10",
        "3 / 10",
        "第 3 页",
        "第3页 共10页",
        "Seite 2 von 9",
    ],
)
def test_page_numbers(text: str) -> None:
    assert is_page_number(text)


@pytest.mark.parametrize(
    "text", ["Introduction", "3 apples", "Page three", "Section 4.2", "2024-01-31", "ix."]
)
def test_not_page_numbers(text: str) -> None:
    assert not is_page_number(text)


def test_words_spelled_with_roman_numeral_letters_are_not_page_numbers() -> None:
    words = ["Civil", "Vivid", "Mild", "Did", "Lid", "Dim", "Civic", "Mimic"]
    assert [w for w in words if is_page_number(w)] == []


def test_a_heading_like_civil_is_not_removed_as_a_page_number() -> None:
    elements = [
        Element("title", "Civil", level=1, page=1),
        Element("text", "Civil procedure is described here.", page=1),
        Element("text", "More about courts.", page=1),
    ]
    assert texts(remove_furniture(elements))[0] == "Civil"


# --- remove_furniture ------------------------------------------------------------------------
def test_running_header_and_footer_by_coordinates() -> None:
    elements: list[Element] = []
    for p in range(1, 5):
        elements += [
            Element("text", "ACME Corp — Annual Report 2024", page=p, coordinates=TOP),
            Element("text", body(p), page=p, coordinates=MIDDLE),
            Element("text", body(p, 1), page=p, coordinates=MIDDLE),
            Element("text", f"Confidential · page {p} of 4", page=p, coordinates=BOTTOM),
        ]
    out = remove_furniture(elements)
    assert texts(out) == [t for p in range(1, 5) for t in (body(p), body(p, 1))]


def test_recurring_text_outside_the_margins_is_kept() -> None:
    """With coordinates, only the top and bottom bands hold furniture."""
    elements: list[Element] = []
    for p in range(1, 4):
        elements += [
            Element("text", body(p), page=p, coordinates=TOP),  # unique: kept
            Element("text", "Warning: do not skip this step", page=p, coordinates=MIDDLE),
            Element("text", body(p, 1), page=p, coordinates=MIDDLE),
        ]
    out = remove_furniture(elements)
    assert texts(out).count("Warning: do not skip this step") == 3
    assert len(out) == 9


def test_running_header_without_coordinates_uses_page_ends() -> None:
    elements: list[Element] = []
    for p in range(1, 5):
        elements += [
            Element("text", "Operations Manual", page=p),
            Element("text", body(p), page=p),
            Element("text", body(p, 1), page=p),
            Element("text", body(p, 2), page=p),
            Element("text", body(p, 3), page=p),
            Element("text", str(p), page=p),
        ]
    out = remove_furniture(elements)
    assert "Operations Manual" not in texts(out)
    assert not any(is_page_number(t) for t in texts(out))
    assert len(out) == 16
    # and without coordinates the middle of the page is never a candidate
    mid = [
        Element("text", "Operations Manual" if i == 3 else f"{body(p, i)}", page=p)
        for p in range(1, 4)
        for i in range(7)
    ]
    assert texts(remove_furniture(mid)).count("Operations Manual") == 3


def test_body_paragraph_at_the_top_of_each_page_is_kept() -> None:
    elements: list[Element] = []
    for p in range(1, 5):
        elements += [
            Element("text", body(p), page=p),  # first on its page, but different each time
            Element("text", body(p, 1), page=p),
            Element("text", body(p, 2), page=p),
        ]
    assert remove_furniture(elements) == elements


def test_heading_that_appears_on_one_of_five_pages_is_kept() -> None:
    elements: list[Element] = []
    for p in range(1, 6):
        if p == 3:
            elements.append(Element("title", "Introduction", level=1, page=p))
        elements += [Element("text", body(p, i), page=p) for i in range(4)]
    out = remove_furniture(elements)
    assert out == elements


def test_recurring_on_fewer_than_half_of_the_pages_is_kept() -> None:
    elements: list[Element] = []
    for p in range(1, 7):
        if p in (2, 5):  # 2 of 6 pages: below half
            elements.append(Element("text", "Draft", page=p))
        elements += [Element("text", body(p, i), page=p) for i in range(4)]
    assert texts(remove_furniture(elements)).count("Draft") == 2
    # on 3 of 6 pages (half) it is furniture
    elements = [
        el
        for p in range(1, 7)
        for el in ([Element("text", "Draft", page=p)] if p in (1, 3, 5) else [])
        + [Element("text", body(p, i), page=p) for i in range(4)]
    ]
    assert "Draft" not in texts(remove_furniture(elements))


def test_one_page_document_keeps_its_lines_but_drops_a_page_number() -> None:
    elements = [
        Element("title", "Memo", level=1, page=1),
        Element("text", "Short body.", page=1),
        Element("text", "- 1 -", page=1),
    ]
    assert texts(remove_furniture(elements)) == ["Memo", "Short body."]


def test_parser_labels() -> None:
    elements = [
        Element("header", "Draft for review", page=1),  # one guess, not recurring
        Element("text", body(1), page=1),
        Element("page_number", "Seite 1", page=1),
        Element("text", body(2), page=2),
        Element("footer", "Only on page two", page=2),
    ]
    out = remove_furniture(elements)
    assert [(el.kind, el.text) for el in out] == [
        ("text", "Draft for review"),
        ("text", body(1)),
        ("text", body(2)),
        ("text", "Only on page two"),
    ]


def test_docx_header_and_footer_parts_are_dropped() -> None:
    elements = [
        Element("header", "Company Ltd — internal"),
        Element("title", "Policy", level=1),
        Element("text", "Body without pages."),
        Element("footer", "Printed copies are uncontrolled"),
    ]
    assert texts(remove_furniture(elements)) == ["Policy", "Body without pages."]


def test_text_without_pages_is_untouched() -> None:
    elements = [Element("text", "Page 1"), Element("text", "3"), Element("text", "Body.")]
    assert remove_furniture(elements) == elements


def test_tables_and_code_are_never_furniture() -> None:
    elements: list[Element] = []
    for p in range(1, 4):
        elements += [
            Element("table", "Name Value", page=p, html="<table><tr><td>Name</td></tr></table>"),
            Element("code", "42", page=p),
            Element("text", body(p), page=p),
        ]
    assert remove_furniture(elements) == elements


def test_numbered_chapter_headings_are_not_a_running_header() -> None:
    """Each chapter starts a page with its own number: 'Chapter 1' ≠ 'Chapter 2'."""
    elements: list[Element] = []
    for p in range(1, 5):
        elements += [
            Element("title", f"Chapter {p}", level=1, page=p),
            *(Element("text", body(p, i), page=p) for i in range(4)),
        ]
    out = remove_furniture(elements)
    assert [el.text for el in out if el.kind == "title"] == [f"Chapter {p}" for p in range(1, 5)]


# --- demote_sentences ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Introduction", "title"),
        ("2.1 Scope and purpose", "title"),
        ("Refunds", "title"),
        ("数据处理流程", "title"),
        ("中" * MAX_TITLE_CJK, "title"),
        (" ".join(["word"] * MAX_TITLE_WORDS), "title"),
        ("This guessed heading is really a sentence.", "text"),
        # FAQ headings are questions and lead-ins end with a colon: both stay headings.
        ("What is RAG?", "title"),
        ("Before you start:", "title"),
        ("这是什么？", "title"),
        ("“A quoted sentence.”", "text"),
        ("这是一个完整的句子。", "text"),
        ("中" * (MAX_TITLE_CJK + 1), "text"),
        (" ".join(["word"] * (MAX_TITLE_WORDS + 1)), "text"),
    ],
)
def test_demote_sentences(text: str, kind: ElementKind) -> None:
    (out,) = demote_sentences([Element("title", text, level=2, page=4)])
    assert out.kind == kind
    assert out.text == text and out.page == 4
    assert out.level == (2 if kind == "title" else None)


def test_demote_leaves_other_kinds_alone() -> None:
    elements = [Element("text", "Short"), Element("list_item", "- An item.")]
    assert demote_sentences(elements) == elements


# --- merge_continuations -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("first", "second", "joined"),
    [
        ("The system logs the", "error and retries.", "The system logs the error and retries."),
        ("one, two,", "three and four.", "one, two, three and four."),
        ("inter-", "national trade.", "international trade."),
        ("数据处理", "完成了。", "数据处理完成了。"),
    ],
)
def test_mid_sentence_splits_are_merged(first: str, second: str, joined: str) -> None:
    out = merge_continuations(
        [Element("text", first, page=1, coordinates=BOTTOM), Element("text", second, page=2)]
    )
    assert len(out) == 1
    assert out[0].text == joined
    assert out[0].page == 1 and out[0].coordinates is None  # the box no longer fits


def test_chinese_split_after_a_comma_is_merged() -> None:
    """A Chinese sentence broken after '，' is mid-sentence, as English after ',' is."""
    out = merge_continuations([Element("text", "我们的数据，"), Element("text", "已经处理完成。")])
    assert texts(out) == ["我们的数据，已经处理完成。"]


def test_merging_chains() -> None:
    out = merge_continuations(
        [Element("text", "a long"), Element("text", "sentence split"), Element("text", "thrice.")]
    )
    assert texts(out) == ["a long sentence split thrice."]


@pytest.mark.parametrize(
    "elements",
    [
        [Element("text", "Ends with a full stop."), Element("text", "next starts lower")],
        [Element("text", "Ends with a question?"), Element("text", "lower")],
        [Element("text", "句子结束。"), Element("text", "下一句")],
        [Element("text", "Use the API"), Element("text", "Next Paragraph starts upper.")],
        [Element("text", "Body before"), Element("title", "heading", level=2)],
        [Element("title", "Heading", level=2), Element("text", "body lower")],
        [Element("text", "the list:"), Element("list_item", "- item")],
        [Element("text", "before a table"), Element("table", "a b", html="<table></table>")],
        [Element("text", "Version 2"), Element("text", "release notes.")],
    ],
)
def test_not_merged(elements: list[Element]) -> None:
    assert merge_continuations(elements) == elements


def test_not_merged_across_a_heading() -> None:
    elements = [
        Element("text", "a sentence that breaks"),
        Element("title", "Section 2", level=2),
        Element("text", "and continues after a heading."),
    ]
    assert merge_continuations(elements) == elements


# --- clean -----------------------------------------------------------------------------------
def test_clean_layout_document() -> None:
    elements: list[Element] = []
    for p in (1, 2, 3):
        elements.append(Element("header", "Quarterly Report", page=p, coordinates=TOP))
        if p == 1:
            elements.append(Element("title", "Overview of the ﬁscal year.", page=p))
            elements.append(Element("title", "Results", level=1, page=p))
        elements.append(Element("text", f"{body(p)} The infor-\nmation is", page=p))
        elements.append(Element("text", f"summarised for {BODY_WORDS[p]}.", page=p))
        elements.append(Element("page_number", f"{p}", page=p, coordinates=BOTTOM))
    elements.append(Element("text", "\u200b  ", page=3))  # nothing left after clean-up
    out = clean(elements, layout=True, guessed_titles=True)
    assert [(el.kind, el.text) for el in out] == [
        ("text", "Overview of the fiscal year."),
        ("title", "Results"),
        *(
            ("text", f"{body(p)} The information is summarised for {BODY_WORDS[p]}.")
            for p in (1, 2, 3)
        ),
    ]


def test_clean_without_layout_keeps_lines_and_titles() -> None:
    elements = [
        Element("title", "A heading that ends with a period.", level=1),
        Element("text", "first line\nsecond line"),
        Element("text", "lower continuation"),
        Element("table", "", html="<table><tr><td>x</td></tr></table>"),  # kept for its html
        Element("text", "\u00ad"),
    ]
    out = clean(elements)
    assert [(el.kind, el.text) for el in out] == [
        ("title", "A heading that ends with a period."),
        ("text", "first line\nsecond line"),
        ("text", "lower continuation"),
        ("table", ""),
    ]


def test_clean_leaves_code_and_table_text_unjoined() -> None:
    code = "def f(x):\n    return x-\n    1"
    out = clean([Element("code", code, page=1), Element("text", "Fine.", page=1)], layout=True)
    assert out[0].text == normalize_text(code, code=True) == code


def test_clean_empty() -> None:
    assert clean([]) == []
    assert clean([Element("text", "  ")], layout=True, guessed_titles=True) == []


def test_code_keeps_its_indentation_and_loses_only_the_common_margin() -> None:
    raw = "\n    def f(x):  \n    \tif x:\n            return 1\n\n"
    assert normalize_text(raw, code=True) == "def f(x):\n    if x:\n        return 1"
    # prose, by contrast, is one space between words and no margins
    assert normalize_text("  two   spaces \n  next") == "two spaces\nnext"


def test_a_bare_number_is_a_page_number_only_on_laid_out_pages() -> None:
    slide = [Element("title", "Growth", page=1), Element("text", "40", page=1)]
    assert [el.text for el in clean(slide)] == ["Growth", "40"]  # a slide's figure stays
    pdf = [
        Element("text", "Growth was strong this year.", page=1),
        Element("text", "40", page=1),
    ]
    assert [el.text for el in clean(pdf, layout=True)] == ["Growth was strong this year."]


# --- plain-text paragraphs (es_rag.parsing.common.paragraphs) ------------------------------
def pairs(text: str) -> list[tuple[str, str]]:
    return [(p.text, p.kind) for p in paragraphs(text)]


def test_paragraphs_keep_inline_asterisks_and_bullets_whole() -> None:
    text = "Title\n\nSpeed = d * t\n\nFootnote* applies\n\nA 10 N·m torque is plenty here.\n"
    assert pairs(text) == [
        ("Title", "text"),
        ("Speed = d * t", "text"),
        ("Footnote* applies", "text"),
        ("A 10 N·m torque is plenty here.", "text"),
    ]


def test_paragraphs_join_wrapped_lines_and_keep_short_lines_apart() -> None:
    text = (
        "Apache License\nVersion 2.0, January 2004\n\n"
        "A paragraph wrapped at seventy columns, as old text files are,\n"
        "goes on here on its second line.\n"
    )
    assert pairs(text) == [
        ("Apache License", "text"),
        ("Version 2.0, January 2004", "text"),
        (
            "A paragraph wrapped at seventy columns, as old text files are, goes on here on its "
            "second line.",
            "text",
        ),
    ]


def test_paragraphs_keep_list_items_apart_with_their_wrapped_lines() -> None:
    text = "You will need these two things:\n- a key\n- a token that you\n  keep secret\n\nEnd.\n"
    assert pairs(text) == [
        ("You will need these two things:", "text"),
        ("- a key", "text"),
        ("- a token that you keep secret", "text"),
        ("End.", "text"),
    ]
    # a dash that opens a wrapped line of prose is not an item
    prose = (
        "The limit is high enough for most of the files we see, and\n- as a rule - it holds.\n\nX."
    )
    assert pairs(prose)[0] == (
        "The limit is high enough for most of the files we see, and - as a rule - it holds.",
        "text",
    )


def test_paragraphs_keep_an_indented_listing_as_code() -> None:
    text = "Run it like this:\n\n    for leg in legs:\n        print(leg)\n\nDone, at last.\n"
    assert pairs(text) == [
        ("Run it like this:", "text"),
        ("for leg in legs:\n    print(leg)", "code"),
        ("Done, at last.", "text"),
    ]
    # an indented paragraph of prose is prose
    quote = (
        "Intro.\n\n    Four score and seven years ago our fathers\n    brought forth a nation.\n"
    )
    assert pairs(quote)[1] == (
        "Four score and seven years ago our fathers brought forth a nation.",
        "text",
    )


def test_paragraphs_without_blank_lines_are_one_a_line() -> None:
    text = "\n".join(f"Line {i} of a log-like file with many words" for i in range(30))
    assert len(paragraphs(text)) == 30


def test_paragraphs_read_underlined_headings() -> None:
    text = (
        "Reporting Bugs\n==============\n\nRead this first, before you write anything at all.\n\n"
        "Where to report\n---------------\nUse the tracker of the distribution, please.\n"
    )
    assert [(p.text, p.kind, p.level) for p in paragraphs(text)] == [
        ("Reporting Bugs", "title", 1),
        ("Read this first, before you write anything at all.", "text", None),
        ("Where to report", "title", 2),
        ("Use the tracker of the distribution, please.", "text", None),
    ]


def test_a_list_whose_items_end_like_statements_is_not_code() -> None:
    text = (
        "Include these:\n\n* the exact version of GCC;\n* the system type;\n"
        "* the complete command line that triggers the bug;\n\nThanks.\n"
    )
    assert ("* the system type;", "text") in pairs(text)


def test_paragraphs_join_a_word_hyphenated_at_a_line_end() -> None:
    text = (
        "Intro.\n\nWhile you wait, I in-\nvite you to read the archive of this well-\nKnown list.\n"
    )
    assert pairs(text)[1] == (
        "While you wait, I invite you to read the archive of this well- Known list.",
        "text",
    )


def test_a_base64_line_is_never_a_guessed_heading() -> None:
    # the last lines of a PGP signature in a mail body, which the text rules call a title
    els = [Element("title", "Xav65S0P+Px4knaQcCIeCamQJ7uGcsw+CqMpNbxWYaTYmjAfkbKH1EuLC2VRwdmD")]
    assert [e.kind for e in clean(els, guessed_titles=True)] == ["text"]
    assert [e.kind for e in clean([Element("title", "Your host: Keith")], guessed_titles=True)] == [
        "title"
    ]


def test_paragraphs_leave_out_a_clear_signed_message_armour() -> None:
    text = (
        "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA1\n\nThe newsletter is back after a long "
        "break, with its archive.\n\n-----BEGIN PGP SIGNATURE-----\nVersion: PGP 6.5.8\n\n"
        "iQA/AwUBOuB5Xav65S0P+Px4knaQcCIeCamQJ7uGcsw+CqMpNbxWYaTYmjAfkbKH1EuL\n=8hLB\n"
        "-----END PGP SIGNATURE-----\n\nSigned off.\n"
    )
    assert pairs(text) == [
        ("The newsletter is back after a long break, with its archive.", "text"),
        ("Signed off.", "text"),
    ]


def _levels(lines: Sequence[tuple[ElementKind, str]]) -> list[tuple[int | None, str]]:
    elements = [Element(kind=kind, text=text) for kind, text in lines]
    return [(e.level, e.text) for e in number_levels(elements) if e.kind == "title"]


def test_numbered_headings_take_their_level_from_their_number() -> None:
    """Debian Reference as plain text: without levels every heading replaced the last."""
    body: tuple[ElementKind, str] = ("text", "Some words of the section.")
    assert _levels(
        [("title", "Debian Reference"), body, ("title", "Chapter 3. The system initialization"),
         body, ("title", "3.2. Systemd init"), body, ("title", "3.2.1. The hostname"), body,
         ("title", "Note"), body, ("title", "3.3. The kernel message"), body,
         ("title", "Appendix A. Appendix"), ("title", "A.1. The Debian maze"), body,
         ("title", "4 Results"), body]
    ) == [
        (1, "Debian Reference"),  # before any number: at the top
        (1, "Chapter 3. The system initialization"),
        (2, "3.2. Systemd init"),
        (3, "3.2.1. The hostname"),
        (4, "Note"),  # under the last numbered heading
        (2, "3.3. The kernel message"),
        (1, "Appendix A. Appendix"),
        (2, "A.1. The Debian maze"),
        (1, "4 Results"),
    ]  # fmt: skip


def test_numbers_that_are_no_hierarchy_leave_the_levels_alone() -> None:
    # One sub-section is no scheme; a year, "A new start" and a list are not numbers.
    lines: list[tuple[ElementKind, str]] = [
        ("title", "2023 Annual report"), ("title", "A new start"), ("title", "1. Install"),
        ("title", "2. Configure"), ("title", "2.1 Options"), ("title", "Summary"),
    ]  # fmt: skip
    assert {level for level, _ in _levels(lines)} == {None}
    assert [numbered(text) for _, text in lines] == [False, False, True, True, True, False]
    # Declared levels (a PDF's outline, a DOCX's styles) are never changed.
    declared = [Element(kind="title", text=f"{n}.1 Part", level=5) for n in range(3)]
    assert [e.level for e in number_levels(declared)] == [5, 5, 5]
