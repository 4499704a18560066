"""Functions the sandbox tests run in the parse child (imported there by name)."""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

from es_rag.errors import EmptyDocumentError, ParseLimitError

WARMED: int | None = None  # set in the parse server by warm_up(), inherited by children


def add(a: int, b: int) -> int:
    return a + b


def pids() -> tuple[int, int]:
    """The child's pid and its parent's (the parse server)."""
    return os.getpid(), os.getppid()


def echo(value: object) -> object:
    return value


def allocate(mb: int) -> int:
    """Allocate and touch ``mb`` megabytes; past the limit this raises MemoryError."""
    block = bytearray(mb * 2**20)
    return len(block)


def spin(seconds: float) -> int:
    """Burn CPU for up to ``seconds`` (the CPU limit should stop it first)."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


def sleep(seconds: float, pidfile: str | None = None) -> str:
    if pidfile:
        Path(pidfile).write_text(f"{os.getpid()} {os.getppid()}")
    time.sleep(seconds)
    return "woke"


def interval(seconds: float) -> tuple[float, float]:
    start = time.time()
    time.sleep(seconds)
    return start, time.time()


def crash() -> None:
    ctypes.string_at(0)  # SIGSEGV: a native crash, as a broken C parser would have


def fail(message: str) -> None:
    raise ValueError(message)


def empty(message: str) -> None:
    raise EmptyDocumentError(message)


def too_deep() -> None:
    raise ParseLimitError("nested 10000 levels deep", limit="depth")


def recurse(depth: int = 0) -> int:
    return recurse(depth + 1)


def exit_silently() -> None:
    os._exit(3)


def unpicklable() -> object:
    return lambda: None


def noisy() -> str:
    print("parser chatter on stdout")
    os.write(1, b"native chatter on fd 1\n")
    return "quiet"


def warm_up() -> None:
    global WARMED
    WARMED = os.getpid()


def warmed() -> int | None:
    return WARMED
