import polars as pl
import pytest

from pipeline.teach.labelling.audit import build_audit, render_audit, write_audit
from pipeline.teach.labelling.label import label_rollouts
from pipeline.teach.rollouts.collect import collect
from pipeline.teach.teachers.baselines import ConstantTeacher
from pipeline.teach.teachers.scripted import ScriptedTeacher
from tests.browser import dump_dom
from tests.conftest import collect_cfg, env_cfg, label_cfg

TASKS = {"action": 2, "milestone": 2, "objects": 4, "judge": 2}


@pytest.fixture(scope="module")
def rollouts(collected):
    return collected("MountainCarContinuous-v0", episodes=2, max_episode_steps=30)


def _labels(rollouts, tmp_path, teacher):
    path = tmp_path / "labels.parquet"
    label_rollouts(
        rollouts, label_cfg(tasks=TASKS), teacher, tmp_path / "cache", path,
        telemetry_dir=tmp_path / "telemetry", progress=False,
    )  # fmt: skip
    return path


def test_reliable_scripted_teacher_agrees_with_its_reference(rollouts, tmp_path):
    audit = build_audit(rollouts, _labels(rollouts, tmp_path, ScriptedTeacher(1.0, 0)))
    assert audit["status_by_task"]["action"] == {"ok": 2 * 16}
    assert all(s["rate"] == 1.0 for s in audit["agreement"].values())
    assert audit["failures"] == [] and audit["disagreements"] == []


def test_audit_counts_failures_and_shows_frames_beside_raw_answers(rollouts, tmp_path):
    labels = _labels(rollouts, tmp_path, ScriptedTeacher(0.5, 0))
    audit = write_audit(
        rollouts, labels, tmp_path / "audit.html", telemetry_dir=tmp_path / "telemetry"
    )
    table = pl.read_parquet(labels).filter(pl.col("queried"))
    for task, counts in audit["status_by_task"].items():
        assert sum(counts.values()) == table.filter(pl.col("task") == task).height
    assert audit["failures"] and all(
        f["thumbnail"].startswith("data:image/png;base64,") for f in audit["failures"]
    )
    assert audit["agreement"]["action"]["rate"] < 1.0
    assert {"p50", "p90", "p99"} <= set(audit["latency"]["action"])
    assert audit["latency"]["action"]["unrecorded"] == 0
    page = (tmp_path / "audit.html").read_text()
    # wall-clock values stay beside the page, never in it (the page is a DVC output)
    assert '<script src="audit.telemetry.js">' in page and "p50" not in page.split("<script")[0]
    assert "window.VLMRL_TELEMETRY" in (tmp_path / "audit.telemetry.js").read_text()
    assert "Parse status by task" in page and "stand-in for a VLM" in page
    failure = audit["failures"][0]
    assert failure["status"] in page and failure["key"] in page


def test_latency_section_renders_in_chromium(rollouts, tmp_path):
    """The page's own script fills the latency table from the telemetry side file: in a real
    browser, not only in the template's source (a JS syntax error once left it empty)."""
    labels = _labels(rollouts, tmp_path, ScriptedTeacher(0.5, 0))
    write_audit(rollouts, labels, tmp_path / "audit.html", telemetry_dir=tmp_path / "telemetry")
    dom = dump_dom(tmp_path / "audit.html")
    latency = dom.split('id="latency"')[1].split("</div>")[0]
    assert "<th>p50</th>" in latency and "No call telemetry" not in latency, latency[:500]
    for task in TASKS:
        assert f'<td class="l">{task}</td>' in latency
    assert "SyntaxError" not in dom and "Uncaught" not in dom, dom.split("<!-- console -->")[1]


def test_worst_model_disagrees_and_raw_text_is_escaped(rollouts, tmp_path):
    audit = build_audit(rollouts, _labels(rollouts, tmp_path, ConstantTeacher()))
    assert (
        audit["agreement"]["milestone"]["rate"] < 1.0 or audit["agreement"]["action"]["rate"] < 1.0
    )
    evil = "</script><script>alert(1)</script><!--"
    audit["failures"].append(
        {**audit["disagreements"][0], "raw": evil, "status": "x", "detail": ""}
    )
    audit["failure_kinds"].append((audit["disagreements"][0]["task"], "x", 1, 1))
    audit["browse"]["rows"][0][audit["browse"]["columns"].index("raw")] = evil  # the JSON block
    page = render_audit(audit)
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
    assert "\\u003c/script>\\u003cscript>alert(1)" in page  # inert inside the JSON block


