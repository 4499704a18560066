"""Which concrete index serves an alias, which one is mirrored, and how each is used.

An alias ``es-rag`` points at one generation ``es-rag-<n>``. While ``es-rag migrate``
builds ``es-rag-<n+1>`` (another model, vector type or analyzer), and after it swaps the
alias until ``--drop-old``, a second alias ``es-rag-mirror`` names the other generation:
every writer writes both (the alias's first, then the mirror), so nothing written during a
migration is lost and a rollback loses nothing either.

Each generation records in its ``_meta`` the settings its vectors and terms were made with
(``RECORDED_KEYS``). A process configured for one generation keeps working when the alias
moves to the other: it writes and queries that one with the recorded settings (a second
model, loaded once). Readers and writers address generations by their concrete names,
resolved at most ``ttl`` seconds ago, so a swap between resolving and sending can never
pair a query vector or a row with the other generation's model.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from es_rag.analysis import TextAnalyzer
from es_rag.config import Settings
from es_rag.embedding import Embedder, build_embedder
from es_rag.engine.base import Engine
from es_rag.engine.mapping import (
    RECORDED_KEYS,
    IndexContract,
    recorded_recipe,
    recorded_settings,
)


def mirror_alias(alias: str) -> str:
    return f"{alias}-mirror"


def generation_number(alias: str, name: str) -> int | None:
    m = re.fullmatch(rf"{re.escape(alias)}-(\d+)", name)
    return int(m.group(1)) if m else None


def by_generation(alias: str, names: Iterable[str]) -> list[str]:
    """Sorted by generation number (``-10`` after ``-9``); other names first, as text."""

    def key(name: str) -> tuple[int, int, str]:
        number = generation_number(alias, name)
        return (0, 0, name) if number is None else (1, number, name)

    return sorted(names, key=key)


def same_recipe(a: dict[str, Any], b: dict[str, Any]) -> bool:
    a, b = recorded_recipe(a), recorded_recipe(b)
    return all(a.get(k) == b.get(k) for k in RECORDED_KEYS)


@dataclass(frozen=True)
class Generation:
    """One concrete index and how to write or query it from this process."""

    index: str
    contract: IndexContract | None
    settings: Settings
    # The process's own settings apply (its own model and analyzer, already loaded).
    configured: bool
    meta: dict[str, Any]

    @property
    def embedding_version(self) -> str | None:
        return self.contract.embedding_version if self.contract else None


@dataclass(frozen=True)
class Layout:
    """The alias's generation and, during or after a migration, the mirrored one."""

    primary: Generation | None
    mirror: Generation | None = None

    def targets(self) -> list[Generation]:
        """Where writes go, in order: the served generation first."""
        return [g for g in (self.primary, self.mirror) if g is not None]

    def own(self) -> Generation | None:
        """The generation this process is configured for, if either is."""
        return next((g for g in self.targets() if g.configured), None)


