"""A question of several sentences, asked one sentence at a time on the kNN side.

A sentence embedder reads a question as one point. A question that is one sentence sits
where its meaning is; a question of several (a topic, then "I would also like ...", then a
list of keywords) is the mean of its parts and lands between them, near none of the
passages it asks for. So the client-side fusions ask the whole question and
each of its sentences as kNN searches of their own, and rank every chunk at its best
similarity to any of them, the way a passage is ranked at its best chunk. BM25 needs
none of this: its score already sums over the question's terms. Measured on the dev
collections (README: "The question's sentences"): kNN alone gains on the collections
whose questions are several sentences long, and a question that is one sentence is
asked exactly as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# Latin punctuation ends a sentence before a space ("3.5 mm" stays whole), Han punctuation
# where it stands. A semicolon does not: it joins clauses or the items of a list
# ("nickel in nutrition: requirements; relation with enzyme systems; toxicity"), and an item
# asked alone has lost its topic.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*|\n+")
# A piece that ends in an abbreviation or a single letter and a dot (an initial, "J.", and
# the end of "i.e.", "i. e." or "e.g.") or leaves a parenthesis open goes on into the next
# one: both halves of such a split are fragments.
_GOES_ON = re.compile(
    r"\b(?:[a-z]|etc|vs|cf|al|figs?|nos?|dr|mrs?|ms|st|approx|ca|resp|eqs?|refs?|vol|pp|jr|sr)\.$",
    re.IGNORECASE,
)
_MIN_WORDS = 3  # "Give definitions." asks for nothing the whole question does not
_MIN_HAN = 6  # characters, for text without spaces


def split(question: str, limit: int) -> list[str]:
    """The question's sentences worth asking alone, the first ``limit`` of them; [] when
    it has fewer than two (then the whole question is all there is to ask)."""
    if limit <= 0:
        return []
    parts: list[str] = []
    for piece in (p.strip() for p in _SENTENCE_END.split(question)):
        if not piece:
            continue
        if parts and (_GOES_ON.search(parts[-1]) or parts[-1].count("(") > parts[-1].count(")")):
            parts[-1] = f"{parts[-1]} {piece}"
        else:
            parts.append(piece)
    kept = [p for p in parts if len(p.split()) >= _MIN_WORDS or _han_length(p) >= _MIN_HAN]
    return kept[:limit] if len(kept) > 1 else []


def _han_length(text: str) -> int:
    return sum(1 for ch in text if "\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff")


def best_of(responses: Sequence[Mapping[str, Any]], size: int) -> dict[str, Any]:
    """One kNN response from several over the same rows: each hit at its best score, the
    best ``size`` of them, best first (ties in the order the searches were sent)."""
    best: dict[str, dict[str, Any]] = {}
    for resp in responses:
        for raw in resp["hits"]["hits"]:
            seen = best.get(raw["_id"])
            if seen is None or float(raw.get("_score") or 0.0) > float(seen.get("_score") or 0.0):
                best[raw["_id"]] = raw
    ranked = sorted(best.values(), key=lambda r: -float(r.get("_score") or 0.0))
    return {"hits": {"hits": ranked[:size]}}