def test_audit_shows_masks_over_their_frames(rollouts, tmp_path):
    from pipeline.core.config import MasksConfig
    from pipeline.teach.masks import make_mask_backend
    from pipeline.teach.masks.compute import compute_masks

    labels = _labels(rollouts, tmp_path, ScriptedTeacher(1.0, 0))
    backend = make_mask_backend(MasksConfig(backend="scripted", batch_size=8))
    compute_masks(
        rollouts,
        labels,
        backend,
        tmp_path / "mc",
        tmp_path / "m.parquet",
        batch_size=8,
        progress=False,
    )
    audit = write_audit(rollouts, labels, tmp_path / "a.html", tmp_path / "m.parquet")
    assert 0 < len(audit["masks"]) <= 6
    example = audit["masks"][0]
    assert [p["phrase"] for p in example["phrases"]] == ["car", "hill", "flag"]
    assert example["overlay"].startswith("data:image/png;base64,")
    assert "Masks over frames" in (tmp_path / "a.html").read_text()


def test_page_holds_every_answer_the_timelines_and_a_second_teacher(rollouts, tmp_path):
    """The browser's data holds every row; frames are capped (and the page says so); the
    comparison with a second label table is on the page; the stage runs it from the CLI."""
    import json
    import re

    from stages import audit as audit_stage

    weak = _labels(rollouts, tmp_path / "weak", ScriptedTeacher(0.5, 0))
    reference = _labels(rollouts, tmp_path / "ref", ScriptedTeacher(1.0, 0))
    audit = build_audit(rollouts, weak, against=reference, max_frames=5)
    table = pl.read_parquet(weak)
    assert len(audit["browse"]["rows"]) == table.height
    assert len(audit["browse"]["frames"]) == 5 and audit["browse"]["frames_total"] == 62
    assert sorted(audit["timelines"]) == [0, 1]
    comparison = audit["comparison"]
    assert comparison["b"].startswith("scripted:v2:reliability=1")
    assert comparison["tasks"]["action"]["rate"] == audit["agreement"]["action"]["rate"]
    for task, status, shown, total in audit["failure_kinds"]:
        rows = table.filter(pl.col("queried") & (pl.col("task") == task))
        assert total == rows.filter(pl.col("parse_status") == status).height and shown <= 6

    out = tmp_path / "page.html"
    assert audit_stage.main(["--rollouts", str(rollouts), "--labels", str(weak), "--out", str(out),
                             "--against", str(reference), "--max-frames", "5"]) == 0  # fmt: skip
    page = out.read_text()
    assert "Two teachers on the same frames" in page and "Episode timeline" in page
    block = re.search(r'id="review-data">(.*?)</script>', page, re.S).group(1)
    data = json.loads(block)
    assert len(data["browse"]["rows"]) == table.height and "<" not in block
    assert any(f"{shown} of {total}" in page for _, _, shown, total in audit["failure_kinds"])
    assert audit_stage.main(["--rollouts", str(rollouts), "--labels", str(weak), "--out",
                             str(out), "--against", str(tmp_path / "none.parquet")]) == 2  # fmt: skip


def test_one_huge_answer_does_not_make_a_huge_page_or_export(rollouts, tmp_path):
    """A 5 MB answer (or correction) is kept whole in the label table; the page and the Label
    Studio export show a bounded part of it and say how much more there is."""
    from pipeline.teach.labelling.exchange import export_label_studio

    labels = _labels(rollouts, tmp_path, ScriptedTeacher(0.5, 0))
    small = render_audit(build_audit(rollouts, labels))
    table = pl.read_parquet(labels)
    huge = "objects: " + ", ".join(f"thing {i}" for i in range(600_000))
    first = (pl.col("task") == "objects") & pl.col("queried")
    index = table.with_row_index().filter(first)["index"][0]
    bloated = table.with_columns(
        raw_text=pl.when(pl.int_range(pl.len()) == index).then(pl.lit(huge)).otherwise("raw_text"),
        parse_detail=pl.when(pl.int_range(pl.len()) == index)
        .then(pl.lit("x" * 1_000_000))
        .otherwise("parse_detail"),
        objects=pl.when(pl.int_range(pl.len()) == index)
        .then(pl.lit([f"thing {i}" for i in range(100_000)]))
        .otherwise("objects"),
    )
    assert len(huge) > 5_000_000
    bloated.write_parquet(labels)
    page = render_audit(build_audit(rollouts, labels))
    assert len(page) - len(small) < 20_000, len(page) - len(small)
    assert "more characters in the label table" in page
    export_label_studio(rollouts, labels, tmp_path / "export", tasks=["objects"])
    exported = (tmp_path / "export" / "objects.json").read_text()
    assert len(exported) < 1_000_000 and "more characters in the label table" in exported


