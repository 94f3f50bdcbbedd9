"""`dvc plots show` draws offline: the project's DVC config points at a template with vega,
vega-lite and vega-embed inlined (vendor/vega/), and headless Chromium finds every plot drawn."""

import re
import subprocess

import pytest

from tests.browser import dump_dom
from tests.conftest import REPO

# after the page's own scripts: how many canvases hold a non-white pixel, as a body attribute
COUNT_DRAWN = """
<script>
window.addEventListener("load", () => setTimeout(() => {
  const canvases = [...document.querySelectorAll("canvas")];
  const drawn = canvases.filter((c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] > 0 && (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200)) return true;
    }
    return false;
  });
  document.body.setAttribute("data-drawn", drawn.length + "/" + canvases.length);
}, 3000));
</script>
"""


def test_dvc_plots_show_draws_every_plot_with_no_network(tmp_path):
    """The default page: one plot per env and metric (compare's tables, dvc.yaml's top-level
    plots with the `runs` template), each drawn; the GIFs beside them are images."""
    tables = sorted((REPO / "plots" / "compare").glob("*/*.tsv"))
    if not tables:
        pytest.skip("no compare tables here: run `dvc repro` (the quick start) first")
    out = tmp_path / "plots"
    dvc = REPO / ".venv" / "bin" / "dvc"
    subprocess.run([str(dvc), "plots", "show", "--out", str(out)], cwd=REPO, check=True,
                   capture_output=True)  # fmt: skip
    page = (out / "index.html").read_text()
    assert not re.search(r"<script[^>]+src=", page), "the page loads a script from elsewhere"
    plots = page.count("vegaEmbed(")
    assert plots == len(tables), (plots, tables)  # per env: return and eval_return, not per run
    assert '"field": "run"' in page  # one line per run (the runs template)
    probe = out / "probe.html"
    head, tail = page.rsplit("</body>", 1)  # the page's own; vega-embed's code holds the string too
    probe.write_text(head + COUNT_DRAWN + "</body>" + tail)
    dom = dump_dom(probe, budget_ms=20000)
    drawn = re.search(r'data-drawn="(\d+)/(\d+)"', dom)
    assert drawn, dom[-2000:]
    assert int(drawn[1]) == int(drawn[2]) == plots, drawn.group(0)
