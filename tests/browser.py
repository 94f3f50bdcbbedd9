"""Headless Chromium for the tests that must see what a browser draws (Debian's `chromium`).

Where no Chromium is installed these tests skip with the command that installs it; CI installs it
and sets VLMRL_REQUIRE_CHROMIUM=1, so there a missing browser fails instead of skipping."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium() -> str:
    """The browser's path, or skip (fail under VLMRL_REQUIRE_CHROMIUM=1)."""
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    message = "no headless Chromium (apt-get install chromium)"
    if os.environ.get("VLMRL_REQUIRE_CHROMIUM") == "1":
        pytest.fail(message + " and VLMRL_REQUIRE_CHROMIUM=1")
    pytest.skip(message)


def dump_dom(page: Path, *, budget_ms: int = 5000) -> str:
    """The page's DOM after its scripts ran (`--dump-dom`), with the console's messages: what a
    reader's browser shows, as text.

    Chromium prints the DOM and then exits, but now and then it does not exit: once in CI it was
    still running after 180 s with the dump under way. So the dump is read as it comes, and once
    its closing `</html>` line is in, the browser is stopped: the test waits on the page's own
    output, not on the browser's exit. A watchdog kills a browser that has not printed the whole
    DOM within 180 s (the bound the test always had), and the test then fails naming it."""
    import tempfile
    import threading

    command = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--allow-file-access-from-files", f"--virtual-time-budget={budget_ms}",
        "--enable-logging=stderr", "--v=0", "--dump-dom", page.resolve().as_uri(),
    ]  # fmt: skip
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True)
        watchdog = threading.Timer(180, process.kill)
        watchdog.start()
        lines, complete = [], False
        try:
            assert process.stdout is not None
            for line in process.stdout:
                lines.append(line)
                if line.rstrip().endswith("</html>"):
                    complete = True
                    break
        finally:
            watchdog.cancel()
            if process.poll() is None:
                process.terminate()
            process.wait()
        errors.seek(0)
        stderr = errors.read()
    assert complete, (
        f"chromium printed no whole DOM for {page} (exit {process.returncode}):\n{stderr[-3000:]}"
    )
    return "".join(lines) + "\n<!-- console -->\n" + _console(stderr)


def _console(stderr: str) -> str:
    return "\n".join(line for line in stderr.splitlines() if "CONSOLE" in line)
