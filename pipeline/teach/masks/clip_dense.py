"""MaskCLIP-style dense masks on open_clip (Zhou et al. 2022, "Extract Free Dense Labels from
CLIP"): the last attention block's value embeddings of the patch tokens, through the final norm
and projection, compared with the phrase embeddings by cosine similarity; a sigmoid turns the
similarity map into a mask (Semore eq. 4), upsampled to the frame.

The sigmoid is sigma(logit_scale * (cos - cosine_threshold)): our choice, not the papers'.
Works for open_clip's own VisionTransformer towers (ViT-*), not timm towers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.teach.masks.base import MaskRequest


class ClipDenseMasks:
    def __init__(
        self,
        model: str,
        pretrained: str | None,
        device: str,
        cosine_threshold: float,
        model_config_file: str | None = None,
    ) -> None:
        import open_clip
        import torch

        if model_config_file is not None:
            open_clip.add_model_config(
                model_config_file
            )  # a custom architecture, e.g. a tiny test model
        self._torch = torch
        self.model, _, self.preprocess = open_clip.create_model_and_transforms(
            model, pretrained=pretrained, device=device, weights_only=True
        )
        self.model.eval()
        self.tokenizer = open_clip.get_tokenizer(model)
        self.device, self.cosine_threshold = device, cosine_threshold
        visual = self.model.visual
        if not hasattr(visual, "transformer") or not hasattr(visual, "conv1"):
            raise ValueError(
                f"clip_dense needs an open_clip VisionTransformer tower; {model} has {type(visual).__name__}"
            )
        weights = pretrained
        if pretrained is not None and Path(pretrained).is_file():
            weights = "file-" + hashlib.sha256(Path(pretrained).read_bytes()).hexdigest()[:16]
        self.backend_id = f"clip_dense:{model}:{weights}:thr={cosine_threshold:g}"

    def _dense_features(self, images):
        """(B, 3, S, S) -> (B, gh, gw, D) patch embeddings in the joint space."""
        torch, visual = self._torch, self.model.visual
        x = visual.conv1(images)  # (B, width, gh, gw)
        b, width, gh, gw = x.shape
        x = x.reshape(b, width, gh * gw).permute(0, 2, 1)  # (B, N, width)
        cls = visual.class_embedding.to(x.dtype).expand(b, 1, width)
        x = torch.cat([cls, x], dim=1) + visual.positional_embedding.to(x.dtype)
        x = visual.ln_pre(x)
        blocks = visual.transformer.resblocks
        for block in blocks[:-1]:
            x = block(x)
        last = blocks[-1]
        attn = last.attn  # nn.MultiheadAttention: MaskCLIP keeps only its value path
        y = last.ln_1(x)
        v = torch.nn.functional.linear(
            y, attn.in_proj_weight[2 * width :], attn.in_proj_bias[2 * width :]
        )
        v = attn.out_proj(v)  # (B, 1 + N, width)
        v = visual.ln_post(v[:, 1:]) @ visual.proj  # (B, N, D)
        return v.reshape(b, gh, gw, -1)

    def masks(self, requests: Sequence[MaskRequest]) -> list[np.ndarray]:
        from PIL import Image

        torch = self._torch
        if not requests:
            return []
        images = torch.stack([self.preprocess(Image.fromarray(r.frame)) for r in requests]).to(
            self.device
        )
        phrases = sorted({p for r in requests for p in r.phrases})
        with torch.inference_mode():
            dense = torch.nn.functional.normalize(
                self._dense_features(images), dim=-1
            )  # (B, gh, gw, D)
            text = self.model.encode_text(self.tokenizer(phrases).to(self.device))
            text = torch.nn.functional.normalize(text, dim=-1)  # (T, D)
            cos = torch.einsum("bhwd,td->bthw", dense, text)  # (B, T, gh, gw)
            scale = self.model.logit_scale.exp()
            prob = torch.sigmoid(scale * (cos - self.cosine_threshold))  # Semore eq. 4's sigma
        index = {p: i for i, p in enumerate(phrases)}
        out = []
        for b, request in enumerate(requests):
            h, w = request.frame.shape[:2]
            if not request.phrases:
                out.append(np.zeros((0, h, w), np.float32))
                continue
            chosen = prob[b, [index[p] for p in request.phrases]][None]  # (1, P, gh, gw)
            up = torch.nn.functional.interpolate(
                chosen, size=(h, w), mode="bilinear", align_corners=False
            )
            out.append(up[0].float().cpu().numpy())
        return out
