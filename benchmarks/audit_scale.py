"""The audit page at scale: build time, page size and load time in headless Chromium, for the
default pipeline's page and for a synthetic 10^5-row label table, with screenshots.

The large table is real pipeline output, only bigger: MountainCar-v0 random rollouts of
`--frames` frames, labelled by the scripted teacher (reliability 0.8) on every frame for all four
tasks (4 rows per frame: 25,000 frames give 10^5 rows). Load time is what the page itself
measures: `performance.now()` when its last script has run (HTML and JSON parsed, timeline and
first browser page drawn), read back with `chromium --headless --dump-dom`; the median of
`--repeats` loads. Needs Debian's `chromium` (apt-get install chromium).

    python -m benchmarks.audit_scale --frames 25000 --out reports/audit_scale
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from pipeline.core.config import CollectConfig, LabelConfig, load_params
from pipeline.teach.labelling.audit import write_audit
from pipeline.teach.labelling.label import label_rollouts
from pipeline.teach.rollouts.collect import collect
from pipeline.teach.teachers.scripted import ScriptedTeacher

ENV = "MountainCar-v0"
_PROBE = "<script>document.title = 'loaded ' + performance.now().toFixed(0);</script></body>"


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    raise SystemExit("no chromium on PATH: apt-get install chromium")


def load_ms(page: Path, repeats: int) -> float:
    """Median in-page load time (ms) of `page` with a probe appended to a copy of it."""
    probed = page.with_name(page.stem + ".probe.html")
    probed.write_text(page.read_text().replace("</body>", _PROBE, 1))
    times = []
    for _ in range(repeats):
        out = subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
             "--virtual-time-budget=60000", probed.resolve().as_uri()],
            capture_output=True, text=True, timeout=600, check=True,
        ).stdout  # fmt: skip
        match = re.search(r"<title>loaded (\d+)</title>", out)
        if match is None:
            raise RuntimeError(f"{page}: the page's scripts did not finish (no probe title)")
        times.append(float(match.group(1)))
    probed.unlink()
    return statistics.median(times)


def screenshot(page: Path, png: Path, height: int) -> None:
    subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size=1200,{height}", f"--screenshot={png.resolve()}", page.resolve().as_uri()],
        capture_output=True, timeout=600, check=True,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=25_000)
    parser.add_argument("--default-env", default="CarRacing-v3")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("reports/audit_scale"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    params = load_params("params.yaml")
    rows = []

    env = args.default_env
    default = args.out / f"default-{env}.html"
    started = time.perf_counter()
    write_audit(f"data/rollouts/{env}", f"data/labels/{env}.parquet", default,
                f"data/masks/{env}.parquet")  # fmt: skip
    rows.append(("default " + env, time.perf_counter() - started, default))

    rollouts = args.out / "rollouts"
    episodes = max(1, args.frames // 200)
    started = time.perf_counter()
    collect(ENV, params.env[ENV].model_copy(update={"max_episode_steps": 200}),
            CollectConfig(behaviour="random", episodes=episodes, seed=0, shard_max_samples=5000),
            rollouts, progress=True)  # fmt: skip
    collect_s = time.perf_counter() - started
    labels = args.out / "labels.parquet"
    cfg = LabelConfig(**{**params.label.for_env(ENV).model_dump(), "tasks": {t: 1 for t in ("action", "milestone", "objects", "judge")}})  # fmt: skip
    started = time.perf_counter()
    label_rollouts(rollouts, cfg, ScriptedTeacher(0.8, 0), args.out / "cache", labels)
    label_s = time.perf_counter() - started
    big = args.out / "large.html"
    started = time.perf_counter()
    audit = write_audit(rollouts, labels, big)
    rows.append((f"{len(audit['browse']['rows']):,} rows", time.perf_counter() - started, big))

    print(f"\nsynthetic table: collect {collect_s:.0f} s, label {label_s:.0f} s")
    print(f"{'page':28}{'build s':>10}{'size MB':>10}{'load ms':>10}")
    for name, build_s, page in rows:
        ms = load_ms(page, args.repeats)
        screenshot(page, page.with_suffix(".png"), 2400)
        print(f"{name:28}{build_s:>10.1f}{page.stat().st_size / 1e6:>10.1f}{ms:>10.0f}")


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
