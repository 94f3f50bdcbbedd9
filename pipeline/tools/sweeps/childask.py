"""Calling a function in a child process that a hang cannot take down with its caller: the
poller of a table's queue asks `dvc exp show` through it (ChildAsk)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
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
    poller's pacing (a poller's own CPU time does not hold it).

    The child is `python -m pipeline.tools.sweeps.childask FD`, not a multiprocessing one: that
    would import the caller's main module again and leave a resource tracker, a child that
    lives as long as its parent (a test that reaps every child of its process waited on it)."""

    def __init__(self, stall_s: float = STALL_S, poll_s: float = 1.0) -> None:
        self.stall_s, self.poll_s = stall_s, poll_s
        self.clock = time.monotonic  # what stall_s is measured on
        self.cpu_s = 0.0
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None  # our end of the socket pair

    def __call__(self, fn: Any, *args: Any) -> Any:
        import psutil

        if self._proc is None or self._conn is None or self._proc.poll() is not None:
            self.close()
            self._start()
        assert self._proc is not None and self._conn is not None
        proc = psutil.Process(self._proc.pid)
        seen = before = _cpu(proc)
        still_since = self.clock()
        try:
            self._conn.send((fn, args))
            while True:
                gone = False
                if self._conn.poll(self.poll_s):
                    try:
                        kind, value = self._conn.recv()
                        break
                    except (EOFError, ConnectionResetError):  # its end closed: it died
                        gone = True
                if gone or self._proc.poll() is not None:  # reaped by another: code 0
                    code = self._proc.wait()
                    self.close()
                    raise SweepError(f"{fn.__name__}{args}: its child process died (exit code "
                                     f"{code}) before it answered")  # fmt: skip
                now = _cpu(proc)
                if now > seen:
                    seen, still_since = now, self.clock()
                elif self.clock() - still_since >= self.stall_s:
                    self.close()
                    raise SweepError(
                        f"{fn.__name__}{args}: its child process used no CPU for "
                        f"{self.stall_s:.0f} s: hung (pygit2's BlobIO waits forever when its "
                        "writer thread fails), killed"
                    )
        except BrokenPipeError as exc:  # it died before the call reached it
            self.close()
            raise SweepError(f"{fn.__name__}{args}: its child process died") from exc
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
        ours, theirs = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "pipeline.tools.sweeps.childask", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, env=_callers_path(),
            )  # fmt: skip
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())

    def close(self) -> None:
        """Kill the child (the next call starts another)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
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


def _serve(conn: Connection) -> None:
    """ChildAsk's child: answer each (fn, args) with ("ok", (value, cpu time so far)) or
    ("error", the exception) until the caller closes its end or dies (a poller stopped while its
    child asked DVC: the answer has no one to go to, and the child ends quietly)."""
    import pickle

    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, ConnectionResetError):  # the caller closed its end or died
            return
        try:
            value = fn(*args)
            t = os.times()
            answer: tuple[str, Any] = ("ok", (value, t.user + t.system))
        except Exception as exc:
            try:
                pickle.dumps(exc)
            except Exception:
                exc = SweepError(f"{fn.__name__}{args}: {type(exc).__name__}: {exc}")
            answer = ("error", exc)
        try:
            conn.send(answer)  # pickled whole before a byte is written
        except (BrokenPipeError, ConnectionResetError):  # the caller died while fn ran
            return
        except Exception as exc:  # the value does not pickle
            conn.send(("error", SweepError(f"{fn.__name__}{args}: its value cannot be sent "
                                           f"back ({type(exc).__name__}: {exc})")))  # fmt: skip


def _callers_path() -> dict[str, str]:
    """The environment, with the folder that holds the caller's `pipeline` first on the child's
    path. With -P the child never imports a `pipeline` from its working folder (a table's clone
    at an older commit has one without this module), and it unpickles what its caller passes
    from modules beside that folder (a test's functions)."""
    import pipeline

    root = os.path.dirname(os.path.dirname(os.path.abspath(pipeline.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
