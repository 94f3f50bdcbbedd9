"""A pixel dataset built by the pipeline's stages for the tests of the pixel methods and of the
pixel benchmark: cartpole-swingup at 48x48 (the smallest where Semore's 3 stride-2 layers keep its
5x5 SSIM window), RAE collection with the scripted teacher, labels, masks, dataset and a pixel
C_V, with the CPU pixel preset's network shapes at tiny sizes. Written out here, not read from
benchmarks/, so that the product's tests import no benchmark code."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.conftest import REPO

ENV = "cartpole-swingup"
RUNS = {  # run name -> (method, section overrides)
    "sac": ("sac", {}),
    "drq": ("drq", {}),
    "erpv": ("erpv", {}),
    "erpv-shift": ("erpv", {"image_pad": 2}),
    "semore": ("semore", {}),  # variant m4
    "semore-m1": ("semore", {"variant": "m1"}),  # the ablation unlike the others: stacked input
}
STEPS = 32  # updates from step 16: 17 of them

# The small CPU pixel encoder's shapes (4 stride-2 convs, as pixels_cpu.yaml had), shrunk below.
_NETWORK = {
    "obs": "pixels", "frame_stack": 3, "feature_dim": 16, "hidden_dim": 32, "encoder_layers": 4,
    "encoder_filters": 8, "encoder_stride": 2, "transition_hidden_dim": 32,
    "transition_learn_sigma": False, "log_std_min": -10.0, "log_std_max": 2.0,
}  # fmt: skip
_SMALL = {"batch_size": 8, "start_steps": 16, "log_every": 16, "resume_every": 16,
          "eval_episodes": 0, "replay_capacity": 500}  # fmt: skip
_SECTIONS = {
    "sac": {"network": _NETWORK, "image_pad": 0, **_SMALL},
    "drq": {"network": _NETWORK, "aux_weight": 0.0, "image_pad": 4, **_SMALL},
    "erpv": {"network": _NETWORK, "offline_fraction": 0.5, "image_pad": 0, **_SMALL},
    "semore": {
        "network": {**_NETWORK, "encoder_layers": 3, "attention_dim": 8, "attention_stride": 1},
        "offline_fraction": 0.5, "ssim_window": 5, "selective_steps": 5000, "variant": "m4",
        **_SMALL,
    },
}  # fmt: skip


def pixel_params() -> dict:
    """params.yaml with the pixel sections above merged in, key by key, and one env."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["envs"] = [ENV]
    raw["env"][ENV] = {**raw["env"][ENV], "image_size": 48, "max_episode_steps": 24}
    raw["collect"][ENV] = {"behaviour": "rae", "episodes": 2, "seed": 0,
                           "shard_max_samples": 1000, "rae_switch_steps": [5, 10],
                           "teacher": {"backend": "scripted", "reliability": 0.8, "seed": 0}}  # fmt: skip
    raw["critic"] = {"envs": [ENV], "steps": 20, "seed": 0}
    for section, keys in _SECTIONS.items():
        raw[section] = {**raw[section], **keys}
    raw["train"] = {
        name: {"env": ENV, "method": method, "steps": STEPS, "seed": 0}
        for name, (method, _) in RUNS.items()
    }
    raw["rounds"] = {}  # the shipped rounds follow runs replaced here
    raw["evaluate"]["episodes"] = 1
    return raw


def build_pixel_pipeline(d: Path) -> Path:
    """`d` with params.yaml and the data the stages build from it: rollouts `r`, labels, masks,
    dataset `ds` and C_V under `critics`."""
    p = d / "params.yaml"
    p.write_text(yaml.safe_dump(pixel_params(), sort_keys=False))

    from stages import collect, dataset, label, masks, pretrain_critic

    assert collect.main(["--params", str(p), "--env", ENV, "--out", f"{d}/r"]) == 0
    assert label.main(["--params", str(p), "--rollouts", f"{d}/r", "--cache", f"{d}/lc",
                       "--out", f"{d}/labels.parquet"]) == 0  # fmt: skip
    assert masks.main(["--params", str(p), "--rollouts", f"{d}/r", "--labels",
                       f"{d}/labels.parquet", "--cache", f"{d}/mc", "--out",
                       f"{d}/masks.parquet"]) == 0  # fmt: skip
    assert dataset.main(["--params", str(p), "--rollouts", f"{d}/r", "--labels",
                         f"{d}/labels.parquet", "--masks", f"{d}/masks.parquet", "--out",
                         f"{d}/ds"]) == 0  # fmt: skip
    assert pretrain_critic.main(["--params", str(p), "--env", ENV, "--dataset", f"{d}/ds",
                                 "--out", f"{d}/critics/{ENV}", "--live", f"{d}/cl",
                                 "--summary", f"{d}/critic.json"]) == 0  # fmt: skip
    return d


def params_for(d: Path, name: str, resume_every: int | None = None, steps: int = STEPS) -> dict:
    """The built params with run `name` alone and its section overrides applied (as a sweep
    cell's)."""
    raw = yaml.safe_load((d / "params.yaml").read_text())
    method, over = RUNS[name]
    raw[method].update(over)
    if resume_every is not None:
        raw[method]["resume_every"] = resume_every
    raw["train"] = {name: {**raw["train"][name], "steps": steps}}
    return raw


def train_argv(d: Path, params: Path, name: str, out: Path) -> list[str]:
    return ["--params", str(params), "--run", name, "--dataset", f"{d}/ds", "--critics", f"{d}/critics",
            "--out", f"{out}/model", "--live", f"{out}/live", "--summary", f"{out}/summary.json",
            "--resume-dir", f"{out}/resume"]  # fmt: skip
