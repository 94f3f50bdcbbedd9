"""CLIPSeg (transformers `CLIPSegForImageSegmentation`): the packaged CLIP-driven referring
segmenter closest to Semore's CRIS. sigmoid(logits) per (frame, phrase), resized to the frame."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.teach.masks.base import MaskRequest


class ClipSegMasks:
    def __init__(self, model: str, revision: str | None, device: str) -> None:
        import torch
        from transformers import AutoProcessor, CLIPSegForImageSegmentation

        self._torch = torch
        self.processor = AutoProcessor.from_pretrained(model, revision=revision)
        self.model = (
            CLIPSegForImageSegmentation.from_pretrained(model, revision=revision).to(device).eval()
        )
        self.device = device
        resolved = getattr(self.model.config, "_commit_hash", None) or revision or "local"
        self.backend_id = f"clipseg:{model}@{resolved}"

    def masks(self, requests: Sequence[MaskRequest]) -> list[np.ndarray]:
        from PIL import Image

        torch = self._torch
        pairs = [(i, p) for i, r in enumerate(requests) for p in r.phrases]
        out = [np.zeros((len(r.phrases), *r.frame.shape[:2]), np.float32) for r in requests]
        if not pairs:
            return out
        images = [Image.fromarray(requests[i].frame) for i, _ in pairs]
        inputs = self.processor(
            text=[p for _, p in pairs], images=images, padding=True, return_tensors="pt"
        ).to(self.device)
        with torch.inference_mode():
            logits = self.model(**inputs).logits  # (pairs, S, S), or (S, S) for a single pair
        prob = torch.sigmoid(logits.reshape(len(pairs), 1, *logits.shape[-2:]))
        filled = [0] * len(requests)
        for k, (i, _) in enumerate(pairs):
            h, w = requests[i].frame.shape[:2]
            up = torch.nn.functional.interpolate(
                prob[k : k + 1], size=(h, w), mode="bilinear", align_corners=False
            )
            out[i][filled[i]] = up[0, 0].float().cpu().numpy()
            filled[i] += 1
        return out