# filters by the reference and by text, sorts by status, exports the selection; the results go
# into attributes of <body> that the dumped DOM carries
FILTER_DRIVE = """<script>
window.addEventListener("load", function () {
  var el = function (id) { return document.getElementById(id); }, b = document.body;
  var fire = function (node) { node.dispatchEvent(new Event("change")); };
  var count = function () { return document.querySelectorAll("#br-table tr[data-i]").length; };
  el("f-reference").value = "0"; fire(el("f-reference"));
  b.setAttribute("data-disagree", el("br-count").textContent);
  el("br-export").click();
  b.setAttribute("data-exported", el("br-export").getAttribute("data-exported"));
  el("f-reference").value = ""; fire(el("f-reference"));
  el("f-text").value = "ZZZ-NOWHERE"; el("f-text").oninput();
  b.setAttribute("data-nothing", el("br-count").textContent);
  el("f-text").value = ""; el("f-text").oninput();
  document.querySelector('#br-table th[data-col="status"]').click();
  var statuses = Array.prototype.map.call(
    document.querySelectorAll("#br-table tr[data-i] td:nth-child(3)"), function (td) { return td.textContent; });
  b.setAttribute("data-sorted", JSON.stringify(statuses));
  b.setAttribute("data-rows", count());
});
</script></body>"""


def test_the_browser_filters_by_the_reference_and_text_sorts_and_exports(rollouts, tmp_path):
    """Wrong but well-formed answers are found: the reference filter lists exactly the rows that
    disagree with the fully reliable script, the text filter narrows, a header click sorts, and
    "export this selection" hands over every listed row (headless Chromium)."""
    import json
    import re

    labels = _labels(rollouts, tmp_path, ScriptedTeacher(0.5, 0))
    audit = write_audit(rollouts, labels, tmp_path / "audit.html")
    browse = audit["browse"]
    column = {c: i for i, c in enumerate(browse["columns"])}
    disagree = [r for r in browse["rows"] if r[column["agrees"]] == 0 and r[column["queried"]]]
    assert disagree and len(disagree) == sum(audit["disagreement_counts"].values())
    page = (tmp_path / "audit.html").read_text()
    (tmp_path / "driven.html").write_text(page.replace("</body>", FILTER_DRIVE, 1))
    dom = dump_dom(tmp_path / "driven.html")
    body = re.search(r"<body([^>]*)>", dom).group(1)
    attrs = dict(re.findall(r'data-([a-z]+)="([^"]*)"', body))
    assert attrs["disagree"].endswith(f"of {len(disagree)} (of {len(browse['rows'])} in the table)")
    assert attrs["exported"] == str(len(disagree))
    assert attrs["nothing"] == "no row matches"
    statuses = json.loads(attrs["sorted"].replace("&quot;", '"'))
    assert int(attrs["rows"]) == len(statuses) > 1 and statuses == sorted(statuses)
    assert "Uncaught" not in dom, dom.split("<!-- console -->")[1]
    # the disagreement examples jump to their row in the browser
    first = audit["disagreements"][0]
    assert f'class="jump" href="#br-detail" data-key="{first["key"]}"' in page


