"""Run untrusted-input code (document parsers) in a child process with hard limits.

A parser fed a zip bomb, a PDF that loops or a 1 GB table must not take the worker with
it. Each call runs in a fresh child forked from a small *parse server*: a long-lived
subprocess of the caller that has already imported the parsing libraries (several seconds
and ~1 GB once, shared copy-on-write by every child). The child sets its own limits before
it touches the input:

- address space (``RLIMIT_AS``): the server's own size plus ``memory_mb``;
- CPU time (``RLIMIT_CPU``): the kernel stops it at ``cpu_seconds``;
- wall clock: the server kills it at ``wall_seconds`` (a parser blocked in I/O or sleeping
  uses no CPU);
- it dies with the server, and the server dies with the caller (``PR_SET_PDEATHSIG`` and
  end-of-file on its request pipe), so a killed worker leaves nothing running.

Why not ``multiprocessing``: Celery's prefork children are daemonic and may not start
child processes, and a fork of the caller itself would copy its threads and its model.
The server is started with ``subprocess`` and speaks length-prefixed pickles over two pipes
of its own (stdout stays free for libraries that print).

A worker of several processes shares one server instead (:class:`SharedServer`, on a Unix
socket): each request gets a handler forked from it, which forks the limited child as
above, so the parsers' memory is held once per worker and parses still run side by side.

A limit that is hit raises :class:`ParseLimitError` (``limit`` = memory, cpu or wall); a child
that crashes raises :class:`CorruptDocumentError`; the caller lives on either way.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import logging
import os
import pickle
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

from es_rag.errors import CorruptDocumentError, EsRagError, ParseLimitError

log = logging.getLogger(__name__)

_HEADER = struct.Struct("!Q")
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Limits:
    """What one call may use; see the module docstring for how each is enforced."""

    memory_mb: int = 2048
    cpu_seconds: int = 300
    wall_seconds: float = 300.0

    def __post_init__(self) -> None:
        if self.memory_mb < 64 or self.cpu_seconds < 1 or self.wall_seconds <= 0:
            raise ValueError(f"limits too small to run anything: {self}")


@dataclass
class CallStats:
    """What the last child used: wall and CPU seconds, and memory.

    ``peak_vm_growth_mb`` is what ``memory_mb`` limits: the address space the child grew
    past the server's (reported by a child that finishes by itself, else 0);
    ``peak_rss_mb`` is its peak resident size, pages shared with the server included.
    """

    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_rss_mb: float = 0.0
    peak_vm_growth_mb: float = 0.0
    server_rss_mb: float = 0.0  # the server's resident size when it forked the child


class Sandbox:
    """Calls ``module:function`` in a limited child; one call at a time, thread-safe.

    Construction does no work; the server starts on the first call and is restarted after
    anything that leaves it in doubt (a timeout on our side, an interrupt, its own death).
    """

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        env: dict[str, str] | None = None,
        shared: str | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self._env = env or {}
        # A shared server's socket (``SharedServer``): one server for every process of a
        # worker instead of one each. Unreachable, it is given up for a private server.
        self.shared = shared
        self._proc: subprocess.Popen[bytes] | None = None
        self._to: BinaryIO | None = None
        self._from: BinaryIO | None = None
        self._lock = threading.Lock()
        self.last = CallStats()

    def call(
        self,
        target: str,
        *args: Any,
        warm: str | None = None,
        limits: Limits | None = None,
    ) -> Any:
        """Run ``target`` (``"package.module:function"``) on ``args`` in a limited child.

        ``warm`` names a function the *server* runs first (once per distinct value) so that
        later children inherit its imports, e.g. the parsers for one file type.
        """
        lim = limits or self.limits
        request = pickle.dumps(
            {"target": target, "args": args, "warm": warm, "limits": lim},
            protocol=pickle.HIGHEST_PROTOCOL,
        )
        with self._lock:
            raw = self._exchange_shared(request, lim) if self.shared else None
            if raw is None:
                raw = self._exchange(request, lim)
            if raw is None:
                # The server was gone (killed while idle, say) before it answered: the
                # request gets one more go on a fresh server; the child does the parsing,
                # so a document cannot kill the server itself.
                log.warning("the parse server died; restarting it and retrying once")
                raw = self._exchange(request, lim)
            if raw is None:
                raise CorruptDocumentError("the parse server died twice while parsing this file")
        status, value, stats = pickle.loads(raw)
        self.last = stats
        if status == "ok":
            return value
        raise value

    def _exchange_shared(self, request: bytes, lim: Limits) -> bytes | None:
        """One request to the shared server, on a connection of its own; None (and the
        shared server given up for this process's own) when it cannot be reached or died
        before it answered."""
        assert self.shared is not None
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(5.0)
            conn.connect(self.shared)
            conn.settimeout(None)
            reader = cast(BinaryIO, conn.makefile("rb"))
            writer = cast(BinaryIO, conn.makefile("wb"))
            try:
                _write(writer, request)
                # An interruption (a soft time limit) closes the connection: the server's
                # handler sees it and kills the child, and the server lives on.
                raw = _read(reader, timeout=lim.wall_seconds + 30.0)
            finally:
                reader.close()
                writer.close()
        except OSError as exc:
            log.warning("shared parse server %s unreachable (%s); using one of this "
                        "process's own", self.shared, exc)  # fmt: skip
            self.shared = None
            return None
        finally:
            conn.close()
        if raw is None:
            log.warning("shared parse server %s hung up; using one of this process's own",
                        self.shared)  # fmt: skip
            self.shared = None
        return raw

    def _exchange(self, request: bytes, lim: Limits) -> bytes | None:
        """Send one request and read the answer; None if the server died meanwhile."""
        self._ensure_server()
        assert self._to is not None and self._from is not None
        try:
            _write(self._to, request)
            raw = _read(self._from, timeout=lim.wall_seconds + 30.0)
        except BrokenPipeError:
            raw = None
        except BaseException:
            # Interrupted (a Celery soft time limit, Ctrl-C) or the server is stuck: kill
            # it, with its child, rather than reason about its state.
            self._kill()
            raise
        if raw is None:
            self._kill()
        return raw

    def close(self) -> None:
        with self._lock:
            self._kill()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        with contextlib.suppress(Exception):
            self._kill()

    # --- the server process ----------------------------------------------------------------
    def _ensure_server(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._kill()
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        env = {**os.environ, **self._env}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "es_rag.sandbox", str(req_r), str(rep_w)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # libraries that print must not reach our caller's stdout
            stderr=None,
            pass_fds=(req_r, rep_w),
            env=env,
            close_fds=True,
        )
        os.close(req_r)
        os.close(rep_w)
        self._to = os.fdopen(req_w, "wb")
        self._from = os.fdopen(rep_r, "rb")

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        for stream in (self._to, self._from):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._to = self._from = None
        if proc is not None and proc.poll() is None:
            proc.kill()  # its child has PR_SET_PDEATHSIG and dies with it
            proc.wait()


# --- wire format: 8-byte length, then a pickle -----------------------------------------------
def _write(stream: BinaryIO, payload: bytes) -> None:
    stream.write(_HEADER.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def _read(stream: BinaryIO, *, timeout: float | None = None) -> bytes | None:
    """One message, or None at end of file; ``timeout`` bounds the wait for its first byte."""
    if timeout is not None:
        ready, _, _ = select.select([stream], [], [], timeout)
        if not ready:
            raise TimeoutError(f"no answer from the parse server within {timeout:.0f} s")
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


# --- server side ---------------------------------------------------------------------------
def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def _resolve(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _vm_bytes() -> int:
    """This process's current address-space size (what RLIMIT_AS counts)."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[0])
    return pages * os.sysconf("SC_PAGE_SIZE")


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _memory(baseline_vm: int) -> dict[str, float]:
    """How far this process's address space grew past ``baseline_vm`` at its peak, MB."""
    out = {"peak_vm_growth_mb": 0.0}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmPeak:"):
                    peak = int(line.split()[1]) * 1024
                    out["peak_vm_growth_mb"] = max(0, peak - baseline_vm) / 2**20
    except OSError:  # pragma: no cover - not Linux
        pass
    return out


def _child(request: dict[str, Any], out_fd: int, err_fd: int) -> None:
    """In the forked child: limit ourselves, run the target, write one pickle, exit."""
    _die_with_parent()
    os.dup2(err_fd, 2)  # native libraries' complaints go to the server, not our caller
    os.close(err_fd)
    lim: Limits = request["limits"]
    status: str
    value: Any
    baseline = _vm_bytes()
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (lim.cpu_seconds, lim.cpu_seconds + 5))
        budget = baseline + lim.memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (budget, budget))
        status, value = "ok", _resolve(request["target"])(*request["args"])
    except MemoryError:
        status, value = (
            "error",
            ParseLimitError(
                f"the parser ran out of its memory limit ({lim.memory_mb} MB)", limit="memory"
            ),
        )
    except RecursionError:
        status, value = (
            "error",
            CorruptDocumentError(
                "the document is nested too deeply for the parser (recursion limit)"
            ),
        )
    except EsRagError as exc:
        status, value = "error", exc
    except BaseException as exc:
        status, value = (
            "error",
            CorruptDocumentError(f"the parser failed: {type(exc).__name__}: {exc}"),
        )
    memory = _memory(baseline)
    try:
        payload = pickle.dumps((status, value, memory), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # an unpicklable library exception
        failed = CorruptDocumentError(f"the parser failed: {value!r} ({exc})")
        payload = pickle.dumps(("error", failed, memory))
    with os.fdopen(out_fd, "wb") as out:
        out.write(payload)
    os._exit(0)


def _wait(
    pid: int, fd: int, lim: Limits, caller: int | None = None
) -> tuple[bytes, int, Any, bool]:
    """Collect the child's output until it exits or runs out of wall clock; a ``caller``
    connection that closes meanwhile (the caller gave up) kills the child too.

    Returns (output, wait status, rusage, killed_for_wall_clock).
    """
    deadline = time.monotonic() + lim.wall_seconds
    chunks: list[bytes] = []
    killed = False
    open_fd = True
    watched = [fd] if caller is None else [fd, caller]
    while open_fd:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            killed = True
            break
        ready, _, _ = select.select(watched, [], [], min(left, 1.0))
        if caller is not None and caller in ready:
            os.kill(pid, signal.SIGKILL)  # nobody is waiting for this answer any more
            break
        if ready:
            data = os.read(fd, 1 << 20)
            if data:
                chunks.append(data)
            else:
                open_fd = False
    os.close(fd)
    _, status, usage = os.wait4(pid, 0)
    return b"".join(chunks), status, usage, killed


_OUT_OF_MEMORY = ("bad_alloc", "MemoryError", "Cannot allocate memory", "out of memory")


def _outcome(
    output: bytes, status: int, usage: Any, killed: bool, lim: Limits, stderr: str = ""
) -> tuple[str, Any, dict[str, float]]:
    """(status, value, memory) of a finished child: its own answer, or why it has none."""
    failure = _failure(status, usage, killed, lim, stderr)
    if failure is not None:
        return "error", failure, {}
    if not output:
        return (
            "error",
            CorruptDocumentError(
                f"the parser exited without an answer (status {os.WEXITSTATUS(status)})"
            ),
            {},
        )
    answer, value, memory = pickle.loads(output)
    return answer, value, memory


def _failure(status: int, usage: Any, killed: bool, lim: Limits, stderr: str) -> EsRagError | None:
    """The error for a child that was killed or crashed; None if it exited by itself."""
    cpu = usage.ru_utime + usage.ru_stime
    if killed:
        return ParseLimitError(
            f"parsing took longer than the wall-clock limit ({lim.wall_seconds:.0f} s)",
            limit="wall",
        )
    if not os.WIFSIGNALED(status):
        return None
    sig = os.WTERMSIG(status)
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= lim.cpu_seconds - 1):
        return ParseLimitError(
            f"parsing used more than its CPU limit ({lim.cpu_seconds} s)", limit="cpu"
        )
    if sig == signal.SIGKILL:
        return ParseLimitError(
            "the parser was killed by the system (out of memory?)", limit="memory"
        )
    if any(sign in stderr for sign in _OUT_OF_MEMORY):
        return ParseLimitError(
            f"the parser ran out of its memory limit ({lim.memory_mb} MB)", limit="memory"
        )
    name = signal.Signals(sig).name
    last = stderr.strip().splitlines()[-1][:200] if stderr.strip() else "no message"
    return CorruptDocumentError(f"the parser crashed on this file ({name}: {last})")


