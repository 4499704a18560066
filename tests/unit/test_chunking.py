from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass, field

import pytest

from es_rag.chunking import chunk_elements, count_words, table_rows, text_elements
from es_rag.chunking import chunk_text as chunk_all
from es_rag.types import Chunk, Element


def chunk_text(text: str, **kwargs: object) -> list[Chunk]:
    """The searchable children only (parents are tested separately)."""
    return [c for c in chunk_all(text, **kwargs) if c.chunk_type == "child"]  # type: ignore[arg-type]


pytestmark = pytest.mark.unit

DOC = """# Payments guide

Intro about payments. It has two sentences.

## Refunds

### Errors

When a refund fails the system logs ERR_REFUND_1042.

```
# a comment, not a heading
retry --all
```

## Timing

Money is returned within five working days.
"""


def test_title_paths_and_headers() -> None:
    chunks = chunk_text(DOC, title="Payments guide", size=200, overlap=20)
    paths = [c.title_path for c in chunks]
    assert paths == [
        ("Payments guide",),
        ("Payments guide", "Refunds", "Errors"),
        ("Payments guide", "Timing"),
    ]
    assert chunks[1].context_header == "Payments guide > Refunds > Errors"
    assert [c.ordinal for c in chunks] == [0, 1, 2]


def test_code_block_kept_whole_and_not_a_heading() -> None:
    chunks = chunk_text(DOC, title="Payments guide", size=8, overlap=2)
    code = [c for c in chunks if "retry --all" in c.content]
    assert len(code) == 1
    assert "# a comment, not a heading" in code[0].content
    assert "```" in code[0].content
    assert all("a comment" not in " ".join(c.title_path) for c in chunks)


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=\.)\s+", text) if s]


def test_size_and_overlap_with_nothing_lost() -> None:
    body = " ".join(f"Sentence number {i} has six words." for i in range(100))
    chunks = chunk_text(body, title="T", size=60, overlap=12)
    assert len(chunks) > 5
    for c in chunks:
        assert count_words(c.content) <= 60
    # every sentence appears, in order; consecutive chunks share about `overlap` words
    seen = []
    for c in chunks:
        for s in _sentences(c.content):
            if not seen or s not in seen[-3:]:
                seen.append(s)
    assert seen == _sentences(body)
    for a, b in itertools.pairwise(chunks):
        shared = set(_sentences(a.content)) & set(_sentences(b.content))
        words = sum(count_words(s) for s in shared)
        assert 0 < words <= 12


def test_chinese_sentences_counted_by_character() -> None:
    text = "机器学习是人工智能的一个分支。" * 20
    chunks = chunk_text(text, title="中文", size=50, overlap=10)
    assert len(chunks) > 1
    assert all(count_words(c.content) <= 50 for c in chunks)
    assert all(c.content.endswith("。") for c in chunks)


def test_plain_text_and_setext_headings() -> None:
    chunks = chunk_text("Overview\n========\n\nBody text here.\n", title="doc", size=50, overlap=5)
    assert chunks[0].title_path == ("doc", "Overview")
    assert chunks[0].content == "Body text here."


def test_empty_text_gives_no_chunks() -> None:
    assert chunk_text("   \n\n", title="x") == []


def test_parents_are_sections_and_children_know_them() -> None:
    chunks = chunk_all(DOC, title="Payments guide", size=8, overlap=2, parent_size=20)
    parents = {c.ordinal: c for c in chunks if c.chunk_type == "parent"}
    children = [c for c in chunks if c.chunk_type == "child"]
    assert [c.ordinal for c in children] == list(range(len(children)))
    for child in children:
        parent = parents[child.parent_ordinal]  # type: ignore[index]
        assert parent.title_path == child.title_path
        # the child's text lies inside its parent's text (sentences are not rewritten)
        for sentence in child.content.split("\n\n"):
            assert sentence.split(". ")[0] in parent.content
    # no parent exceeds the cap unless a single unit does
    assert all(count_words(p.content) <= 20 or "```" in p.content for p in parents.values())
    # every section has at least one parent
    assert {p.title_path for p in parents.values()} == {c.title_path for c in children}


