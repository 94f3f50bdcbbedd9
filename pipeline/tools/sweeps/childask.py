"""Calling a function in a child process that a hang cannot take down with its caller: the
poller of a table's queue asks `dvc exp show` through it (ChildAsk)."""

from __future__ import annotations

import os
import time
from typing import Any

from pipeline.tools.sweeps.table import SweepError

STALL_S = 600.0  # ChildAsk: an ask whose process uses no CPU this long has hung


class ChildAsk:
    """Calls a function (exp_rows) in a child process of its own, kept from call to call (DVC is
    imported once), so that a call that hangs cannot stop the process that waits on the queue.

    Why: a poller's `dvc exp show` once hung for good. DVC reads git blobs through pygit2's
    BlobIO, whose writer thread raised `NotFoundError: object not found` (an experiment's
    object removed while it was read), and the reader then waited on an event that no one
    would set; the poller's CPU time stopped, and with it every result's commit. A call whose
    child uses no CPU time (user and system, its threads included) for `stall_s` seconds is
    therefore taken as hung: the child is killed, the call raises SweepError (which
    settled_rows asks again, in a new child). Driven by the child's progress, not the clock: a
    slow call that computes is never cut, and one at nice 19 waiting for a busy CPU is
    runnable and gets its share. `cpu_s` sums the children's CPU time over every call, for the
    poller's pacing (a poller's own CPU time does not hold it)."""

    def __init__(self, stall_s: float = STALL_S, poll_s: float = 1.0) -> None:
        self.stall_s, self.poll_s = stall_s, poll_s
        self.cpu_s = 0.0
        self._proc: Any = None  # multiprocessing.Process
        self._conn: Any = None  # its end of the pipe

    def __call__(self, fn: Any, *args: Any) -> Any:
        import psutil

        if self._proc is None or not self._proc.is_alive():
            self._start()
        proc = psutil.Process(self._proc.pid)
        seen = before = _cpu(proc)
        still_since = time.monotonic()
        self._conn.send((fn, args))
        try:
            while True:
                gone = False
                if self._conn.poll(self.poll_s):
                    try:
                        kind, value = self._conn.recv()
                        break
                    except EOFError:  # the child's end closed: it died
                        gone = True
                if gone or not self._proc.is_alive():
                    self._proc.join()
                    code = self._proc.exitcode
                    self.close()
                    raise SweepError(f"{fn.__name__}{args}: its child process died (exit code "
                                     f"{code}) before it answered")  # fmt: skip
                now = _cpu(proc)
                if now > seen:
                    seen, still_since = now, time.monotonic()
                elif time.monotonic() - still_since >= self.stall_s:
                    self.close()
                    raise SweepError(
                        f"{fn.__name__}{args}: its child process used no CPU for "
                        f"{self.stall_s:.0f} s: hung (pygit2's BlobIO waits forever when its "
                        "writer thread fails), killed"
                    )
        except BaseException:
            self.cpu_s += max(0.0, seen - before)
            raise
        if kind == "error":
            self.cpu_s += max(0.0, _cpu(proc) - before)
            raise value
        result, total = value
        self.cpu_s += max(0.0, total - before)
        return result

    def _start(self) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")  # no copy of the caller's threads or locks
        self._conn, theirs = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(theirs,), daemon=True)
        self._proc.start()
        theirs.close()

    def close(self) -> None:
        """Kill the child (the next call starts another)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.join()
            self._proc = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _cpu(proc: Any) -> float:
    """A psutil process's CPU time, user and system, its threads included; 0 when it is gone."""
    import psutil

    try:
        t = proc.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return t.user + t.system


def _serve(conn: Any) -> None:
    """ChildAsk's child: answer each (fn, args) with ("ok", (value, cpu time so far)) or
    ("error", the exception) until the pipe closes."""
    import pickle

    while True:
        try:
            fn, args = conn.recv()
        except EOFError:  # the caller closed its end or died
            return
        try:
            value = fn(*args)
            t = os.times()
            conn.send(("ok", (value, t.user + t.system)))
        except Exception as exc:
            try:
                pickle.dumps(exc)
            except Exception:
                exc = SweepError(f"{fn.__name__}{args}: {type(exc).__name__}: {exc}")
            conn.send(("error", exc))