def _round_rollouts(tmp_path, k: int):
    """Episodes of a labelling round k (an acting behaviour recorded as round k's agent), with
    episode numbers and sample keys that collide with the static rollouts'."""
    import gymnasium as gym

    from pipeline.teach.rollouts.behaviours import RandomBehaviour
    from pipeline.teach.rollouts.collect import Acting

    space = gym.make("MountainCarContinuous-v0").action_space
    out = tmp_path / f"round{k}" / "rollouts"
    acting = Acting(RandomBehaviour(space), {"round": k, "run": "r", "agent": "models/r",
                                             "agent_sha256": "0" * 64, "explore": "sample"})  # fmt: skip
    collect("MountainCarContinuous-v0", env_cfg(max_episode_steps=20),
            collect_cfg(behaviour="agent", episodes=2, seed=k), out, acting=acting,
            progress=False)  # fmt: skip
    return out


ROUND_DRIVE = """<script>
window.addEventListener("load", function () {
  var el = function (id) { return document.getElementById(id); }, b = document.body;
  var r = el("f-round");
  b.setAttribute("data-shown", el("f-round-label").style.display !== "none");
  b.setAttribute("data-options", JSON.stringify(Array.prototype.map.call(r.options,
    function (o) { return o.textContent; })));
  r.value = "1"; r.dispatchEvent(new Event("change"));
  b.setAttribute("data-count", el("br-count").textContent);
  b.setAttribute("data-cells", JSON.stringify(Array.prototype.map.call(
    document.querySelectorAll("#br-table tr[data-i] td:first-child"), function (td) { return td.textContent; })));
  b.setAttribute("data-episodes", JSON.stringify(Array.prototype.map.call(
    el("tl-episode").options, function (o) { return o.textContent; })));
});
</script></body>"""


def test_a_rounds_page_lists_every_label_of_the_run_with_its_round(rollouts, tmp_path):
    """A labelling round's page lists the static labels (round 0) and earlier rounds' with its
    own: every row with its round, keys and episodes kept apart although each round numbers its
    own from 0, the reference checked on every round's frames; in the browser a round filter
    lists exactly that round's rows (headless Chromium)."""
    import json
    import re

    from pipeline.teach.labelling.audit import EarlierLabels

    teacher = ScriptedTeacher(0.5, 0)
    static = _labels(rollouts, tmp_path / "r0", teacher)
    r1, r2 = _round_rollouts(tmp_path, 1), _round_rollouts(tmp_path, 2)
    l1 = _labels(r1, tmp_path / "r1", teacher)
    l2 = _labels(r2, tmp_path / "r2", teacher)
    earlier = [EarlierLabels(0, rollouts, static), EarlierLabels(1, r1, l1)]
    audit = write_audit(r2, l2, tmp_path / "audit.html", earlier=earlier)

    tables = {k: pl.read_parquet(p) for k, p in ((0, static), (1, l1), (2, l2))}
    browse = audit["browse"]
    column = {c: i for i, c in enumerate(browse["columns"])}
    rows = browse["rows"]
    assert audit["rows"] == len(rows) == sum(t.height for t in tables.values())
    for k, table in tables.items():
        mine = [r for r in rows if r[column["round"]] == k]
        assert len(mine) == table.height
        assert {r[column["sample_key"]] for r in mine} == {
            f"round{k}/{key}" for key in table["sample_key"]
        }
    assert len({(r[column["sample_key"]], r[column["task"]]) for r in rows}) == len(rows)
    # each round numbers its episodes from 0: on the page they follow one another
    assert len(audit["timelines"]) == sum(t["episode"].n_unique() for t in tables.values())
    assert audit["episode_names"][0] == "round 0, episode 0"
    assert sorted(n for n in audit["episode_names"].values() if n.startswith("round 2")) == [
        "round 2, episode 0", "round 2, episode 1"
    ]  # fmt: skip
    assert sum(s["n"] for s in audit["agreement"].values()) > 0
    assert [r["round"] for r in audit["rounds"]] == [0, 1, 2]

    page = (tmp_path / "audit.html").read_text()
    (tmp_path / "driven.html").write_text(page.replace("</body>", ROUND_DRIVE, 1))
    dom = dump_dom(tmp_path / "driven.html")
    attrs = dict(re.findall(r'data-([a-z]+)="([^"]*)"', re.search(r"<body([^>]*)>", dom).group(1)))
    assert attrs["shown"] == "true"
    assert json.loads(attrs["options"].replace("&quot;", '"')) == ["any", "0", "1", "2"]
    queried_1 = tables[1].filter(pl.col("queried")).height  # "queried only" is on by default
    assert attrs["count"].startswith(f"rows 1-{min(50, queried_1)} of {queried_1} ")
    assert set(json.loads(attrs["cells"].replace("&quot;", '"'))) == {"1"}
    assert "round 1, episode 0" in json.loads(attrs["episodes"].replace("&quot;", '"'))
    assert "Uncaught" not in dom, dom.split("<!-- console -->")[1]