def test_parent_split_when_section_is_long() -> None:
    body = " ".join(f"Sentence {i} is here." for i in range(50))
    chunks = chunk_all(body, title="T", size=20, overlap=4, parent_size=60)
    parents = [c for c in chunks if c.chunk_type == "parent"]
    assert len(parents) > 1
    joined = " ".join(p.content for p in parents)
    assert joined == body  # parents partition the section: nothing lost, nothing repeated


# --- chunk_elements: structure ---------------------------------------------------------------
def children(chunks: list[Chunk]) -> list[Chunk]:
    return [c for c in chunks if c.chunk_type == "child"]


def test_title_paths_follow_heading_levels() -> None:
    elements = [
        Element("text", "Preamble."),
        Element("title", "Chapter", level=1),
        Element("text", "Chapter intro."),
        Element("title", "Section", level=2),
        Element("title", "Detail", level=3),
        Element("text", "Deep text."),
        Element("title", "Other section", level=2),
        Element("text", "Sibling text."),
        Element("title", "Appendix", level=1),
        Element("text", "Back at the top."),
    ]
    chunks = children(chunk_elements(elements, title="Manual"))
    assert [(c.title_path, c.content) for c in chunks] == [
        (("Manual",), "Preamble."),
        (("Manual", "Chapter"), "Chapter intro."),
        (("Manual", "Chapter", "Section", "Detail"), "Deep text."),
        (("Manual", "Chapter", "Other section"), "Sibling text."),
        (("Manual", "Appendix"), "Back at the top."),
    ]
    assert chunks[2].context_header == "Manual > Chapter > Section > Detail"


def test_heading_repeating_the_document_title_is_not_a_section() -> None:
    elements = [
        Element("title", "  Payments   Guide ", level=1),
        Element("text", "Intro."),
        Element("title", "Refunds", level=2),
        Element("text", "Refund text."),
    ]
    chunks = children(chunk_elements(elements, title="payments guide"))
    assert [c.title_path for c in chunks] == [
        ("payments guide",),
        ("payments guide", "Refunds"),
    ]
    assert all("Payments" not in c.content for c in chunks)


def test_title_repeated_after_opening_text_is_not_a_section_either() -> None:
    # A mail: the sender line first, then the subject again at the top of the body.
    elements = [
        Element("text", "From: alice@example.com; To: bob@example.com."),
        Element("title", "Refund window extended"),
        Element("text", "From February the window is 45 days."),
    ]
    chunks = children(chunk_elements(elements, title="Refund window extended"))
    assert [c.title_path for c in chunks] == [("Refund window extended",)]


def test_heading_with_no_body_is_kept_as_text() -> None:
    elements = [
        Element("title", "Refunds", level=1),
        Element("text", "Refunds take five days."),
        Element("title", "Kind regards", level=2),  # a sign-off the parser took for a heading
    ]
    chunks = children(chunk_elements(elements, title="Letter"))
    assert len(chunks) == 1
    assert chunks[0].title_path == ("Letter", "Refunds")
    assert chunks[0].content == "Refunds take five days.\n\nKind regards"


def test_document_of_only_headings_loses_nothing() -> None:
    elements = [
        Element("title", "One", level=1),
        Element("title", "Two", level=2),
        Element("title", "Three", level=1),
    ]
    chunks = chunk_elements(elements, title="Outline")
    assert [c.content for c in children(chunks)] == ["One\n\nTwo\n\nThree"]
    assert children(chunks)[0].title_path == ("Outline",)


def test_heading_over_only_subheadings_with_body_is_real() -> None:
    elements = [
        Element("title", "Part", level=1),
        Element("title", "Sub", level=2),
        Element("text", "Body."),
    ]
    (chunk,) = children(chunk_elements(elements, title="D"))
    assert chunk.title_path == ("D", "Part", "Sub")
    assert chunk.content == "Body."


def test_headings_of_unknown_level_are_flat() -> None:
    elements = [
        Element("title", "First"),
        Element("text", "a."),
        Element("title", "Second"),
        Element("text", "b."),
    ]
    chunks = children(chunk_elements(elements, title="D"))
    assert [c.title_path for c in chunks] == [("D", "First"), ("D", "Second")]


