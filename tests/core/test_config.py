import pytest
import yaml

from pipeline.core.config import ConfigError, load_params, parse_params
from pipeline.learn.methods.table import check_params
from tests.conftest import REPO, tiny_params_dict, write_params


def test_repo_params_load_and_cover_the_required_envs():
    params = load_params(REPO / "params.yaml")
    assert {"MountainCar-v0", "CarRacing-v3", "cartpole-swingup"} <= set(params.envs)
    for env_id in params.envs:
        assert params.env[env_id].image_size == 84  # ERPv C.2


def test_unknown_key_is_named_with_the_allowed_keys():
    raw = tiny_params_dict()
    raw["collect"]["MountainCar-v0"]["episodse"] = 3
    with pytest.raises(ConfigError) as err:
        parse_params(raw)
    msg = str(err.value)
    assert "collect.MountainCar-v0.episodse: unknown key (did you mean 'episodes'?)" in msg
    assert "episodes" in msg and "shard_max_samples" in msg


def test_a_near_miss_in_a_method_section_gets_a_did_you_mean():
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["erpv"]["lamda_1"] = 3.0
    with pytest.raises(
        ConfigError, match=r"erpv\.lamda_1: unknown key \(did you mean 'lambda_1'\?\)"
    ):
        check_params(parse_params(raw))


def test_unknown_top_level_section_is_named():
    """A top-level mapping may be a method's section, so parse_params keeps it; the method table's
    check names it with the known methods and stage sections."""
    raw = tiny_params_dict()
    raw["colect"] = {}
    with pytest.raises(
        ConfigError,
        match=r"colect: not a stage's section nor a method's \(methods: ppo, hybrid_ppo, sac, drq, "
        r"erpv, semore; stages: envs, env, collect, label, masks, dataset, train, critic, rounds, evaluate",
    ):
        check_params(parse_params(raw))
    raw["colect"] = 3  # not even a mapping: parse_params refuses it
    with pytest.raises(ConfigError, match=r"colect: not a section of params.yaml \(sections: envs"):
        parse_params(raw)


def test_bad_value_names_the_field_and_the_range():
    raw = tiny_params_dict()
    raw["env"]["MountainCar-v0"]["image_size"] = 8
    with pytest.raises(
        ConfigError, match=r"env\.MountainCar-v0\.image_size: .*greater than or equal to 16"
    ):
        parse_params(raw)


def test_bad_choice_lists_the_allowed_values():
    raw = tiny_params_dict()
    raw["collect"]["MountainCar-v0"]["behaviour"] = "teacher_forcing"
    with pytest.raises(
        ConfigError, match=r"behaviour: .*'random', 'checkpoint', 'teacher', 'rae' or 'agent'"
    ):
        parse_params(raw)


def test_unknown_env_id_lists_known_ids():
    raw = tiny_params_dict()
    raw["envs"] = ["Pong-v5"]
    with pytest.raises(ConfigError) as err:
        parse_params(raw)
    assert "Pong-v5" in str(err.value) and "cartpole-swingup" in str(err.value)


def test_listed_env_without_settings_is_an_error():
    raw = tiny_params_dict()
    raw["envs"].append("CarRacing-v3")
    with pytest.raises(ConfigError, match=r"has no entry for it; add `env.CarRacing-v3`"):
        parse_params(raw)


def test_listed_env_without_a_label_entry_is_an_error_and_unknown_entries_are_named():
    """label@<env> reads `label.per_env.<env>`, which DVC refuses when missing: parse names it."""
    raw = tiny_params_dict(envs=("MountainCar-v0", "CarRacing-v3"))
    del raw["label"]["per_env"]["CarRacing-v3"]
    raw["label"]["per_env"]["Pong-v5"] = {}
    with pytest.raises(ConfigError) as err:
        parse_params(raw)
    assert "label.per_env.Pong-v5: unknown env id" in str(err.value)
    assert "add `CarRacing-v3: {}` under `label.per_env`" in str(err.value)


