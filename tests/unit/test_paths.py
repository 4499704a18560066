"""Which paths a folder walk yields, and why a path cannot be parsed: no server, no parser."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from es_rag.config import Settings
from es_rag.engine.index import DocState
from es_rag.errors import InputError
from es_rag.files import DEFAULT_EXCLUDES, FolderResolver, WalkFilter, file_stamp, same_file
from es_rag.parsing import file_problem
from es_rag.pipeline import expand_paths

pytestmark = pytest.mark.unit


def walk(*paths: Path, root: Path) -> list[tuple[str, str | None]]:
    return [(str(p.relative_to(root)), problem) for p, problem, _ in expand_paths(paths)]


def left_out(*paths: Path, root: Path, exclude: WalkFilter) -> dict[str, str | None]:
    """Each listed path (relative to ``root``) with the pattern that left it out."""
    return {str(f.path.relative_to(root)): f.excluded for f in expand_paths(paths, exclude)}


def test_a_walk_leaves_out_a_built_sites_machinery_and_lists_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    for name in (
        "index.html",
        "guide/install.md",
        "css/theme.css",
        "js/main.js",
        "search/search_index.json",
        "fonts/icons.woff2",
        "img/favicon.ico",
        "img/screenshot.png",
        "_static/searchtools.js",
        "_static/logo.png",
        "_sources/index.rst.txt",
        "objects.inv",
        "downloads/docs.tar.gz",
        "downloads/docs.tgz",
        "manual.txt.gz",
        "sitemap.xml.gz",
        "search.d/search.db.gz",
        "node_modules/pkg/README.md",
    ):
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text("x")
    assert left_out(site, root=site, exclude=WalkFilter()) == {
        "index.html": None,
        "guide/install.md": None,
        "img/screenshot.png": None,  # an image may hold text: OCR decides
        "css/theme.css": "*.css",
        "js/main.js": "*.js",
        "search/search_index.json": "search_index.json",
        "fonts/icons.woff2": "*.woff2",
        "img/favicon.ico": "*.ico",
        # a left-out folder is listed once, not walked
        "_static": "_static/",
        "_sources": "_sources/",
        "node_modules": "node_modules/",
        "objects.inv": "objects.inv",
        # a compressed file is judged by the name it inflates to as well
        "downloads/docs.tar.gz": "*.tar",
        "downloads/docs.tgz": "*.tar",
        "manual.txt.gz": None,
        "sitemap.xml.gz": "sitemap.xml",
        "search.d/search.db.gz": "*.db",
    }
    # Named itself, a file is read whatever its name; without the defaults, all is walked.
    assert left_out(site / "css" / "theme.css", root=site, exclude=WalkFilter()) == {
        "css/theme.css": None
    }
    everything = left_out(site, root=site, exclude=WalkFilter(defaults=False))
    assert len(everything) == 18 and set(everything.values()) == {None}


def test_walk_patterns_follow_gitignore(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    for name in ("top.md", "a/top.md", "drafts/x.md", "a/drafts/y.md", "run.log", "d.svg"):
        (kb / name).parent.mkdir(parents=True, exist_ok=True)
        (kb / name).write_text("x")
    rules = WalkFilter(["/top.md", "drafts/", "*.log", "!*.svg"])
    assert left_out(kb, root=kb, exclude=rules) == {
        "top.md": "/top.md",  # anchored at the folder walked
        "a/top.md": None,
        "drafts": "drafts/",  # at any depth
        "a/drafts": "drafts/",
        "run.log": "*.log",
        "d.svg": None,  # a later pattern walks SVG files again
    }
    with pytest.raises(InputError, match="bad exclude pattern"):
        WalkFilter(["!"])


def test_walk_patterns_come_from_the_settings_then_the_caller() -> None:
    settings = Settings(walk_exclude=" *.log , drafts/,", walk_default_excludes=False)
    assert WalkFilter.of(settings, ["tmp/"]).patterns == ["*.log", "drafts/", "tmp/"]
    assert WalkFilter.of(Settings(), defaults=False).patterns == []
    assert WalkFilter.of(Settings()).patterns == list(DEFAULT_EXCLUDES)


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
