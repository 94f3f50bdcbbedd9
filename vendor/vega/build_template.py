"""Build `dvc_plots.html`: DVC's plots page template with vega, vega-lite and vega-embed inlined,
so `dvc plots show` draws with no network (DVC's own page loads them from a CDN).

    python vendor/vega/build_template.py        # needs npm and the npm registry

The versions are the ones DVC's vega renderer asks its CDN for (dvc_render/vega.py), so the
specs DVC writes render as DVC intends. Each package's LICENSE is copied beside the template.
.dvc/config points `plots.html_template` at the result."""

from __future__ import annotations

import subprocess
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
PACKAGES = {  # npm package -> (version, the minified browser build in it)
    "vega": ("5.20.2", "build/vega.min.js"),
    "vega-lite": ("5.2.0", "build/vega-lite.min.js"),
    "vega-embed": ("6.18.2", "build/vega-embed.min.js"),
}
# dvc_render's page (PAGE_HTML) with the scripts inline instead of its {scripts} CDN tags.
PAGE = """<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <meta charset="utf-8">
    <title>DVC Plot (offline: vega %(vega)s, vega-lite %(vega-lite)s, vega-embed %(vega-embed)s)</title>
%(scripts)s
    <style>
        table {
            border-spacing: 15px;
        }
    </style>
</head>
<body>
    {plot_divs}
</body>
</html>
"""


def main() -> None:
    scripts = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (version, build) in PACKAGES.items():
            tgz = subprocess.run(
                ["npm", "pack", f"{name}@{version}", "--silent"], cwd=tmp, check=True,
                capture_output=True, text=True,
            ).stdout.strip().splitlines()[-1]  # fmt: skip
            with tarfile.open(Path(tmp) / tgz) as tar:
                js = tar.extractfile(f"package/{build}").read().decode()
                licence = tar.extractfile("package/LICENSE").read()
            for marker in ("</script", "{scripts}", "{plot_divs}", "{refresh_tag}"):
                if marker in js:
                    raise SystemExit(f"{name} {version}: {marker!r} would break the template")
            scripts.append(f"    <script>/* {name} {version}, BSD-3-Clause */\n{js}\n    </script>")
            (HERE / f"LICENSE.{name}").write_bytes(licence)
    versions = {name: version for name, (version, _) in PACKAGES.items()}
    page = PAGE % {**versions, "scripts": "\n".join(scripts)}
    (HERE / "dvc_plots.html").write_text(page)
    print(f"{HERE / 'dvc_plots.html'}: {len(page):,} bytes")


if __name__ == "__main__":
    main()
