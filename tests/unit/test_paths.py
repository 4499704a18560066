"""Which paths a folder walk yields, and why a path cannot be parsed: no server, no parser."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from es_rag.parsing import file_problem
from es_rag.pipeline import expand_paths

pytestmark = pytest.mark.unit


def walk(*paths: Path, root: Path) -> list[tuple[str, str | None]]:
    return [(str(p.relative_to(root)), problem) for p, problem in expand_paths(paths)]


def test_a_walk_reports_what_it_cannot_ingest_and_skips_dotfiles(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / ".git").mkdir()
    (docs / ".git" / "config").write_text("x")
    (docs / ".hidden.md").write_text("x")
    (docs / "a.md").write_text("x")
    (docs / "sub" / "b.pdf").write_bytes(b"x")
    (tmp_path / "elsewhere").mkdir()
    (docs / "link-to-folder").symlink_to(tmp_path / "elsewhere")
    (docs / "loop").symlink_to(docs / "loop")
    (docs / "broken.md").symlink_to(docs / "missing.md")
    os.mkfifo(docs / "pipe.txt")
    assert walk(docs, root=tmp_path) == [
        ("docs/a.md", None),
        ("docs/broken.md", "a broken symbolic link"),
        ("docs/link-to-folder", "a link to a folder (not followed); give the folder itself"),
        ("docs/loop", "a symbolic link loop"),
        ("docs/pipe.txt", "not a regular file (a device, socket or pipe)"),
        ("docs/sub/b.pdf", None),
    ]


def test_a_folder_named_on_the_command_line_is_walked_even_through_a_link(
    tmp_path: Path,
) -> None:
    real = tmp_path / "release-5"
    real.mkdir()
    (real / "a.md").write_text("x")
    (tmp_path / "current").symlink_to(real)
    assert walk(tmp_path / "current", root=tmp_path) == [("current/a.md", None)]


def test_a_missing_path_is_reported_not_dropped(tmp_path: Path) -> None:
    assert walk(tmp_path / "nope.pdf", root=tmp_path) == [("nope.pdf", "no such file or directory")]


def test_file_problem_of_a_regular_file_and_a_directory(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("x")
    assert file_problem(tmp_path / "a.md") is None
    assert file_problem(tmp_path) == "a directory, not a file"
