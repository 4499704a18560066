"""The parse sandbox: limits, crashes, errors, restarts, interrupts, threads and clean-up.

Real processes (a parse server and forked children), no network. Limits are small so the
whole file runs in a few seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from es_rag.errors import CorruptDocumentError, EmptyDocumentError, EsRagError, ParseLimitError
from es_rag.sandbox import CallStats, Limits, Sandbox, SharedServer

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
T = "tests.sandbox_targets:"
LIMITS = Limits(memory_mb=256, cpu_seconds=2, wall_seconds=3)
ENV = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_until(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def server_pid(sandbox: Sandbox) -> int:
    assert sandbox._proc is not None
    return sandbox._proc.pid


@pytest.fixture(scope="module")
def shared() -> Iterator[Sandbox]:
    sandbox = Sandbox(LIMITS, env=ENV)
    yield sandbox
    sandbox.close()


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    """A sandbox of its own, for tests that kill or close it."""
    box = Sandbox(LIMITS, env=ENV)
    yield box
    box.close()


def test_limits_must_be_usable() -> None:
    for bad in ({"memory_mb": 10}, {"cpu_seconds": 0}, {"wall_seconds": 0}):
        with pytest.raises(ValueError):
            Limits(**bad)


def test_construction_starts_nothing() -> None:
    box = Sandbox(LIMITS)
    assert box._proc is None
    box.close()  # closing an unstarted sandbox is fine
    assert box._proc is None


def test_call_runs_in_a_fresh_child_of_the_server(shared: Sandbox) -> None:
    assert shared.call(T + "add", 2, 40) == 42
    first, parent = shared.call(T + "pids")
    second, parent2 = shared.call(T + "pids")
    assert parent == parent2 == server_pid(shared)
    assert len({first, second, parent, os.getpid()}) == 4


def test_arguments_and_results_round_trip(shared: Sandbox) -> None:
    value = {"text": "中文 ✓", "rows": [(1, 2.5, None)], "blob": b"\x00" * (3 * 2**20)}
    assert shared.call(T + "echo", value) == value


def test_stats_of_the_last_call(shared: Sandbox) -> None:
    assert shared.call(T + "allocate", 64) == 64 * 2**20
    stats = shared.last
    assert isinstance(stats, CallStats)
    assert stats.peak_rss_mb >= 64
    assert stats.peak_vm_growth_mb >= 64  # what the memory limit counts
    assert stats.server_rss_mb > 0
    assert 0 < stats.wall_s < 3 and stats.cpu_s >= 0
    shared.call(T + "sleep", 0.2)
    assert shared.last.wall_s >= 0.2
    assert shared.last.peak_rss_mb < stats.peak_rss_mb  # a fresh child, not the last one
    assert shared.last.peak_vm_growth_mb < 64


def test_memory_limit(shared: Sandbox) -> None:
    server = server_pid(shared)
    with pytest.raises(ParseLimitError) as info:
        shared.call(T + "allocate", 1024)
    assert info.value.limit == "memory"
    assert "256 MB" in str(info.value)
    assert server_pid(shared) == server  # only the child paid for it
    assert shared.call(T + "add", 1, 1) == 2


def test_cpu_limit(shared: Sandbox) -> None:
    t0 = time.monotonic()
    with pytest.raises(ParseLimitError) as info:
        shared.call(T + "spin", 60, limits=Limits(memory_mb=256, cpu_seconds=1, wall_seconds=20))
    assert info.value.limit == "cpu"
    assert time.monotonic() - t0 < 15
    assert shared.last.cpu_s >= 0.8
    assert shared.call(T + "add", 1, 2) == 3


def test_wall_clock_limit(shared: Sandbox) -> None:
    t0 = time.monotonic()
    with pytest.raises(ParseLimitError) as info:
        shared.call(T + "sleep", 60, limits=Limits(memory_mb=256, cpu_seconds=2, wall_seconds=1))
    elapsed = time.monotonic() - t0
    assert info.value.limit == "wall"
    assert 0.9 <= elapsed < 4
    assert shared.call(T + "add", 2, 2) == 4


def test_native_crash_is_a_corrupt_document(shared: Sandbox) -> None:
    server = server_pid(shared)
    with pytest.raises(CorruptDocumentError, match="SIGSEGV"):
        shared.call(T + "crash")
    assert server_pid(shared) == server
    assert shared.call(T + "add", 3, 3) == 6


@pytest.mark.parametrize(
    ("target", "args", "match"),
    [
        ("fail", ("bad xref table",), "ValueError: bad xref table"),
        ("recurse", (), "nested too deeply"),
        ("exit_silently", (), "without an answer"),
        ("unpicklable", (), "the parser failed"),
        ("no_such_function", (), "AttributeError"),
    ],
)
def test_failures_become_corrupt_document_errors(
    shared: Sandbox, target: str, args: tuple[Any, ...], match: str
) -> None:
    with pytest.raises(CorruptDocumentError, match=match):
        shared.call(T + target, *args)
    assert shared.call(T + "add", 5, 5) == 10


def test_es_rag_errors_come_back_as_themselves(shared: Sandbox) -> None:
    with pytest.raises(EmptyDocumentError, match="no text layer"):
        shared.call(T + "empty", "no text layer")
    with pytest.raises(ParseLimitError) as info:
        shared.call(T + "too_deep")
    assert info.value.limit == "depth"
    assert type(info.value) is ParseLimitError and isinstance(info.value, EsRagError)


def test_child_output_does_not_reach_the_caller(
    shared: Sandbox, capfd: pytest.CaptureFixture[str]
) -> None:
    assert shared.call(T + "noisy") == "quiet"
    out = capfd.readouterr().out
    assert "chatter" not in out


def test_warm_up_runs_in_the_server_and_children_inherit_it(sandbox: Sandbox) -> None:
    assert sandbox.call(T + "warmed") is None
    warmed = sandbox.call(T + "warmed", warm=T + "warm_up")
    assert warmed == server_pid(sandbox)


def test_server_restarts_after_it_was_killed(sandbox: Sandbox) -> None:
    assert sandbox.call(T + "add", 1, 1) == 2
    old = server_pid(sandbox)
    os.kill(old, signal.SIGKILL)
    assert sandbox._proc is not None
    sandbox._proc.wait(timeout=5)
    assert sandbox.call(T + "add", 1, 2) == 3
    assert server_pid(sandbox) != old


def test_server_killed_while_idle_does_not_fail_the_next_document(sandbox: Sandbox) -> None:
    """The server died between calls (e.g. the OOM killer): the next call must not blame
    its document; the sandbox starts a new server and runs it."""
    for _ in range(3):
        assert sandbox.call(T + "add", 1, 1) == 2
        os.kill(server_pid(sandbox), signal.SIGKILL)
        assert sandbox.call(T + "add", 2, 3) == 5  # no waiting for the kill to land


class Interrupted(Exception):
    pass


@contextlib.contextmanager
def interrupted_after(seconds: float) -> Iterator[None]:
    """Raise ``Interrupted`` in this thread after ``seconds`` (as a soft time limit does)."""

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_interrupt_in_the_caller_kills_server_and_child(sandbox: Sandbox, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    with pytest.raises(Interrupted), interrupted_after(0.5):
        sandbox.call(T + "sleep", 30, str(pidfile))
    child, server = map(int, pidfile.read_text().split())
    assert sandbox._proc is None
    assert not alive(server)
    assert wait_until(lambda: not alive(child)), "the child outlived its server"
    assert sandbox.call(T + "add", 4, 4) == 8
    assert server_pid(sandbox) != server


def test_threads_are_serialised(sandbox: Sandbox) -> None:
    sandbox.call(T + "add", 0, 0)  # start the server first
    results: list[tuple[float, float]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(sandbox.call(T + "interval", 0.3))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not errors
    assert len(results) == 2
    (_, a_end), (b_start, _) = sorted(results)
    assert a_end <= b_start, "two children ran at the same time"


def test_close_leaves_no_server(sandbox: Sandbox) -> None:
    sandbox.call(T + "add", 1, 1)
    old = server_pid(sandbox)
    sandbox.close()
    assert sandbox._proc is None
    assert not alive(old)
    # a closed sandbox still works: it starts a new server on demand
    assert sandbox.call(T + "add", 1, 1) == 2
    assert server_pid(sandbox) != old


def test_server_and_child_die_with_the_caller(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    script = (
        "from es_rag.sandbox import Limits, Sandbox\n"
        "box = Sandbox(Limits(256, 2, 30))\n"
        f"box.call({T + 'sleep'!r}, 30, {str(pidfile)!r})\n"
    )
    caller = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, **ENV})
    try:
        assert wait_until(lambda: pidfile.exists() and pidfile.read_text() != "", timeout=10)
        child, server = map(int, pidfile.read_text().split())
        assert alive(child) and alive(server)
        caller.kill()
        caller.wait(timeout=5)
        assert wait_until(lambda: not alive(server)), "the server outlived its caller"
        assert wait_until(lambda: not alive(child)), "the child outlived its caller"
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SharedServer]:
    srv = SharedServer(str(tmp_path / "parse.sock"), env=ENV)
    srv.start()
    yield srv
    srv.stop()


def test_a_shared_server_runs_callers_side_by_side_each_with_its_limits(
    server: SharedServer,
) -> None:
    """The processes of a worker (threads here, each with a Sandbox of its own) share one
    server: their children run at the same time, and every call keeps its own limits."""
    boxes = [Sandbox(LIMITS, env=ENV, shared=server.path) for _ in range(2)]
    results: list[tuple[float, float]] = []
    errors: list[BaseException] = []

    def work(box: Sandbox) -> None:
        try:
            results.append(box.call(T + "interval", 0.5))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(box,)) for box in boxes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not errors and len(results) == 2
    (_, a_end), (b_start, _) = sorted(results)
    assert b_start < a_end, "the shared server ran its callers one after the other"
    assert all(box._proc is None for box in boxes)  # no private server was started
    child, handler = boxes[0].call(T + "pids")
    assert handler != server.pid and len({child, handler, os.getpid()}) == 3
    with pytest.raises(ParseLimitError) as info:
        boxes[0].call(T + "allocate", 1024)
    assert info.value.limit == "memory"
    with pytest.raises(ParseLimitError) as info:
        boxes[1].call(T + "sleep", 60, limits=Limits(memory_mb=256, cpu_seconds=2, wall_seconds=1))
    assert info.value.limit == "wall"
    with pytest.raises(EmptyDocumentError, match="no text layer"):
        boxes[1].call(T + "empty", "no text layer")
    assert boxes[0].call(T + "warmed", warm=T + "warm_up") == server.pid  # warmed once, there
    assert boxes[1].call(T + "add", 1, 1) == 2
    assert server.pid is not None and alive(server.pid)


def test_a_caller_that_gives_up_leaves_no_child_and_the_shared_server_lives(
    server: SharedServer, tmp_path: Path
) -> None:
    box = Sandbox(LIMITS, env=ENV, shared=server.path)

    pidfile = tmp_path / "pids"
    with pytest.raises(Interrupted), interrupted_after(0.5):
        box.call(T + "sleep", 30, str(pidfile))
    child, _ = map(int, pidfile.read_text().split())
    assert wait_until(lambda: not alive(child)), "the child outlived its caller's interest"
    assert server.pid is not None and alive(server.pid)
    assert box.call(T + "add", 4, 4) == 8
    assert box.shared == server.path and box._proc is None


def test_a_dead_shared_server_is_replaced_by_a_private_one(server: SharedServer) -> None:
    box = Sandbox(LIMITS, env=ENV, shared=server.path)
    assert box.call(T + "add", 1, 1) == 2 and box._proc is None
    server.stop()
    assert box.call(T + "add", 2, 2) == 4  # not the document's fault
    assert box.shared is None and box._proc is not None
    box.close()
