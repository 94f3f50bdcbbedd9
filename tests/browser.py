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
    reader's browser shows, as text."""
    result = subprocess.run(
        [
            chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--allow-file-access-from-files", f"--virtual-time-budget={budget_ms}",
            "--enable-logging=stderr", "--v=0", "--dump-dom", page.resolve().as_uri(),
        ],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"chromium failed on {page}:\n{result.stderr[-3000:]}"
    return result.stdout + "\n<!-- console -->\n" + _console(result.stderr)


def _console(stderr: str) -> str:
    return "\n".join(line for line in stderr.splitlines() if "CONSOLE" in line)