def test_label_stage_params_are_the_keys_that_decide_its_table():
    """dvc.yaml's label@<env> reads LABEL_OUTPUT_KEYS, its own per_env entry and its env entry
    (a brought env's label schema); every other LabelConfig field is a declared non-output (a
    new field fails here until it is placed)."""
    from pipeline.core.config import LABEL_OUTPUT_KEYS, LabelConfig

    stage = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["label"]["do"]
    assert stage["params"] == [
        *(f"label.{k}" for k in LABEL_OUTPUT_KEYS),
        "label.per_env.${item}",
        "env.${item}",
    ]
    # `budget` only refuses a run (a refused stage reruns when raised): no byte of the table
    not_outputs = {"executor", "ray", "per_env", "budget"}
    assert set(LabelConfig.model_fields) == {*LABEL_OUTPUT_KEYS, *not_outputs}


def test_missing_field_is_named():
    raw = tiny_params_dict()
    del raw["env"]["MountainCar-v0"]["action_repeat"]
    with pytest.raises(
        ConfigError, match=r"env\.MountainCar-v0\.action_repeat: missing required key"
    ):
        parse_params(raw)


def test_checkpoint_behaviour_needs_a_path_and_others_refuse_one():
    raw = tiny_params_dict(behaviour="checkpoint")
    with pytest.raises(ConfigError, match="needs `checkpoint"):
        parse_params(raw)
    raw = tiny_params_dict(checkpoint="actor.pt2")
    with pytest.raises(ConfigError, match="only read by behaviour 'checkpoint'"):
        parse_params(raw)


def test_every_problem_is_reported_at_once():
    raw = tiny_params_dict()
    raw["env"]["MountainCar-v0"]["image_size"] = 0
    raw["collect"]["MountainCar-v0"]["episodes"] = 0
    with pytest.raises(ConfigError) as err:
        parse_params(raw)
    assert "image_size" in str(err.value) and "episodes" in str(err.value)


