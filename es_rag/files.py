"""Files into documents: which files a path names, and one file parsed into a Document."""

from __future__ import annotations

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
    parsed = parser.parse(path)
    stat = path.stat()
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
    )