class Generations:
    """Resolves the layout behind an alias (cached ``ttl`` seconds) and the parts of
    each generation (models built from recorded settings are loaded once)."""

    def __init__(self, engine: Engine, settings: Settings, *, ttl: float = 1.0) -> None:
        self.engine = engine
        self.settings = settings
        self.ttl = ttl
        self._layout: Layout | None = None
        self._at = 0.0
        self._meta: dict[str, dict[str, Any]] = {}
        self._embedders: dict[str, Embedder] = {}
        self._analyzers: dict[str, TextAnalyzer] = {}
        self._lock = threading.Lock()

    def layout(self, *, fresh: bool = False) -> Layout:
        now = time.monotonic()
        if fresh or self._layout is None or now - self._at > self.ttl:
            self._layout = self._resolve()
            self._at = now
        return self._layout

    def forget(self) -> None:
        """The next ``layout()`` and ``meta()`` ask the server (after this process moved
        an alias or changed a ``_meta``)."""
        self._layout = None
        self._meta.clear()

    def _resolve(self) -> Layout:
        alias = self.settings.index
        mirror = mirror_alias(alias)
        found = self._aliases(alias, mirror)
        primary = by_generation(alias, found.get(alias, []))
        if not primary and not found and self.engine.index_exists(alias):
            # A concrete index named directly (a migration's gate queries each generation).
            return Layout(primary=self._generation(alias))
        mirrored = [n for n in found.get(mirror, []) if n not in primary]
        served = self._generation(primary[-1]) if primary else None
        other = self._generation(mirrored[-1]) if mirrored else None
        if served is not None and not served.configured and not self._follows(served, other):
            # Not a migration's partner, just another configuration: this process's own
            # settings apply, and the contract check refuses them as it always has.
            served = Generation(served.index, served.contract, self.settings, True, served.meta)
        return Layout(primary=served, mirror=other)

    def _follows(self, served: Generation, other: Generation | None) -> bool:
        """A process may use the served generation's recorded model only across a
        migration: it is configured for the mirrored generation, or for the one the
        served generation was migrated from."""
        if other is not None and other.configured:
            return True
        source = (served.meta.get("migration") or {}).get("source_settings")
        return isinstance(source, dict) and same_recipe(source, recorded_settings(self.settings))

    def _aliases(self, *names: str) -> dict[str, list[str]]:
        """alias → concrete indices, for the aliases that exist."""
        out: dict[str, list[str]] = {}
        for name in names:
            indices = self.engine.alias_indices(name)
            if indices:
                out[name] = indices
        return out

    def meta(self, index: str) -> dict[str, Any]:
        meta = self._meta.get(index)
        if meta is None:
            meta = dict(self.engine.mapping(index).get("_meta") or {})
            self._meta[index] = meta
        return meta

    def recipe(self, gen: Generation) -> Settings:
        """This process's settings with ``gen``'s recorded recipe (what made its rows)."""
        recorded = gen.meta.get("settings")
        if not isinstance(recorded, dict):
            return gen.settings
        return self.settings.model_copy(update=recorded_recipe(recorded))

    def _generation(self, index: str) -> Generation:
        meta = self.meta(index)
        recorded = meta.get("settings")
        mine = recorded_settings(self.settings)
        if not isinstance(recorded, dict) or same_recipe(recorded, mine):
            # Indexes without a recipe (created before es-rag recorded one) are the
            # configured generation: the contract check decides whether they fit.
            return Generation(index, IndexContract.from_meta(meta), self.settings, True, meta)
        update = recorded_recipe(recorded)
        return Generation(
            index,
            IndexContract.from_meta(meta),
            self.settings.model_copy(update=update),
            False,
            meta,
        )

    def seed(self, embedder: Embedder, settings: Settings) -> None:
        """Use this (already loaded) model for the generation made with ``settings``."""
        self._embedders[recipe_key(settings)] = embedder

    def embedder(self, gen: Generation, own: Embedder) -> Embedder:
        if gen.configured:
            return own
        key = recipe_key(gen.settings)
        with self._lock:
            if key not in self._embedders:
                self._embedders[key] = build_embedder(gen.settings)
            return self._embedders[key]

    def analyzer(self, gen: Generation, own: TextAnalyzer) -> TextAnalyzer:
        """The analyzer that made ``gen``'s terms, as its contract records it.

        ``own`` when it is that one. Otherwise one for the generation's language, in the
        recorded variant where this code can still make it (``TextAnalyzer.variant``):
        during a migration out of an index made before Chinese folding, the writer keeps
        the old analysis for the served generation and the new one for the mirror.
        """
        language = gen.settings.analyzer_language
        recorded = gen.contract.analyzer_version if gen.contract else None
        if recorded == own.version or (
            recorded is None and (gen.configured or language == own.language)
        ):
            return own
        key = f"{language}|{recorded}"
        with self._lock:
            if key not in self._analyzers:
                current = TextAnalyzer(language)
                made = current.variant(recorded) if recorded else None
                # An analysis this code cannot make is refused where it matters (a
                # search's contract check); the current one is the best guess for the rest.
                self._analyzers[key] = made or current
            return self._analyzers[key]


def recipe_key(settings: Settings) -> str:
    recorded = recorded_settings(settings)
    return repr([(k, recorded[k]) for k in RECORDED_KEYS])