def test_file_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="no such params file"):
        load_params(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("envs: [a\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_params(bad)
    path = write_params(tmp_path / "params.yaml", tiny_params_dict())
    assert load_params(path).envs == ["MountainCar-v0"]
    assert yaml.safe_load(path.read_text())["collect"]["MountainCar-v0"]["episodes"] == 3


def test_config_is_frozen(tiny_params):
    with pytest.raises(ValueError):
        tiny_params.collect["MountainCar-v0"].episodes = 5


def test_rae_settings_are_validated():
    raw = tiny_params_dict(behaviour="rae", rae_switch_steps=[400, 50])
    with pytest.raises(ConfigError, match=r"rae_switch_steps must be \[min, max\]"):
        parse_params(raw)
    raw = tiny_params_dict(behaviour="rae", explorer="checkpoint")
    with pytest.raises(ConfigError, match="behaviour 'rae' needs `checkpoint"):
        parse_params(raw)
    params = parse_params(
        tiny_params_dict(behaviour="rae", explorer="checkpoint", checkpoint="a.pt2")
    )
    assert params.collect["MountainCar-v0"].uses_teacher


def test_teacher_backend_needs_its_settings():
    raw = tiny_params_dict()
    raw["label"]["teacher"]["backend"] = "openai"
    with pytest.raises(ConfigError, match="backend 'openai' needs an `openai:` section"):
        parse_params(raw)
    raw["label"]["teacher"]["openai"] = {
        "base_url": "http://127.0.0.1:8000/v1",
        "model": "m",
        "timeot_s": 3,
    }
    with pytest.raises(
        ConfigError,
        match=r"label\.teacher\.openai\.timeot_s: unknown key \(did you mean 'timeout_s'\?\); allowed keys: api_key_env",
    ):
        parse_params(raw)


def _with_runs(raw, runs, critic_envs):
    defaults = yaml.safe_load((REPO / "params.yaml").read_text())
    raw = {**raw, "train": runs, "critic": {"envs": critic_envs, "steps": 10, "seed": 0}}
    for section in ("ppo", "sac", "erpv"):
        raw[section] = defaults[section]
    return raw


def test_cross_section_mistakes_are_all_named_with_their_fix():
    """The stage sections' rules in parse_params, all at once; then the methods' rules in the
    method table's check_params, all at once."""
    raw = _with_runs(
        tiny_params_dict(("MountainCarContinuous-v0",)),
        {
            "a": {"env": "cartpole-swingup", "method": "sac", "steps": 1, "seed": 0},
            "b": {"env": "MountainCarContinuous-v0", "method": "erpv", "steps": 1, "seed": 0},
        },
        ["walker-walk"],
    )
    with pytest.raises(ConfigError) as err:
        parse_params(raw)
    message = str(err.value)
    assert "train.a.env: 'cartpole-swingup' is not listed in `envs`" in message
    assert "critic.envs: 'walker-walk' is not listed in `envs`" in message

    raw["train"]["a"].update(env="MountainCarContinuous-v0", reward_terms=["env"])
    raw["critic"]["envs"] = []
    params = parse_params(raw)  # the stage sections are right now
    with pytest.raises(ConfigError) as err:
        check_params(params)
    message = str(err.value)
    assert "train.a.reward_terms: applies to method hybrid_ppo, not 'sac'" in message
    assert "train.b: method erpv reads the pre-trained C_V of 'MountainCarContinuous-v0'" in message
    assert "add 'MountainCarContinuous-v0' to critic.envs" in message


def test_check_params_stage_stops_with_the_projects_message(tmp_path, capsys):
    from stages import check_params

    raw = _with_runs(
        tiny_params_dict(("MountainCar-v0",)),
        {"a": {"env": "MountainCar-v0", "method": "ppoo", "steps": 1, "seed": 0}},
        [],
    )
    path = write_params(tmp_path / "params.yaml", raw)
    out = tmp_path / "checked.json"
    assert check_params.main(["--params", str(path), "--out", str(out)]) == 2
    assert (
        "train.a.method: unknown method 'ppoo'; known: ppo, hybrid_ppo, sac, drq, erpv, semore"
        in capsys.readouterr().err
    )
    assert not out.exists()
    raw["train"]["a"]["method"] = "ppo"
    write_params(path, raw)
    assert check_params.main(["--params", str(path), "--out", str(out)]) == 0
    first = out.read_bytes()
    raw["train"]["a"]["seed"] = 7  # a valid change: the gate's output does not change
    write_params(path, raw)
    assert check_params.main(["--params", str(path), "--out", str(out)]) == 0
    assert out.read_bytes() == first


def _commented_blocks(text: str, first: str) -> list[str]:
    """Each commented example in params.yaml that starts with `# <first>` (and its continuation
    lines, indented deeper), uncommented."""
    lines, blocks = text.splitlines(), []
    for i, line in enumerate(lines):
        body = line.lstrip()
        if not body.startswith(f"# {first}") and not body.startswith(f"#   {first}"):
            continue
        indent = line.index("#")
        start = len(body) - len(body[1:].lstrip())  # where the YAML begins after the '#'
        block = [line[indent + start :]]
        for nxt in lines[i + 1 :]:
            rest = nxt[indent:]
            if (
                not nxt.lstrip().startswith("#")
                or len(rest[1:]) - len(rest[1:].lstrip()) <= start - 1
            ):
                break
            block.append(rest[start:])
        blocks.append("\n".join(block))
    return blocks


def test_every_commented_option_in_params_yaml_is_valid():
    """The options params.yaml shows in comments (other teachers, the Ray executors, run and
    critic overrides) parse as written, so uncommenting one is all a user does."""
    from pipeline.core.config import LabelConfig, MasksConfig, TeacherConfig

    text = (REPO / "params.yaml").read_text()
    raw = yaml.safe_load(text)
    teachers = _commented_blocks(text, "teacher:")
    assert len(teachers) == 2, teachers
    for block in teachers:
        TeacherConfig.model_validate(yaml.safe_load(block)["teacher"])
    executors, rays = _commented_blocks(text, "executor:"), _commented_blocks(text, "ray:")
    assert len(executors) == len(rays) == 2  # label's, then masks'
    for section, model, executor, ray in zip(
        ("label", "masks"), (LabelConfig, MasksConfig), executors, rays, strict=True
    ):
        assert yaml.safe_load(executor) == {"executor": "ray"}
        model.model_validate({**raw[section], "executor": "ray", **yaml.safe_load(ray)})
    (entry,) = _commented_blocks(text, "cartpole-swingup: {teacher:")
    raw["label"]["per_env"].update(yaml.safe_load(entry))
    (run,) = _commented_blocks(text, "cartpole-swingup-sac-pixels:")
    raw["train"].update(yaml.safe_load(run))
    params = parse_params(raw)
    check_params(params)


def test_non_finite_numbers_are_refused_before_any_stage_runs(tmp_path, capsys):
    """`.inf` and `.nan` are valid YAML and pass `gt=0`-style checks; the gate names each one and
    the check_params stage stops before DVC deletes any output."""
    from stages import check_params as check_params_stage

    repo = yaml.safe_load((REPO / "params.yaml").read_text())
    path = tmp_path / "params.yaml"
    # a stage's section (parse_params), then a method's (checked once the stages' sections pass)
    repo["label"]["teacher"]["reliability"] = float("nan")
    stage_text = yaml.safe_dump(repo)
    repo["label"]["teacher"]["reliability"] = 0.8
    repo["sac"]["actor_lr"] = float("inf")
    repo["sac"]["adam_betas"] = [float("nan"), 0.999]
    for text, keys in [
        (stage_text, ["label.teacher.reliability"]),
        (yaml.safe_dump(repo), ["sac.actor_lr", "sac.adam_betas.0"]),
    ]:
        path.write_text(text)
        out = tmp_path / "c.json"
        assert check_params_stage.main(["--params", str(path), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        for key in keys:
            assert f"{key}: Input should be a finite number" in err, (key, err)
        assert "Traceback" not in err and not out.exists()


def test_control_characters_in_a_message_are_escaped(tmp_path, capsys):
    """An ESC sequence in a params key (or any file a message quotes) never reaches the terminal
    raw: it could clear or retitle the reader's terminal."""
    from stages import check_params as check_params_stage

    raw = tiny_params_dict()
    raw["env"]["MountainCar-v0"]["\x1b]0;owned\x07\x1b[2J"] = 1
    path = write_params(tmp_path / "params.yaml", raw)
    assert check_params_stage.main(["--params", str(path), "--out", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert "\\x1b]0;owned\\x07\\x1b[2J" in err


def test_a_malformed_corrections_file_stops_the_gate(tmp_path, capsys):
    """The label stage overlays corrections/<env>.jsonl; a bad line found there would come after
    DVC deleted the env's label table. The gate reads every listed env's file first."""
    from stages import check_params as check_params_stage

    path = write_params(tmp_path / "params.yaml", tiny_params_dict(("MountainCar-v0",)))
    corrections = tmp_path / "corrections"
    corrections.mkdir()
    out = tmp_path / "c.json"
    argv = ["--params", str(path), "--out", str(out), "--corrections", str(corrections)]
    assert check_params_stage.main(argv) == 0  # no file: no corrections
    out.unlink()
    (corrections / "MountainCar-v0.jsonl").write_text('{"sample_key": "0/0", "task": "action"\n')
    assert check_params_stage.main(argv) == 2
    err = capsys.readouterr().err
    assert "MountainCar-v0.jsonl:1: not JSON" in err and "Nothing was run" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("answer", "expected"),
    [("push: sideways", "is not a valid action label for MountainCar-v0: invalid_choice"),
     ("a" * 5_000_000, "an answer of 5,000,000 characters, over the 32,768")],
    ids=["invalid-choice", "5-MB-answer"],
)  # fmt: skip
def test_a_correction_that_is_no_valid_label_stops_the_gate(tmp_path, capsys, answer, expected):
    """Parsed as the label stage will parse it (against the env's rollouts), before DVC deletes
    the label table; the message quotes at most a clip of the answer."""
    import json

    from pipeline.teach.rollouts.collect import collect
    from stages import check_params as check_params_stage
    from tests.conftest import collect_cfg, env_cfg

    collect("MountainCar-v0", env_cfg(max_episode_steps=5), collect_cfg(episodes=1),
            tmp_path / "rollouts" / "MountainCar-v0", progress=False)  # fmt: skip
    path = write_params(tmp_path / "params.yaml", tiny_params_dict(("MountainCar-v0",)))
    corrections = tmp_path / "corrections"
    corrections.mkdir()
    line = {"sample_key": "000000/000001", "task": "action", "frame_sha256": "0" * 64,
            "answer": answer, "reviewer": "ana"}  # fmt: skip
    (corrections / "MountainCar-v0.jsonl").write_text(json.dumps(line) + "\n")
    argv = ["--params", str(path), "--out", str(tmp_path / "c.json"), "--corrections",
            str(corrections), "--rollouts", str(tmp_path / "rollouts")]  # fmt: skip
    assert check_params_stage.main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err and "Nothing was run" in err and len(err) < 2_000, err[:2_000]
    line["answer"] = "push: left"  # the same line with a valid answer passes
    (corrections / "MountainCar-v0.jsonl").write_text(json.dumps(line) + "\n")
    assert check_params_stage.main(argv) == 0


def test_an_unset_api_key_is_named_by_the_gate(tmp_path, capsys, monkeypatch):
    """A warning, not a refusal: a run the cache answers alone needs no key."""
    from stages import check_params as check_params_stage

    monkeypatch.delenv("VLMRL_UNSET_KEY", raising=False)
    raw = tiny_params_dict(("MountainCar-v0",))
    raw["label"]["per_env"]["MountainCar-v0"] = {"teacher": {
        "backend": "openai", "reliability": 1.0, "seed": 0,
        "openai": {"base_url": "http://127.0.0.1:1/v1", "model": "m", "revision": "r",
                   "api_key_env": "VLMRL_UNSET_KEY"}}}  # fmt: skip
    path = write_params(tmp_path / "params.yaml", raw)
    assert check_params_stage.main(["--params", str(path), "--out", str(tmp_path / "c")]) == 0
    err = capsys.readouterr().err
    assert "label.per_env.MountainCar-v0.teacher.openai.api_key_env: $VLMRL_UNSET_KEY" in err


def test_a_served_teacher_needs_no_reliability_or_seed():
    """`openai` and `hf` teachers read neither `reliability` nor `seed` (scripted-teacher
    settings): leaving them out is valid and means no injected failure, seed 0."""
    from pipeline.core.config import TeacherConfig

    served = TeacherConfig.model_validate(
        {
            "backend": "openai",
            "openai": {"base_url": "http://127.0.0.1:8000/v1", "model": "m", "revision": "r"},
        }
    )
    assert (served.reliability, served.seed) == (1.0, 0)
    assert TeacherConfig.model_validate({"backend": "hf", "hf": {"model": "m"}}).seed == 0


@pytest.mark.parametrize("bad", ["../../x", "a/b", "..", "a\nb", "x\n", "-x"])
def test_env_ids_and_run_names_are_one_safe_path_part(bad):
    """An env id names data/rollouts/<env>, a run models/<run>: one that climbs out (`..`), has a
    slash or a newline is refused by the gate, naming the section and what to use."""
    import yaml

    from pipeline.core.config import ConfigError, parse_params
    from tests.conftest import REPO

    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    env_raw = {**raw, "envs": [*raw["envs"], bad],
               "env": {**raw["env"], bad: raw["env"]["MountainCar-v0"]}}  # fmt: skip
    with pytest.raises(ConfigError, match="names folders") as err:
        parse_params(env_raw)
    assert "envs: " in str(err.value)
    run_raw = {**raw, "train": {**raw["train"], bad: raw["train"]["MountainCar-v0-ppo"]}}
    with pytest.raises(ConfigError, match=r"train: .*names folders"):
        parse_params(run_raw)
    parse_params(raw)  # the shipped ids pass