def test_empty_elements_give_no_chunks() -> None:
    assert chunk_elements([], title="D") == []
    assert chunk_elements([Element("text", "  ")], title="D") == []


def test_overlap_must_be_smaller_than_size() -> None:
    with pytest.raises(ValueError):
        chunk_elements([Element("text", "x.")], title="D", size=10, overlap=10)


# --- tables --------------------------------------------------------------------------------
def table_html(rows: list[list[str]], header: list[str] | None = None) -> str:
    head = "<tr>" + "".join(f"<th>{c}</th>" for c in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table>{head}{body}</table>"


def test_table_kept_whole_when_it_fits() -> None:
    html = table_html([["Alice", "Support"], ["Bob", "Finance"]], ["Name", "Role"])
    elements = [
        Element("text", "Before the table."),
        Element("table", "Name Role Alice Support Bob Finance", html=html, page=2),
    ]
    chunks = children(chunk_elements(elements, title="D", size=50, overlap=5))
    assert len(chunks) == 1
    assert chunks[0].content == (
        "Before the table.\n\n"
        "| Name | Role |\n| --- | --- |\n| Alice | Support |\n| Bob | Finance |"
    )
    assert chunks[0].element_types == ("table", "text")
    assert (chunks[0].page_start, chunks[0].page_end) == (2, 2)


def test_table_with_one_row_and_without_html() -> None:
    one = Element("table", "Only", html=table_html([["Only", "row"]]))
    assert children(chunk_elements([one], title="D"))[0].content == "| Only | row |\n| --- | --- |"
    flat = Element("table", "a  b\nc")
    assert children(chunk_elements([flat], title="D"))[0].content == "| a b c |\n| --- |"


BIG_ROWS = [[f"item {i}", f"value {i} units"] for i in range(15)]
BIG_TABLE = Element("table", "...", html=table_html(BIG_ROWS, ["Name", "Value"]), page=7)


@pytest.mark.parametrize(
    ("caption", "shown"),
    [
        (None, None),
        (Element("text", "Table 2: Measured values"), "Table 2: Measured values"),
        (Element("text", "Tab. 3 Measured   values"), "Tab. 3 Measured values"),
        (Element("text", "表 4 测量值"), "表 4 测量值"),
        (Element("caption", "Measured values by item"), "Measured values by item"),
    ],
)
def test_big_table_split_by_rows_repeating_caption_and_header(
    caption: Element | None, shown: str | None
) -> None:
    elements = [caption, BIG_TABLE] if caption else [BIG_TABLE]
    chunks = children(chunk_elements(elements, title="D", size=30, overlap=5, parent_size=400))
    assert len(chunks) > 2
    seen: list[str] = []
    for chunk in chunks:
        lines = chunk.content.split("\n")
        head = [shown] if shown else []
        assert lines[: len(head) + 2] == [*head, "| Name | Value |", "| --- | --- |"]
        body = lines[len(head) + 2 :]
        assert body, "a part without rows"
        for line in body:
            assert re.fullmatch(r"\| item \d+ \| value \d+ units \|", line), line
        seen += body
        assert count_words(chunk.content) <= 30
        assert chunk.element_types == ("table",)
        assert (chunk.page_start, chunk.page_end) == (7, 7)
    assert seen == [f"| item {i} | value {i} units |" for i in range(15)]  # none cut or lost


def test_text_not_starting_like_a_caption_is_not_repeated() -> None:
    elements = [Element("text", "The values follow."), BIG_TABLE]
    chunks = children(chunk_elements(elements, title="D", size=30, overlap=5, parent_size=400))
    assert sum("The values follow." in c.content for c in chunks) == 1


def test_single_row_bigger_than_a_child_is_not_cut() -> None:
    row = " ".join(f"w{i}" for i in range(40))
    table = Element("table", "...", html=table_html([[row]], ["Header"]))
    chunks = children(chunk_elements([table], title="D", size=10, overlap=2))
    assert [c.content for c in chunks] == [f"| Header |\n| --- |\n| {row} |"]


def test_caption_of_an_empty_table_is_not_lost() -> None:
    elements = [
        Element("text", "Table 1: Results of the survey"),
        Element("table", "", html="<table></table>"),  # a table the parser could not read
        Element("text", "After the table."),
    ]
    content = "\n\n".join(c.content for c in children(chunk_elements(elements, title="D")))
    assert "Table 1: Results of the survey" in content


# --- code ------------------------------------------------------------------------------------
def test_code_block_fenced_and_whole_even_when_longer_than_a_child() -> None:
    code = "\n".join(f"step_{i} = run({i})" for i in range(10))
    elements = [Element("text", "Run this."), Element("code", code), Element("text", "Done.")]
    chunks = children(chunk_elements(elements, title="D", size=8, overlap=2, parent_size=100))
    blocks = [c for c in chunks if "step_" in c.content]
    assert len(blocks) == 1
    assert blocks[0].content == f"```\n{code}\n```"
    assert blocks[0].element_types == ("code",)


def test_code_longer_than_a_parent_is_split_between_lines() -> None:
    lines = [f"line_{i} = compute({i}, flag=True)" for i in range(30)]
    chunks = children(
        chunk_elements(
            [Element("code", "\n".join(lines))], title="D", size=10, overlap=2, parent_size=40
        )
    )
    assert len(chunks) > 1
    rebuilt: list[str] = []
    for chunk in chunks:
        assert chunk.content.startswith("```\n") and chunk.content.endswith("\n```")
        assert count_words(chunk.content) <= 40
        rebuilt += chunk.content.split("\n")[1:-1]
    assert rebuilt == lines


# --- overlap -----------------------------------------------------------------------------------
def test_overlap_repeats_whole_sentences_only() -> None:
    text = " ".join(f"Sentence {i} has exactly six words." for i in range(12))
    chunks = children(chunk_elements([Element("text", text)], title="D", size=20, overlap=7))
    sentences = [f"Sentence {i} has exactly six words." for i in range(12)]
    for a, b in itertools.pairwise(chunks):
        sa, sb = _sentences(a.content), _sentences(b.content)
        assert all(s in sentences for s in sa + sb)  # no sentence cut
        shared = [s for s in sa if s in sb]
        assert shared == sb[: len(shared)] == sa[len(sa) - len(shared) :]
        assert len(shared) == 1  # 6 words fit in an overlap of 7, 12 would not


def test_overlap_never_repeats_a_table_or_code() -> None:
    small = Element("table", "...", html=table_html([["a1", "b1"]], ["A", "B"]))
    elements = [
        Element("text", "First point here. Second point here."),
        small,
        Element("code", "make build"),
        Element("text", "Third point here. Fourth point here."),
    ]
    chunks = children(chunk_elements(elements, title="D", size=12, overlap=6))
    joined = [c.content for c in chunks]
    assert sum("| a1 | b1 |" in c for c in joined) == 1
    assert sum("make build" in c for c in joined) == 1


def test_no_child_is_only_overlap() -> None:
    """A child must bring something new; repeating the overlap alone duplicates text."""
    elements = [
        Element("text", "One two three. Four five six."),
        Element("table", "...", html=table_html([["a"], ["b"]])),
    ]
    chunks = children(chunk_elements(elements, title="D", size=8, overlap=4))
    contents = [c.content for c in chunks]
    assert contents == ["One two three. Four five six.", "| a |\n| --- |\n| b |"]


# --- sizes -------------------------------------------------------------------------------------
def test_max_tokens_caps_child_plus_header() -> None:
    def tokens(text: str) -> int:  # a stand-in subword tokenizer: two tokens a word
        return 2 * count_words(text)

    text = " ".join(f"Point {i} is a short remark." for i in range(30))
    elements = [Element("title", "A rather long section heading here", level=1)]
    elements.append(Element("text", text))
    free = children(chunk_elements(elements, title="Doc", size=60, overlap=0, count_tokens=tokens))
    capped = children(
        chunk_elements(
            elements, title="Doc", size=60, overlap=0, count_tokens=tokens, max_tokens=50
        )
    )
    assert max(tokens(c.content) for c in free) > 40  # without the cap children are bigger
    assert len(capped) > len(free)
    for chunk in capped:
        assert tokens(f"{chunk.context_header}\n{chunk.content}") <= 50


def test_code_block_stays_whole_past_max_tokens_until_a_parent() -> None:
    """A code block is never cut to fit the model's input (the issue: never cut in the
    middle); only a block longer than a whole parent is split, and then between lines."""
    lines = [f"x{i} = f({i})" for i in range(40)]
    whole = children(
        chunk_elements(
            [Element("code", "\n".join(lines))],
            title="D",
            size=50,
            overlap=5,
            parent_size=800,
            max_tokens=60,
        )
    )
    assert len(whole) == 1
    assert whole[0].content.split("\n")[1:-1] == lines
    split = children(
        chunk_elements(
            [Element("code", "\n".join(lines))], title="D", size=50, overlap=5, parent_size=60
        )
    )
    assert len(split) > 1
    assert [line for c in split for line in c.content.split("\n")[1:-1]] == lines
    assert all(c.content.startswith("```\n") and c.content.endswith("\n```") for c in split)


def test_pages_and_element_types() -> None:
    elements = [
        Element("text", "Alpha one. Beta two.", page=1),
        Element("list_item", "Gamma three.", page=2),
        Element("text", "Delta four.", page=3),
        Element("title", "Next", level=1, page=3),
        Element("text", "Epsilon five.", page=4),
        Element("text", "No page here."),
    ]
    chunks = children(chunk_elements(elements, title="D", size=7, overlap=0))
    assert [(c.content, c.page_start, c.page_end, c.element_types) for c in chunks] == [
        ("Alpha one. Beta two.\n\n- Gamma three.", 1, 2, ("list_item", "text")),
        ("Delta four.", 3, 3, ("text",)),
        ("Epsilon five.\n\nNo page here.", 4, 4, ("text",)),
    ]


def test_chinese_sentence_boundaries() -> None:
    sentences = ["数据处理很重要。", "为什么？", "因为质量！", "第一；", "第二。"] * 6
    text = "".join(sentences)
    chunks = children(chunk_elements([Element("text", text)], title="中文", size=12, overlap=0))
    assert len(chunks) > 3
    rebuilt = "".join(c.content for c in chunks)
    assert rebuilt == text
    for chunk in chunks:
        assert chunk.content[-1] in "。！？；"
        assert count_words(chunk.content) <= 12


def test_chinese_closing_quote_stays_with_its_sentence() -> None:
    text = "他说：“今天完成。”然后离开了。"
    chunks = children(chunk_elements([Element("text", text)], title="D", size=8, overlap=0))
    assert all(not c.content.startswith("”") for c in chunks), [c.content for c in chunks]


def test_over_long_sentence_split_by_words_within_size() -> None:
    words = [f"w{i}" for i in range(53)]
    sentence = " ".join(words) + "."
    chunks = children(chunk_elements([Element("text", sentence)], title="D", size=10, overlap=3))
    assert len(chunks) >= 6
    assert all(count_words(c.content) <= 10 for c in chunks)
    assert " ".join(c.content for c in chunks) == sentence  # nothing lost or repeated


def test_over_long_chinese_sentence_split_by_characters() -> None:
    sentence = "机器学习模型需要大量高质量的数据来训练" * 3 + "。"
    chunks = children(chunk_elements([Element("text", sentence)], title="D", size=10, overlap=0))
    assert all(count_words(c.content) <= 10 for c in chunks)
    assert "".join(c.content for c in chunks) == sentence


def test_splitting_a_long_mixed_sentence_does_not_change_its_text() -> None:
    sentence = "我们使用Python处理数据" * 6 + "。"
    chunks = children(chunk_elements([Element("text", sentence)], title="D", size=10, overlap=0))
    assert all(c.content in sentence for c in chunks), [c.content for c in chunks]


# --- text_elements ---------------------------------------------------------------------------
MARKDOWN = """Guide
=====

Intro line one
continues here.

Setup
-----

- first item
- second item
  wraps onto two lines
1. numbered
2) also numbered

| Name | Age |
|------|----:|
| Ann  | 30  |

```python
# not a heading
def f():
    return 1
```

~~~
tilde fence
~~~

## Closed ATX ##

#hashtag is text
"""


def test_text_elements_reads_markdown() -> None:
    out = text_elements(MARKDOWN)
    assert [(e.kind, e.text, e.level) for e in out if e.kind != "table"] == [
        ("title", "Guide", 1),
        ("text", "Intro line one\ncontinues here.", None),
        ("title", "Setup", 2),
        ("list_item", "- first item", None),
        ("list_item", "- second item\nwraps onto two lines", None),
        ("list_item", "1. numbered", None),
        ("list_item", "2) also numbered", None),
        ("code", "# not a heading\ndef f():\n    return 1", None),
        ("code", "tilde fence", None),
        ("title", "Closed ATX", 2),
        ("text", "#hashtag is text", None),
    ]
    (table,) = [e for e in out if e.kind == "table"]
    assert table_rows(table) == [["Name", "Age"], ["Ann", "30"]]
    assert out.index(table) == 7  # in reading order, after the list


def test_text_elements_table_between_paragraphs() -> None:
    out = text_elements("Before\n| a | b |\n|---|---|\n| 1 | 2 |\n\nAfter")
    assert [e.kind for e in out] == ["text", "table", "text"]
    assert table_rows(out[1]) == [["a", "b"], ["1", "2"]]
    # Pipe rows without a delimiter row are a paragraph, as GFM reads them.
    assert [e.kind for e in text_elements("| a | b |\n| 1 | 2 |")] == ["text"]


def test_text_elements_read_what_line_patterns_missed() -> None:
    """Block quotes, indented code, nested lists and lazy lines, as CommonMark reads them."""
    out = text_elements(
        "> # Quoted heading\n> text in a quote\n\n"
        "    indented code\n    # not a heading\n\n"
        "- a\n  - b\n    1. c\n- d\n\n  second paragraph of d\n\n"
        "```\n- not a list\n```\n"
    )
    assert [(e.kind, e.text) for e in out] == [
        ("text", "Quoted heading"),  # a quoted heading opens no section
        ("text", "text in a quote"),
        ("code", "indented code\n# not a heading"),
        ("list_item", "- a"),
        ("list_item", "  - b"),
        ("list_item", "    1. c"),
        ("list_item", "- d\nsecond paragraph of d"),
        ("code", "- not a list"),
    ]


def test_text_elements_unterminated_fence_and_crlf() -> None:
    out = text_elements("Intro\r\n\r\n```\r\ncode line\r\n# still code")
    assert [(e.kind, e.text) for e in out] == [
        ("text", "Intro"),
        ("code", "code line\n# still code"),
    ]


def test_text_elements_escaped_pipe_in_a_cell() -> None:
    (table,) = text_elements("| Op | Meaning |\n|---|---|\n| a \\| b | either |")
    assert table_rows(table)[1][0] in ("a | b", "a \\| b")
    (chunk,) = children(chunk_elements([table], title="D"))
    assert "| a \\| b | either |" in chunk.content.split("\n")


def test_text_elements_thematic_break_is_not_text() -> None:
    out = text_elements("First part.\n\n---\n\nSecond part.")
    assert [(e.kind, e.text) for e in out] == [("text", "First part."), ("text", "Second part.")]


def test_text_elements_list_item_is_not_a_setext_heading() -> None:
    out = text_elements("- an item\n---\n\nText.")
    assert all(e.kind != "title" for e in out), out


# --- property: nothing lost, nothing repeated but the overlap ----------------------------------
_ID = re.compile(r"(?<![A-Za-z0-9])([srkh]\d+)(?![0-9])")
_CJK_WORDS = "数据模型检索文档系统用户质量"


@dataclass
class _Doc:
    elements: list[Element] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # ids of sentences, rows, code lines
    sentences: list[str] = field(default_factory=list)
    headings: list[str] = field(default_factory=list)


def _random_document(rng: random.Random) -> _Doc:
    doc = _Doc()
    counter = itertools.count(1)

    def sentence(chinese: bool) -> str:
        n = next(counter)
        doc.order.append(f"s{n}")
        if chinese:
            body = "".join(rng.choice(_CJK_WORDS) for _ in range(rng.randint(2, 8)))
            text = f"第s{n}句{body}{rng.choice('。！？；')}"
        else:
            words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(5))
            text = f"Sentence s{n} {words[: rng.randint(5, len(words))].strip()}."
        doc.sentences.append(text)
        return text

    for _ in range(rng.randint(1, 25)):
        roll = rng.random()
        if roll < 0.15:
            heading = f"Heading h{next(counter)}"
            doc.headings.append(heading)
            doc.elements.append(Element("title", heading, level=rng.choice([1, 2, 3, None])))
        elif roll < 0.55:
            chinese = rng.random() < 0.3
            parts = [sentence(chinese) for _ in range(rng.randint(1, 5))]
            doc.elements.append(Element("text", ("" if chinese else " ").join(parts)))
        elif roll < 0.65:
            doc.elements.append(Element("list_item", f"- {sentence(False)}"))
        elif roll < 0.8:
            if rng.random() < 0.5:
                doc.elements.append(Element("text", f"Table {rng.randint(1, 9)}: figures"))
            rows = []
            for _ in range(rng.randint(1, 8)):
                rows.append([f"r{next(counter)}", "value"])
                doc.order.append(rows[-1][0])
            doc.elements.append(Element("table", "...", html=table_html(rows, ["Key", "Value"])))
        else:
            lines = []
            for _ in range(rng.randint(1, 12)):
                lines.append(f"k{next(counter)} = call()")
                doc.order.append(lines[-1].split()[0])
            doc.elements.append(Element("code", "\n".join(lines)))
    return doc


