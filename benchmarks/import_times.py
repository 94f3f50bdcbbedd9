"""What starting a stage costs before it does anything: the import time of each stage module, and
how much of it is torch, measured in fresh interpreters (`python -X importtime`).

The default `dvc repro` starts one Python process per stage (62 of them), so an import paid by
every stage is paid 62 times, and `dvc status`/no-op reruns pay none of it (DVC hashes, it imports
no stage). For each module: the median over `--repeats` fresh processes of the whole import
(`stages.<name>`'s cumulative time), torch's cumulative time when it is imported at all, and the
chain of project modules through which torch first came in. The bare interpreter's start (`-c
pass`) is measured in the same run as the baseline.

    python -m benchmarks.import_times                 # every stage module, 3 repeats
    python -m benchmarks.import_times --modules stages.label stages.verify --repeats 5

Runs in plain subprocesses of this interpreter: no benchmark code is imported into them (this
package's `__init__` sets BLAS switches a stage never sees).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# `import time: self [us] | cumulative | imported package`
_LINE = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")

# Run in the child: the project modules on the stack when torch is first imported.
_CHAIN = """
import builtins, sys
orig, stack, found = builtins.__import__, [], []
def hook(name, globals=None, locals=None, fromlist=(), level=0):
    caller = (globals or {}).get("__name__", "?")
    if not found and "torch" not in sys.modules and (name == "torch" or name.startswith("torch.")):
        found.append([m for m in stack if m.startswith(("pipeline", "stages"))] + [caller])
    stack.append(caller)
    try:
        return orig(name, globals, locals, fromlist, level)
    finally:
        stack.pop()
builtins.__import__ = hook
import %s
print(" <- ".join(reversed(found[0])) if found else "-")
"""


def stage_modules() -> list[str]:
    return sorted(
        f"stages.{p.stem}" for p in (REPO / "stages").glob("*.py") if p.stem != "__init__"
    )


def import_times(module: str) -> tuple[float, float]:
    """(whole import of `module`, torch's cumulative import) in seconds, one fresh process."""
    code = "pass" if module == "-" else f"import {module}"
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    whole = torch = 0.0
    for line in result.stderr.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        cumulative, name = int(match.group(2)) / 1e6, match.group(4)
        if name == module:
            whole = cumulative
        if name == "torch":
            torch = cumulative
    return whole, torch


def torch_chain(module: str) -> str:
    """How torch first came into `module`'s import: project modules, innermost first."""
    result = subprocess.run(
        [sys.executable, "-c", _CHAIN % module], cwd=REPO, capture_output=True, text=True
    )
    if result.returncode != 0:
        return f"(failed: {result.stderr.strip().splitlines()[-1]})"
    return result.stdout.strip() or "-"


def start_time(repeats: int) -> float:
    """The bare interpreter's start, the baseline every row pays."""
    times = []
    for _ in range(repeats):
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "pass"],
            cwd=REPO, capture_output=True, text=True, check=True,
        )  # fmt: skip
        times.append(
            sum(int(m.group(1)) for m in map(_LINE.match, result.stderr.splitlines()) if m) / 1e6
        )
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--modules", nargs="+", default=None, help="default: every stage module")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per module")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        raise SystemExit("--repeats must be >= 1")
    modules = args.modules or stage_modules()
    base = start_time(args.repeats)
    print(f"interpreter start (imports of `-c pass`): {base:.3f} s, median of {args.repeats}")
    print(f"{'module':28s} {'import s':>9s} {'torch s':>8s} {'torch %':>8s} {'x start':>8s}  "
          "torch came in through")  # fmt: skip
    total = 0.0
    for module in modules:
        rows = [import_times(module) for _ in range(args.repeats)]
        whole = statistics.median(r[0] for r in rows)
        torch = statistics.median(r[1] for r in rows)
        total += whole
        share = f"{100 * torch / whole:.0f}" if whole and torch else "-"
        print(f"{module:28s} {whole:9.2f} {torch:8.2f} {share:>8s} {whole / base:8.1f}  "
              f"{torch_chain(module) if torch else '-'}")  # fmt: skip
    print(f"sum over the {len(modules)} modules: {total:.1f} s (each stage process pays its own)")
    return 0


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
