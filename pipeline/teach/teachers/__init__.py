"""Teachers: back ends that answer label prompts. See base.Teacher for the interface."""

from __future__ import annotations

from pipeline.core.config import TeacherConfig
from pipeline.core.policy import PolicyLoader
from pipeline.teach.teachers.base import Reply, Teacher

__all__ = ["Reply", "Teacher", "make_teacher"]


def make_teacher(
    cfg: TeacherConfig, where: str = "<teacher>", load_policy: PolicyLoader | None = None
) -> Teacher:
    """The teacher `cfg` describes; `where`: its params.yaml path, for messages; `load_policy`:
    how the `policy` back end loads its agent (its stage's, `pipeline.core.policy`)."""
    if cfg.backend == "scripted":
        from pipeline.teach.teachers.scripted import ScriptedTeacher

        return ScriptedTeacher(cfg.reliability, cfg.seed)
    if cfg.backend == "random":
        from pipeline.teach.teachers.baselines import RandomTeacher

        return RandomTeacher(cfg.seed)
    if cfg.backend == "constant":
        from pipeline.teach.teachers.baselines import ConstantTeacher

        return ConstantTeacher()
    if cfg.backend == "hf":
        from pipeline.teach.teachers.hf import HFTeacher

        assert cfg.hf is not None  # enforced by TeacherConfig
        hf = cfg.hf
        return HFTeacher(
            hf.model, hf.revision, hf.device, hf.dtype, hf.max_new_tokens, hf.batch_size
        )
    if cfg.backend == "openai":
        from pipeline.teach.teachers.openai_api import OpenAITeacher

        assert cfg.openai is not None  # enforced by TeacherConfig
        return OpenAITeacher(**cfg.openai.model_dump(), where=f"{where}.openai")
    if cfg.backend == "policy":
        from pipeline.teach.teachers.policy import PolicyTeacher

        assert cfg.policy is not None  # enforced by TeacherConfig
        return PolicyTeacher(cfg.policy.checkpoint, cfg.reliability, cfg.seed, load_policy)
    raise ValueError(f"unknown teacher backend {cfg.backend!r}")
