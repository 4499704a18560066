"""Files into documents: which files a path names, and one file parsed into a Document."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from es_rag.detect import inflated_name
from es_rag.errors import InputError
from es_rag.parsing import Parser, file_problem
from es_rag.types import AccessControl, Document

if TYPE_CHECKING:
    from es_rag.config import Settings


# Names that are never documents, however their bytes read: what a built documentation
# site ships beside its pages (styles, scripts, fonts, icons, search indexes that repeat
# every page's words), archives and compressed files, compiled code. Folder walks leave
# them out (reported as skipped, reason "excluded"); text among them was indexed as words
# (a Sphinx site's searchindex.js, an MkDocs site's search_index.json: every page again).
# A gzip-compressed file is read (Debian ships text documentation so) unless the name it
# inflates to is left out: ``sitemap.xml.gz``, ``docs.tar.gz``.
DEFAULT_EXCLUDES: tuple[str, ...] = (
    # a site's styles and scripts
    *("*.css", "*.scss", "*.sass", "*.less", "*.js", "*.mjs", "*.cjs", "*.map"),
    # fonts, icons and drawings (es-rag reads no SVG, GIF, icon or OpenDocument drawing)
    *("*.woff", "*.woff2", "*.ttf", "*.otf", "*.eot", "*.ico", "*.cur", "*.svg", "*.svgz"),
    *("*.xpm", "*.xbm", "*.gif", "*.odg", "*.odf"),
    # search indexes and site machinery of Sphinx and MkDocs
    *("objects.inv", "search_index.json", "sitemap.xml", "_static/", "_sources/"),
    # archives, and compressed files es-rag does not inflate
    *("*.tar", "*.zip", "*.jar", "*.7z", "*.rar", "*.bz2", "*.xz", "*.zst", "*.lz", "*.Z"),
    # databases (SQLite's documentation ships its search and contents databases)
    *("*.db", "*.sqlite", "*.sqlite3"),
    # compiled code and dependency trees
    *("*.pyc", "*.pyo", "*.so", "*.o", "*.a", "*.class", "*.dll", "*.exe"),
    *("__pycache__/", "node_modules/"),
)


class WalkFilter:
    """Which files and folders a folder walk leaves out: ``.gitignore`` patterns, matched
    against the path under the folder walked. Later patterns win, so ``!*.svg`` after the
    defaults walks SVG files again."""

    def __init__(self, patterns: Iterable[str] = (), *, defaults: bool = True) -> None:
        import pathspec  # 35 ms: only where a folder is walked

        self.patterns = [*(DEFAULT_EXCLUDES if defaults else ()), *patterns]
        try:
            self._spec = pathspec.GitIgnoreSpec.from_lines(self.patterns)
        except (ValueError, TypeError) as exc:  # pathspec's GitWildMatchPatternError
            raise InputError(f"bad exclude pattern: {exc}") from None

    @classmethod
    def of(
        cls, settings: Settings, extra: Iterable[str] = (), *, defaults: bool = True
    ) -> WalkFilter:
        """The settings' patterns (built-in unless turned off, then ES_RAG_WALK_EXCLUDE),
        then ``extra``."""
        return cls(
            [*settings.walk_exclude_patterns, *extra],
            defaults=defaults and settings.walk_default_excludes,
        )

    def rule(self, relative: str) -> str | None:
        """The pattern that leaves ``relative`` out (a folder's ends with "/"), or None;
        a gzip-compressed file is judged by its name and by the name it inflates to."""
        for name in dict.fromkeys((relative, inflated_name(relative))):
            result = self._spec.check_file(name)
            if result.include and result.index is not None:
                return self.patterns[result.index]
        return None


class Listed(NamedTuple):
    """A file (or a left-out folder) that a path names."""

    path: Path
    problem: str | None = None  # why it cannot be read: reported as failed
    excluded: str | None = None  # the walk pattern that leaves it out: reported as skipped

    @property
    def to_read(self) -> bool:
        return self.problem is None and self.excluded is None


def expand_paths(
    paths: Iterable[str | Path], exclude: WalkFilter | None = None
) -> Iterator[Listed]:
    """Files to ingest, with a reason for those that cannot be (reported, not dropped).

    Inside a folder, links to folders are reported, not followed (a link loop cannot trap
    the walk); dotfiles and dot-folders are skipped, and so is what ``exclude`` leaves out
    (a left-out folder is listed once, not walked). Which files are documents is decided
    by their content when they are parsed: the patterns only keep out names that never
    are. A file named itself is read whatever its name.
    """
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            yield Listed(path, file_problem(path))
            continue
        # a folder named on the command line is walked, link or not
        for folder, dirs, names in os.walk(path):
            relative = Path(folder).relative_to(path).as_posix()
            under = "" if relative == "." else f"{relative}/"
            kept = []
            for d in sorted(d for d in dirs if not d.startswith(".")):
                rule = exclude.rule(f"{under}{d}/") if exclude else None
                if rule:
                    yield Listed(Path(folder) / d, excluded=rule)
                else:
                    kept.append(d)
            # os.walk lists links to folders among the folders (and does not enter
            # them): report them like files, so that nothing is dropped silently.
            links = [d for d in kept if (Path(folder) / d).is_symlink()]
            dirs[:] = [d for d in kept if d not in links]
            for name in sorted([*names, *links]):
                if name.startswith("."):
                    continue
                child = Path(folder) / name
                rule = exclude.rule(under + name) if exclude else None
                yield Listed(child, excluded=rule) if rule else Listed(child, file_problem(child))


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
