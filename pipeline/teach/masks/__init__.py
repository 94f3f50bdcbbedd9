"""Masks from the VLM's object phrases (Semore, "VLM-guided Semantics", eq. 4)."""

from __future__ import annotations

from pipeline.core.config import MasksConfig
from pipeline.teach.masks.base import MaskBackend, MaskRequest, combine, decode_mask, encode_mask

__all__ = [
    "MaskBackend",
    "MaskRequest",
    "combine",
    "decode_mask",
    "encode_mask",
    "make_mask_backend",
]


def make_mask_backend(cfg: MasksConfig) -> MaskBackend:
    if cfg.backend == "scripted":
        from pipeline.teach.masks.scripted import ScriptedMasks

        return ScriptedMasks()
    if cfg.backend == "clip_dense":
        from pipeline.teach.masks.clip_dense import ClipDenseMasks

        assert cfg.clip_dense is not None  # enforced by MasksConfig
        c = cfg.clip_dense
        return ClipDenseMasks(
            c.model, c.pretrained, c.device, c.cosine_threshold, c.model_config_file
        )
    if cfg.backend == "clipseg":
        from pipeline.teach.masks.clipseg import ClipSegMasks

        assert cfg.clipseg is not None
        return ClipSegMasks(cfg.clipseg.model, cfg.clipseg.revision, cfg.clipseg.device)
    raise ValueError(f"unknown mask backend {cfg.backend!r}")