def _overlap(previous: list[str], ids: list[str]) -> int:
    """How many leading ids of a child repeat the end of the previous child (ids are unique)."""
    for k in range(min(len(previous), len(ids)), 0, -1):
        if previous[-k:] == ids[:k]:
            return k
    return 0


@pytest.mark.parametrize("seed", range(40))
def test_random_documents_lose_and_repeat_nothing(seed: int) -> None:
    rng = random.Random(seed)
    doc = _random_document(rng)
    size = rng.randint(20, 60)
    overlap = rng.randint(0, size // 3)
    parent_size = rng.randint(size, 4 * size)
    chunks = children(
        chunk_elements(
            doc.elements, title="Doc", size=size, overlap=overlap, parent_size=parent_size
        )
    )
    contents = [c.content for c in chunks]
    for sentence in doc.sentences:
        assert any(sentence in c for c in contents), f"lost: {sentence!r}"
    for heading in doc.headings:  # a section's path, or text when it heads nothing
        assert any(heading in c.title_path or heading in c.content for c in chunks), heading
    rebuilt: list[str] = []
    previous: list[str] = []
    for chunk in chunks:
        ids = _ID.findall(chunk.content)
        k = _overlap(previous, ids)
        assert all(i[0] in "sh" for i in ids[:k]), f"overlap repeats a table or code: {ids}"
        assert not ids or ids[k:], f"child {chunk.ordinal} only repeats the overlap: {ids}"
        rebuilt += [i for i in ids[k:] if i[0] != "h"]
        previous = ids
        if set(chunk.element_types) <= {"text", "list_item"}:
            assert count_words(chunk.content) <= size
    assert rebuilt == doc.order


def test_deep_quotes_and_lists_are_read_whole_or_refused_never_cut() -> None:
    """markdown-it stops nesting at 20 levels by default and drops what lies below; es-rag
    reads up to MAX_DEPTH levels whole and refuses deeper text (and never recurses there)."""
    from es_rag.errors import ParseLimitError
    from es_rag.markdown import MAX_DEPTH

    quoted = "> " * 40 + "the deep quotation\n\nafter"
    assert any("the deep quotation" in e.text for e in text_elements(quoted))
    listed = "".join("  " * i + f"- item {i}\n" for i in range(60))
    assert sum(e.text.strip().startswith("- item") for e in text_elements(listed)) == 60
    for deep in (
        ">" * (MAX_DEPTH + 1) + " x",
        "> " * 2000 + "x",
        "".join("  " * i + "- item\n" for i in range(MAX_DEPTH + 20)),
        "".join("  " * i + "- > q\n" for i in range(600)),
    ):
        with pytest.raises(ParseLimitError, match="nests") as info:
            text_elements(deep)
        assert info.value.limit == "depth"