def test_a_single_rounds_page_hides_the_round_filter(rollouts, tmp_path):
    """The env's own page (one round) keeps its keys and episode numbers and shows no round
    filter; listing a round twice is refused."""
    import re

    from pipeline.teach.labelling.audit import EarlierLabels

    labels = _labels(rollouts, tmp_path, ScriptedTeacher(1.0, 0))
    audit = write_audit(rollouts, labels, tmp_path / "audit.html")
    assert audit["rounds"] == [] and audit["episode_names"] == {}
    keys = set(pl.read_parquet(labels)["sample_key"])
    assert {r[0] for r in audit["browse"]["rows"]} == keys
    (tmp_path / "driven.html").write_text(
        (tmp_path / "audit.html").read_text().replace("</body>", ROUND_DRIVE, 1)
    )
    dom = dump_dom(tmp_path / "driven.html")
    attrs = dict(re.findall(r'data-([a-z]+)="([^"]*)"', re.search(r"<body([^>]*)>", dom).group(1)))
    assert attrs["shown"] == "false"
    with pytest.raises(ValueError, match="rounds listed twice"):
        build_audit(rollouts, labels, earlier=[EarlierLabels(0, rollouts, labels)])


AGAINST_DRIVE = """<script>
window.addEventListener("load", function () {
  var el = function (id) { return document.getElementById(id); }, b = document.body;
  el("f-against").value = "0"; el("f-against").dispatchEvent(new Event("change"));
  b.setAttribute("data-count", el("br-count").textContent);
  el("br-export").click();
  b.setAttribute("data-exported", el("br-export").getAttribute("data-exported"));
});
</script></body>"""


def test_the_browser_lists_every_row_where_two_teachers_disagree(rollouts, tmp_path):
    """With a second teacher (`--against`), the "teacher B" filter lists exactly the (frame,
    task) pairs where its parsed answer disagrees with the page's, all of them (the comparison
    table shows 12 at most), and "export this selection" hands them over (headless Chromium)."""
    import re

    weak = _labels(rollouts, tmp_path / "weak", ConstantTeacher())  # the Worst Model
    reference = _labels(rollouts, tmp_path / "ref", ScriptedTeacher(1.0, 0))
    audit = write_audit(rollouts, weak, tmp_path / "audit.html", against=reference)
    tasks = audit["comparison"]["tasks"]
    disagreeing = sum(r["n"] - r["agree"] for r in tasks.values())
    assert disagreeing > 12  # more than the comparison's own list shows
    column = {c: i for i, c in enumerate(audit["browse"]["columns"])}
    rows = [r for r in audit["browse"]["rows"] if r[column["agrees_b"]] == 0]
    assert len(rows) == disagreeing and all(r[column["queried"]] for r in rows)
    pairs = audit["comparison"]["pairs"]
    assert all(not pairs[(r[column["sample_key"]], audit["browse"]["tasks"][r[column["task"]]])]
               for r in rows)  # fmt: skip
    page = (tmp_path / "audit.html").read_text()
    (tmp_path / "driven.html").write_text(page.replace("</body>", AGAINST_DRIVE, 1))
    dom = dump_dom(tmp_path / "driven.html")
    attrs = dict(re.findall(r'data-([a-z]+)="([^"]*)"', re.search(r"<body([^>]*)>", dom).group(1)))
    total = len(audit["browse"]["rows"])
    assert (
        attrs["count"]
        == f"rows 1-{min(50, disagreeing)} of {disagreeing} (of {total} in the table)"
    )
    assert attrs["exported"] == str(disagreeing)
    assert "Uncaught" not in dom, dom.split("<!-- console -->")[1]
    # the env's own page has no second teacher: no such filter, and the page still runs
    assert 'id="f-against"' not in render_audit(build_audit(rollouts, weak))
