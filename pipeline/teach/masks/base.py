"""Mask back ends share one interface: frames + object phrases in, one float mask per phrase out.

The combined mask of a frame is Semore's eq. 4: M = sum_i sigmoid(S(o, t_i)), the per-phrase
masks added together. Masks are stored as 8-bit PNGs at the frame's resolution.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from PIL import Image


@dataclass(frozen=True)
class MaskRequest:
    frame: np.ndarray  # (H, W, 3) uint8
    phrases: tuple[str, ...]
    env_id: str
    context: dict[str, Any]  # the env context of the frame (the scripted back end reads it)


class MaskBackend(Protocol):
    backend_id: str  # names the back end, model and settings: part of the mask cache key

    def masks(self, requests: Sequence[MaskRequest]) -> list[np.ndarray]:
        """One float32 array (P, H, W) in [0, 1] per request, P = len(request.phrases)."""
        ...


# A back end may also define `covers(env_id) -> bool`: False where it has no masks for an env
# (pipeline.teach.masks.compute then lists the env's frames with status no_backend). Without it, a
# back end covers every env.


def combine(masks: np.ndarray) -> np.ndarray:
    """Semore eq. 4: the per-phrase masks (P, H, W) added together -> (H, W). Not clipped."""
    return masks.sum(axis=0) if len(masks) else np.zeros(masks.shape[1:], np.float32)


def encode_mask(mask: np.ndarray) -> bytes:
    """A [0, 1] float mask (H, W) as an 8-bit greyscale PNG."""
    quantized = np.round(np.clip(mask, 0.0, 1.0) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(quantized, mode="L").save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def decode_mask(png: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(image, dtype=np.float32) / 255.0
