"""Headless OpenGL for MuJoCo rendering, set up before the first GL context exists."""

from __future__ import annotations

import importlib.util
import os


def prepare_headless_gl() -> None:
    """Select EGL (renders headless, on CPU through Mesa) and load triton first if installed.

    Why triton: Mesa's llvmpipe and triton each bring their own LLVM. Importing triton after an
    EGL context exists segfaults the process (seen with torch 2.13 / triton 3.7 / MuJoCo 3.17), and
    triton is imported by transformers and torch.compile, e.g. when an `hf` teacher runs in the
    same process as a dm_control env (collect with RAE). Loaded first, both coexist.
    """
    os.environ.setdefault("MUJOCO_GL", "egl")
    if importlib.util.find_spec("triton") is not None:
        import triton  # noqa: F401
