"""Files into documents: which files a path names, and one file parsed into a Document."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from es_rag.parsing import Parser, file_problem
from es_rag.types import AccessControl, Document


def expand_paths(paths: Iterable[str | Path]) -> Iterator[tuple[Path, str | None]]:
    """Files to ingest, with a reason for those that cannot be (reported, not dropped).

    Inside a folder, links to folders are reported, not followed (a link loop cannot trap
    the walk); dotfiles and dot-folders are skipped. Which files are documents is
    decided by their content when they are parsed, not by their names.
    """
    for raw in paths:
        path = Path(raw)
        if path.is_dir():  # a folder named on the command line is walked, link or not
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                # os.walk lists links to folders among the folders (and does not enter
                # them): report them like files, so that nothing is dropped silently.
                links = [d for d in dirs if (Path(folder) / d).is_symlink()]
                dirs[:] = [d for d in dirs if d not in links]
                for name in sorted([*names, *links]):
                    if not name.startswith("."):
                        child = Path(folder) / name
                        yield child, file_problem(child)
        else:
            yield path, file_problem(path)


def load_document(
    path: Path,
    *,
    parser: Parser,
    acl: AccessControl,
    doc_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Document:
    """A file parsed into a Document; ``doc_id`` defaults to the path as given.

    Raises an ``InputError`` subclass naming the file and the reason (unsupported type,
    encrypted, corrupt, empty or needing OCR, too large, a parse limit hit).
    """
    before = path.stat()
    parsed = parser.parse(path)
    stat = path.stat()
    # A file rewritten during its parse gets no stamp: the next ingest parses it again.
    stamp = file_stamp(path, stat) if _same_version(before, stat) else None
    return Document(
        doc_id=doc_id or str(path),
        text=parsed.text,
        elements=tuple(parsed.elements),
        acl=acl,
        title=parsed.title,
        source_uri=path.resolve().as_uri(),
        mime_type=parsed.mime,
        metadata=dict(metadata or {}),
        updated_at=datetime.fromtimestamp(stat.st_mtime, timezone.utc).isoformat(),
        source_stamp=stamp,
    )


def file_stamp(path: Path, stat: os.stat_result) -> str:
    """``size:mtime_ns:sha256`` of a file: what a re-ingest compares before parsing."""
    return f"{stat.st_size}:{stat.st_mtime_ns}:{_sha256(path)}"


def same_file(stored: str, path: Path, stat: os.stat_result) -> bool:
    """Whether ``path`` still holds the bytes ``stored`` (a ``file_stamp``) describes.

    Size and modification time decide when they can: a new size is a new file, the same
    time is the same file. A new time with the same size (a checkout, a copy, a touch)
    is settled by hashing the bytes, which costs a read, not a parse.
    """
    size, mtime, digest = [*stored.split(":"), "", ""][:3]
    if size != str(stat.st_size):
        return False
    if mtime == str(stat.st_mtime_ns):
        return True
    try:
        return digest == _sha256(path)
    except OSError:
        return False


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:32]


def _same_version(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_size, a.st_mtime_ns) == (b.st_size, b.st_mtime_ns)


class FolderResolver:
    """``Path.resolve`` for many files of few folders: each folder is resolved once.

    ``resolve`` walks every component of a path with an ``lstat``; a file that is not
    itself a link resolves to its resolved folder plus its name, so the files of a folder
    cost one ``lstat`` each (the unchanged check, the queue's payloads), not one per
    component.
    """

    def __init__(self) -> None:
        self._folders: dict[Path, Path] = {}

    def __call__(self, path: Path) -> Path:
        if path.name in ("", ".", "..") or path.is_symlink():
            return path.resolve()
        folder = self._folders.get(path.parent)
        if folder is None:
            folder = self._folders[path.parent] = path.parent.resolve()
        return folder / path.name