def _warm_up(request: dict[str, Any], warmed: set[str]) -> None:
    """Run the request's warm-up in the server, once per distinct one: later children
    inherit its imports."""
    warm = request.get("warm")
    if warm and warm not in warmed:
        warmed.add(warm)
        try:
            _resolve(warm)()
        except Exception as exc:  # the child will meet (and report) the same problem
            log.debug("warm-up %s failed: %s", warm, exc)


def serve(req_fd: int, rep_fd: int) -> None:
    """The parse server's loop: one request at a time, one forked child per request."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller decides when we stop
    logging.basicConfig(level=logging.ERROR)
    warmed: set[str] = set()
    with os.fdopen(req_fd, "rb") as requests, os.fdopen(rep_fd, "wb") as replies:
        while True:
            raw = _read(requests)
            if raw is None:
                return  # the caller closed the pipe or died
            request = pickle.loads(raw)
            _warm_up(request, warmed)
            reply = _fork_one(request, requests)
            _write(replies, pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


def _fork_one(
    request: dict[str, Any], requests: BinaryIO, caller: int | None = None
) -> tuple[str, Any, CallStats]:
    """Fork a child for one request, wait for it, and say how it ended."""
    lim: Limits = request["limits"]
    stats = CallStats(server_rss_mb=_rss_mb())
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as errors:
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            os.close(read_fd)
            requests.close()
            _child(request, write_fd, errors.fileno())
        os.close(write_fd)
        output, status, usage, killed = _wait(pid, read_fd, lim, caller)
        errors.seek(max(0, errors.seek(0, os.SEEK_END) - 4096))
        stderr = errors.read().decode("utf-8", "replace")
    stats.wall_s = time.monotonic() - t0
    stats.cpu_s = usage.ru_utime + usage.ru_stime
    stats.peak_rss_mb = usage.ru_maxrss / 1024
    outcome, value, memory = _outcome(output, status, usage, killed, lim, stderr)
    stats.peak_vm_growth_mb = memory.get("peak_vm_growth_mb", 0.0)
    return outcome, value, stats


class SharedServer:
    """One parse server for every process of a worker (its prefork children), on a Unix
    socket, instead of one each: the server's imports (about 1 GB with Unstructured's
    parsers) are held once.

    Started by the worker's main process before its pool forks; the children find the
    socket in ``ES_RAG_PARSE_SOCKET`` (es_rag.parsing.Parser). Each request gets a handler
    (a fork of the server) that forks the limited child as a private server does, so
    parses run side by side, each with its own limits; the server dies with its starter.
    """

    def __init__(self, path: str, *, env: dict[str, str] | None = None) -> None:
        self.path = path
        self._env = env or {}
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "es_rag.sandbox", "--socket", self.path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=None,
            env={**os.environ, **self._env},
            close_fds=True,
        )
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.path):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the shared parse server did not start at {self.path}")
            time.sleep(0.02)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()  # its handlers and their children die with it (PR_SET_PDEATHSIG)
            proc.wait()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):  # the folder made for it, if it is now empty
            os.rmdir(os.path.dirname(self.path))


def serve_socket(path: str) -> None:
    """The shared server's loop: read each request, warm up for it once, and hand it to a
    handler of its own (a fork), which runs it as ``serve`` would and answers."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.ERROR)
    warmed: set[str] = set()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound = path + ".tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(bound)
    listener.bind(bound)
    os.chmod(bound, 0o600)  # only the worker's own user may have files parsed here
    listener.listen(64)
    os.rename(bound, path)  # the path appears once it accepts
    listener.settimeout(1.0)
    while True:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass  # finished handlers
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        reader = cast(BinaryIO, conn.makefile("rb"))
        writer = cast(BinaryIO, conn.makefile("wb"))
        try:
            ready, _, _ = select.select([conn], [], [], 10.0)
            raw = _read(reader) if ready else None
        except OSError:
            raw = None
        if raw is None:  # a caller that connected and said nothing
            reader.close()
            writer.close()
            conn.close()
            continue
        request = pickle.loads(raw)
        _warm_up(request, warmed)
        if os.fork() == 0:  # pragma: no cover - runs in the handler
            try:
                _die_with_parent()
                listener.close()
                reply = _fork_one(request, reader, caller=conn.fileno())
                with contextlib.suppress(OSError):
                    _write(writer, pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
            finally:
                os._exit(0)
        reader.close()
        writer.close()
        conn.close()


if __name__ == "__main__":  # pragma: no cover - the server's entry point
    # Run the imported module's serve, not __main__'s: what it pickles back (CallStats,
    # errors) must name es_rag.sandbox, which is what the caller can unpickle.
    from es_rag import sandbox as _module

    if sys.argv[1] == "--socket":
        _module.serve_socket(sys.argv[2])
    else:
        _module.serve(int(sys.argv[1]), int(sys.argv[2]))
