"""`label.executor: ray` on a local Ray cluster (2 CPUs, a small object store) shared by these
tests: the same table bytes as a local run, only uncached prompts asked, a raising teacher actor
or a killed driver loses only unfinished batches."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.teach.labelling.label import LabelError, label_rollouts
from pipeline.teach.labels.cache import LabelCache
from pipeline.teach.rollouts.collect import collect
from pipeline.teach.teachers.scripted import ScriptedTeacher
from tests.conftest import collect_cfg, env_cfg, label_cfg

ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install -e '.[ray]'")

TASKS = {"action": 2, "milestone": 3, "judge": 4}
RAY = {"concurrency": 2, "batch_size": 8, "num_cpus": 0.5, "object_store_mb": 128}


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, object_store_memory=128 * 1024 * 1024, include_dashboard=False,
             log_to_driver=False)  # fmt: skip
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def rollouts(collected):
    return collected("MountainCar-v0", episodes=2, max_episode_steps=40)


class CountingTeacher(ScriptedTeacher):
    """The scripted teacher, counting prompts in a file (actors are other processes)."""

    def __init__(self, reliability, seed, log_path, fail_after=None):
        super().__init__(reliability, seed)
        self.log_path, self.fail_after = log_path, fail_after

    def answer(self, prompts):
        with open(self.log_path, "a") as f:
            f.write(f"{len(prompts)}\n")
        asked = counted(Path(self.log_path))
        if self.fail_after is not None and asked > self.fail_after:
            raise RuntimeError("the teacher's model crashed")
        return super().answer(prompts)


def counted(path):
    return sum(int(n) for n in path.read_text().split()) if path.exists() else 0


def test_ray_table_is_byte_identical_to_local(cluster, rollouts, tmp_path):
    teacher = ScriptedTeacher(0.8, 0)
    local = label_rollouts(rollouts, label_cfg(tasks=TASKS), teacher, tmp_path / "c1",
                           tmp_path / "local.parquet", progress=False)  # fmt: skip
    cfg = label_cfg(tasks=TASKS, executor="ray", ray=RAY)
    remote = label_rollouts(rollouts, cfg, teacher, tmp_path / "c2", tmp_path / "ray.parquet",
                            progress=False)  # fmt: skip
    assert (tmp_path / "ray.parquet").read_bytes() == (tmp_path / "local.parquet").read_bytes()
    assert remote.rows == local.rows and remote.queried == local.queried
    assert len(LabelCache(tmp_path / "c2")) == len(LabelCache(tmp_path / "c1"))


# three labelling runs, two through fresh Ray actors; fast: the local executor's interrupted run
# pays nothing twice (test_label.py), and Ray's failed answers are recorded as locally, below
@pytest.mark.slow
def test_a_raising_actor_loses_only_unfinished_batches(cluster, rollouts, tmp_path):
    """An actor's teacher crashes after some batches: the stage fails with a message that says
    what survived; the rerun pays only for the prompts that were not answered."""
    log_path = tmp_path / "asked.txt"
    cfg = label_cfg(tasks=TASKS, executor="ray", ray={**RAY, "concurrency": 1})
    teacher = ScriptedTeacher(0.8, 0)

    def crashing():
        return CountingTeacher(0.8, 0, log_path, fail_after=24)

    with pytest.raises(LabelError, match="finished batches are cached"):
        label_rollouts(rollouts, cfg, teacher, tmp_path / "cache", tmp_path / "t.parquet",
                       progress=False, ray_build=crashing)  # fmt: skip
    assert not (tmp_path / "t.parquet").exists()
    kept = len(LabelCache(tmp_path / "cache"))
    assert 0 < kept <= 24

    again = tmp_path / "again.txt"
    summary = label_rollouts(
        rollouts,
        cfg,
        teacher,
        tmp_path / "cache",
        tmp_path / "t.parquet",
        progress=False,
        ray_build=lambda: CountingTeacher(0.8, 0, again),
    )
    unique = len(LabelCache(tmp_path / "cache"))  # distinct prompts (repeated frames share one)
    assert summary.cache_hits == summary.queried and counted(again) == unique - kept  # the rest
    label_rollouts(rollouts, label_cfg(tasks=TASKS), teacher, tmp_path / "ref",
                   tmp_path / "ref.parquet", progress=False)  # fmt: skip
    assert (tmp_path / "t.parquet").read_bytes() == (tmp_path / "ref.parquet").read_bytes()


KILLED_DRIVER = """
import sys, time
from pathlib import Path
from pipeline.teach.labelling.label import label_rollouts
from pipeline.teach.teachers.scripted import ScriptedTeacher
from tests.conftest import label_cfg

rollouts, cache, table, address = sys.argv[1:5]


class SlowTeacher(ScriptedTeacher):
    def answer(self, prompts):
        time.sleep(1.0)  # a slow model: the driver is killed while batches are still out
        return super().answer(prompts)


ray = {"concurrency": 1, "batch_size": 8, "num_cpus": 0.5, "address": address}
cfg = label_cfg(tasks=%r, executor="ray", ray=ray)
label_rollouts(Path(rollouts), cfg, ScriptedTeacher(0.8, 0), Path(cache), Path(table),
               progress=False, ray_build=lambda: SlowTeacher(0.8, 0))
