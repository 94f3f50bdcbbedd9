"""Which stage outputs a rebuild changed: every out of dvc.lock whose md5 differs from the
committed one, one line each, so that CI's log names them all (a raw diff of dvc.lock is cut off
after its first stages). Run from the repository root after `dvc repro`."""

import subprocess
import sys

import yaml


def outs(text: str) -> dict[tuple[str, str], str]:
    stages = yaml.safe_load(text)["stages"]
    return {(s, o["path"]): o.get("md5", "") for s, b in stages.items() for o in b.get("outs", [])}


def main() -> int:
    committed = subprocess.run(
        ["git", "show", "HEAD:dvc.lock"], capture_output=True, text=True, check=True
    ).stdout
    with open("dvc.lock") as file:
        before, after = outs(committed), outs(file.read())
    changed = sorted(k for k in after if before.get(k) != after[k])
    for stage, path in changed:
        print(f"  {stage}: {path} {before.get((stage, path), '(new)')} -> {after[(stage, path)]}")
    print(f"{len(changed)} of {len(after)} stage outputs differ from the committed dvc.lock")
    return 0


if __name__ == "__main__":
    sys.exit(main())
