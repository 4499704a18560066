"""One definition of the CJK character ranges, for analysis, chunking and cleaning.

Three modules used to carry their own ranges and disagreed (one lacked Extension A, one
the supplementary planes, one kana), so the same text was counted, tokenised and re-joined
differently. These strings are regex character-class bodies.
"""

from __future__ import annotations

import re

# Han ideographs: 〇, Extension A, the unified block, compatibility ideographs (NFKC maps
# most of them to the unified block anyway) and the supplementary planes 2 and 3
# (Extensions B to H).
HAN = "\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003ffff"
# Hiragana and katakana: written without spaces, like Han.
KANA = "\u3040-\u30ff"
# Letters of scripts written without spaces between words: one counts as one word.
LETTERS = HAN + KANA
# Full-width punctuation: ideographic comma and full stop, brackets, quotes, and the
# full-width forms of ASCII punctuation.
PUNCT = "\u3001-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65"
# Everything that joins its neighbours without a space (letters, punctuation, the
# ideographic space and the full-width forms).
UNSPACED = LETTERS + "\u3000-\u303f\uff00-\uffef"

_HAN_CHAR = re.compile(f"[{HAN}]")


def is_han(ch: str) -> bool:
    return bool(_HAN_CHAR.match(ch))


def has_han(text: str) -> bool:
    return _HAN_CHAR.search(text) is not None