"""


# a driver in a fresh interpreter, its teacher slowed down to be killed mid-job; fast: as above
@pytest.mark.slow
def test_a_killed_driver_loses_only_unfinished_batches(cluster, rollouts, tmp_path):
    """The label stage's driver gets SIGKILL while its Ray job runs: the batches that came back
    are in the cache (no table is written); the rerun pays only for the rest and writes the
    local run's table."""
    script = tmp_path / "driver.py"
    script.write_text(KILLED_DRIVER % (TASKS,))
    cache, table = tmp_path / "cache", tmp_path / "t.parquet"
    address = ray.get_runtime_context().gcs_address
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    log = tmp_path / "driver.log"
    with log.open("w") as out:  # a file, not a pipe: a full pipe would stall the driver
        driver = subprocess.Popen(
            [sys.executable, str(script), str(rollouts), str(cache), str(table), address],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    while len(list(cache.glob("segment-*.parquet"))) < 2:  # two batches came back
        assert driver.poll() is None, f"the driver ended before it was killed: {log.read_text()}"
        time.sleep(0.1)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert not table.exists()
    kept = len(LabelCache(cache))
    # distinct prompts of the whole job (repeated frames share one), from a local run
    label_rollouts(rollouts, label_cfg(tasks=TASKS), ScriptedTeacher(0.8, 0), tmp_path / "ref",
                   tmp_path / "ref.parquet", progress=False)  # fmt: skip
    unique_total = len(LabelCache(tmp_path / "ref"))
    assert 0 < kept < unique_total

    again = tmp_path / "again.txt"
    cfg = label_cfg(tasks=TASKS, executor="ray", ray={**RAY, "concurrency": 1})
    label_rollouts(rollouts, cfg, ScriptedTeacher(0.8, 0), cache, table, progress=False,
                   ray_build=lambda: CountingTeacher(0.8, 0, again))  # fmt: skip
    assert counted(again) == unique_total - kept  # the rest, and nothing twice
    assert table.read_bytes() == (tmp_path / "ref.parquet").read_bytes()


def test_transport_failures_are_recorded_as_locally(cluster, rollouts, tmp_path):
    from pipeline.teach.labels.status import ParseStatus
    from pipeline.teach.teachers.base import Reply

    class Unreachable(ScriptedTeacher):
        def answer(self, prompts):
            return [
                Reply(text=None, error=ParseStatus.TIMEOUT, error_detail="no server")
                for _ in prompts
            ]

    for executor, name in (("local", "l"), ("ray", "r")):
        cfg = label_cfg(tasks={"milestone": 5}, executor=executor, ray=RAY,
                        max_transport_failure_rate=1.0)  # fmt: skip
        with pytest.raises(LabelError, match="answered none"):
            label_rollouts(rollouts, cfg, Unreachable(0.8, 0), tmp_path / name,
                           tmp_path / f"{name}.parquet", progress=False,
                           ray_build=lambda: Unreachable(0.8, 0))  # fmt: skip
        assert len(LabelCache(tmp_path / name)) == 0  # failures are not cached


@pytest.mark.slow  # a Ray cluster maps the masks stage: 6-10 s; labels run by default
def test_ray_masks_table_is_byte_identical_to_local(cluster, tmp_path):
    """The masks stage with `executor: ray`: CarRacing frames, scripted masks, the same table."""
    from pipeline.core.config import MasksConfig
    from pipeline.teach.masks import make_mask_backend
    from pipeline.teach.masks.compute import compute_masks
    from stages.masks import ray_settings

    rollouts = tmp_path / "rollouts"
    collect("CarRacing-v3", env_cfg(max_episode_steps=12), collect_cfg(episodes=1), rollouts,
            progress=False)  # fmt: skip
    label_rollouts(rollouts, label_cfg(tasks={"objects": 3}), ScriptedTeacher(1.0, 0),
                   tmp_path / "lc", tmp_path / "labels.parquet", progress=False)  # fmt: skip
    tables, summaries = {}, {}
    for executor in ("local", "ray"):
        cfg = MasksConfig(backend="scripted", batch_size=4, executor=executor, ray=RAY)
        summary = compute_masks(rollouts, tmp_path / "labels.parquet", make_mask_backend(cfg),
                                tmp_path / f"mc-{executor}", tmp_path / f"{executor}.parquet",
                                batch_size=4, progress=False, **ray_settings(cfg))  # fmt: skip
        tables[executor] = (tmp_path / f"{executor}.parquet").read_bytes()
        summaries[executor] = (summary.computed, summary.cache_hits, summary.statuses["ok"])
    assert summaries["ray"] == summaries["local"] and summaries["ray"][0] > 0
    assert tables["ray"] == tables["local"]


class SchemaReader:
    """An actor that reads label schemas (in another process than the driver)."""

    def names(self, env_ids):
        from pipeline.teach.labels.schema import label_schema

        return [list(label_schema(env_id).action_names) for env_id in env_ids]


@pytest.mark.slow  # Ray actors import a brought env in their own processes: 8-10 s
def test_an_actor_knows_the_envs_the_driver_brought(cluster):
    """An env brought from params (`env.<id>.make`) is registered in the driver when the params
    are loaded; map_on_ray hands the registry to each actor, so a teacher there reads its label
    schema."""
    from pipeline.core.config import RayExecutorConfig, parse_params
    from pipeline.core.distributed import map_on_ray
    from tests.conftest import tiny_params_dict
    from tests.core.test_own_env import POINT, _with

    parse_params(_with(tiny_params_dict(), "point-on-ray", POINT))
    batches = map_on_ray(["point-on-ray"], SchemaReader, "names", RayExecutorConfig(**RAY))
    assert [names for _, results in batches for names in results] == [["push"]]
