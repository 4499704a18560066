"""Choosing texts per forward pass on an accelerator by measuring, not guessing.

On a CPU the best batch is small and known (16: texts sorted by length pad least, see
``auto_batch_size``). On a GPU it depends on the card, the model and the text length: a
small model on a large card keeps getting faster up to hundreds of texts per pass, a
large one saturates the card (or runs out of memory) at a few dozen. So a worker on a GPU
times a few forward passes of the longest texts the model takes, at doubling sizes, and
keeps the smallest size within a few percent of the fastest: the largest texts bound the
memory, and a smaller batch of the same speed leaves the card room for anything else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

# Doubling sizes a probe tries, smallest first; it stops early at a plateau or at the
# first size that does not fit.
PROBE_SIZES: tuple[int, ...] = (16, 32, 64, 128, 256, 512)
# A size must be this much faster than the best before it to be worth its memory; the
# chosen size is the smallest within this much of the fastest.
PLATEAU = 0.05
# Wall-clock bound of the whole probe (after this, the best size so far is kept).
PROBE_BUDGET_S = 30.0


@dataclass
class BatchChoice:
    """What a probe measured and chose (logged by the worker, printed by bench_gpu)."""

    size: int
    rates: dict[int, float] = field(default_factory=dict)  # texts/s per size tried
    stopped: str = ""  # why the probe stopped before the last size, if it did

    def as_dict(self) -> dict[str, object]:
        return {
            "size": self.size,
            "rates": {str(k): round(v, 1) for k, v in self.rates.items()},
            "stopped": self.stopped,
        }


def is_out_of_memory(exc: BaseException) -> bool:
    """torch's CUDA/MPS out-of-memory errors, whatever wraps them (libraries re-raise them
    as RuntimeError, and some only keep the message)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ == "OutOfMemoryError" or "out of memory" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def choose_batch_size(
    seconds_for: Callable[[int], float],
    sizes: Sequence[int] = PROBE_SIZES,
    *,
    plateau: float = PLATEAU,
    budget_s: float = PROBE_BUDGET_S,
    after_oom: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> BatchChoice:
    """Time ``seconds_for(size)`` (one forward pass of ``size`` texts, warm) at each size.

    Stops at the first size that runs out of memory (``after_oom`` frees the cache), at
    the first size no faster than ``1 + plateau`` times the best before it, or when the
    budget is spent. Any other error is the caller's: a model that cannot embed at the
    smallest size must fail loudly, not be given a batch size.
    """
    if not sizes or any(s < 1 for s in sizes) or list(sizes) != sorted(set(sizes)):
        raise ValueError(f"sizes must be distinct positive integers, ascending: {sizes!r}")
    rates: dict[int, float] = {}
    stopped = ""
    start = clock()
    for size in sizes:
        try:
            seconds = seconds_for(size)
        except Exception as exc:
            if not is_out_of_memory(exc) or not rates:
                raise
            if after_oom is not None:
                after_oom()
            stopped = f"{size} texts ran out of memory"
            break
        rates[size] = size / max(seconds, 1e-9)
        best_before = max((r for s, r in rates.items() if s < size), default=0.0)
        if best_before and rates[size] < best_before * (1 + plateau):
            stopped = f"{size} texts were not {plateau:.0%} faster"
            break
        if clock() - start > budget_s:
            stopped = f"the probe's {budget_s:.0f} s were spent"
            break
    fastest = max(rates.values())
    chosen = min(s for s, r in rates.items() if r >= fastest * (1 - plateau))
    return BatchChoice(size=chosen, rates=rates, stopped=stopped)
