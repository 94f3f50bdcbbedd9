"""The visual prototype cache: embeddings of labelled frames with their milestone potential Phi_raw,
and the RBF-smoothed potential of a new frame (hybrid VLM-PPO 3.2, "RBF Continuous Smoothing")."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from PIL import Image

from pipeline.dataset.transitions import labelled_milestones


class Embedder(Protocol):
    embedder_id: str

    def embed(self, frames: np.ndarray) -> np.ndarray:
        """(B, H, W, 3) uint8 -> (B, D) float32."""
        ...


class GreyEmbedder:
    """Offline embedding: the frame downsampled to `size` x `size` grey levels in [0, 1]."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self.embedder_id = f"grey{size}"

    def embed(self, frames: np.ndarray) -> np.ndarray:
        out = [
            np.asarray(
                Image.fromarray(f)
                .convert("L")
                .resize((self.size, self.size), Image.Resampling.BILINEAR)
            )
            for f in frames
        ]
        return (np.stack(out).reshape(len(frames), -1) / 255.0).astype(np.float32)  # (B, size*size)


class OpenClipEmbedder:
    """open_clip image features (L2-normalised), for real weights (`pretrained` tag or file)."""

    def __init__(self, model: str, pretrained: str | None, device: str = "cpu") -> None:
        import open_clip
        import torch

        self._torch = torch
        self.model, _, self.preprocess = open_clip.create_model_and_transforms(
            model, pretrained=pretrained, device=device, weights_only=True
        )
        self.model.eval()
        self.device = device
        self.embedder_id = f"open_clip:{model}:{pretrained}"

    def embed(self, frames: np.ndarray) -> np.ndarray:
        torch = self._torch
        batch = torch.stack([self.preprocess(Image.fromarray(f)) for f in frames]).to(self.device)
        with torch.inference_mode():
            features = torch.nn.functional.normalize(self.model.encode_image(batch), dim=-1)
        return features.float().cpu().numpy()


@dataclass
class PrototypeCache:
    embeddings: np.ndarray  # (N, D) float32
    potentials: np.ndarray  # (N,) Phi_raw of each prototype's milestone
    bandwidth: float  # RBF sigma, in embedding distance units
    positions: np.ndarray | None = None  # (N,) MountainCar cart position of each prototype

    def __post_init__(self) -> None:
        if len(self.embeddings) == 0:
            raise ValueError("a prototype cache needs at least one labelled frame")
        if self.bandwidth <= 0:
            raise ValueError(f"RBF bandwidth must be > 0, got {self.bandwidth}")
        self._embeddings64 = np.asarray(self.embeddings, np.float64)
        self._potentials64 = np.asarray(self.potentials, np.float64)

    def _sq_distances(self, embedding: np.ndarray) -> np.ndarray:
        """|e - e_i|^2 to every prototype, (N,) float64: elementwise differences and numpy's
        pairwise sums, no BLAS call. A float32 `E @ e` went through OpenBLAS's sgemv, whose
        kernel is chosen per CPU model (Haswell or SkylakeX on x86): its rounding, amplified by the
        cancellation in |E|^2 - 2 E e + |e|^2, changed the potentials and with them the trained
        weights' bytes from one machine to the next (tests/learn/test_shaping_portable.py)."""
        diff = self._embeddings64 - np.asarray(embedding, np.float64)
        return (diff * diff).sum(axis=1)

    def potential(self, embedding: np.ndarray) -> float:
        """Phi_rbf(s) = sum_i w_i Phi_i / sum_i w_i, w_i = exp(-|e - e_i|^2 / (2 sigma^2)).

        A kernel-weighted mean of the prototypes' potentials: always within their range and
        continuous in the embedding (hybrid VLM-PPO 3.2's smoothing of the discrete labels).
        Computed in float64 without BLAS and rounded to float32: what the SIMD path of `exp`
        changes (an ulp of float64) rounds away unless it straddles a float32 rounding boundary.
        """
        logits = -self._sq_distances(embedding) / (2.0 * self.bandwidth**2)
        weights = np.exp(logits - logits.max())  # shifted: the nearest prototype has weight 1
        return float(np.float32((weights * self._potentials64).sum() / weights.sum()))

    def nearest_potential(self, embedding: np.ndarray) -> float:
        return float(self.potentials[int(np.argmin(self._sq_distances(embedding)))])

    @classmethod
    def from_dataset(
        cls, dataset_dir: str | Path, embedder: Embedder, bandwidth: float
    ) -> PrototypeCache:
        """Prototypes = the dataset's frames whose `milestone` was queried and parsed (no carried
        rows): stage two reads the dataset alone."""
        labelled = labelled_milestones(dataset_dir)
        if not labelled.frames_png:
            raise ValueError(
                f"{dataset_dir} has no parsed milestone labels to build prototypes from"
            )
        frames = []
        for png in labelled.frames_png:
            with Image.open(io.BytesIO(png)) as image:
                frames.append(np.asarray(image.convert("RGB")))
        positions = labelled.positions
        known = None if None in positions else np.asarray(positions, np.float64)
        return cls(embedder.embed(np.stack(frames)), labelled.potentials, bandwidth, known)
