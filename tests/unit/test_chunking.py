from __future__ import annotations

import itertools
import re

import pytest

from es_rag.chunking import chunk_text as chunk_all
from es_rag.chunking import count_words
from es_rag.types import Chunk


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
