"""Which paths a folder walk yields, and why a path cannot be parsed: no server, no parser."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from es_rag.engine.index import DocState
from es_rag.files import FolderResolver, file_stamp, same_file
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


def test_a_file_stamp_decides_by_size_then_time_then_bytes(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    path.write_text("# A\n\nsame bytes\n")
    stamp = file_stamp(path, path.stat())
    assert same_file(stamp, path, path.stat())
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: bytes hashed
    assert same_file(stamp, path, path.stat())
    path.write_text("# A\n\nsome bytes\n")  # same size, other bytes
    assert not same_file(stamp, path, path.stat())
    path.write_text("# A\n\nsame bytes, longer\n")
    assert not same_file(stamp, path, path.stat())
    assert not same_file("garbage", path, path.stat())


def test_a_document_state_names_a_file_stamp_only_when_nothing_needs_a_parse() -> None:
    whole = dict(
        count=2,
        doc_hashes=("c" * 32 + "a" * 64,),
        embedding_versions=("v",),
        chunk_counts=(2,),
        stamps=("5:7:abc:key",),
    )
    assert DocState(**whole).file_stamp(key="key", access="a" * 64, embedding_version="v") == (
        "5:7:abc"
    )
    misses = [
        ({}, {"key": "other"}),  # moved, or another recipe
        ({}, {"access": "b" * 64}),  # other ACL or metadata: the access-only path
        ({}, {"embedding_version": "w"}),  # another model
        ({"chunk_counts": (3,)}, {}),  # a half-written document
        ({"stamps": ("5:7:abc:key", "6:8:def:key")}, {}),  # rows of two files
        ({"stamps": ()}, {}),  # ingested from memory, or before stamps
    ]
    for state, ask in misses:
        query = {"key": "key", "access": "a" * 64, "embedding_version": "v", **ask}
        assert DocState(**{**whole, **state}).file_stamp(**query) is None, (state, ask)


def test_folder_resolver_resolves_as_path_resolve(tmp_path: Path, monkeypatch: Any) -> None:
    """Each folder resolved once, the same answer as ``Path.resolve`` for every file:
    through a linked folder, for a linked file, relative, and with ``..`` in the path."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.md").write_text("a")
    (real / "b.md").write_text("b")
    (tmp_path / "via").symlink_to(real)
    (real / "link.md").symlink_to(real / "b.md")
    monkeypatch.chdir(tmp_path)
    paths = [
        real / "a.md",
        tmp_path / "via" / "a.md",
        real / "link.md",
        Path("via/b.md"),
        Path("real/../via/a.md"),
        Path("real/missing.md"),
    ]
    resolve = FolderResolver()
    assert [resolve(p) for p in paths] == [p.resolve() for p in paths]
