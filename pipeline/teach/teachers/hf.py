"""A transformers VLM as teacher: any `AutoModelForImageTextToText` with a chat template
(Qwen2-VL / Qwen2.5-VL first), from a local path or a hub id, batched, greedy by default."""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from pipeline.teach.labels.tasks import Prompt
from pipeline.teach.teachers.base import Reply

_HASH_BYTES = 1 << 20


def local_checkpoint_fingerprint(path: Path) -> str:
    """Stands in for a hub revision: config + processor files whole, and each weight file's
    size and first and last MiB (hashing GBs of weights at every start would be slow)."""
    h = hashlib.sha256()
    for file in sorted(p for p in path.iterdir() if p.is_file()):
        h.update(file.name.encode())
        if file.suffix in (".safetensors", ".bin", ".pt"):
            size = file.stat().st_size
            h.update(str(size).encode())
            with open(file, "rb") as f:
                h.update(f.read(_HASH_BYTES))
                f.seek(max(0, size - _HASH_BYTES))
                h.update(f.read(_HASH_BYTES))
        else:
            h.update(file.read_bytes())
    return h.hexdigest()[:16]


class HFTeacher:
    def __init__(
        self,
        model: str,
        revision: str | None,
        device: str,
        dtype: str,
        max_new_tokens: int,
        batch_size: int,
    ) -> None:
        from transformers import AutoConfig

        self._source, self._revision, self._dtype = model, revision, dtype
        self.device, self.batch_size = device, batch_size
        # The id needs the exact revision, not the weights: a local checkpoint's file fingerprint
        # or the hub commit its config resolves to. The model itself (gigabytes for a 7B VLM)
        # loads on the first prompt that is not a cache hit, so a fully cached rerun never loads.
        if Path(model).is_dir():
            resolved = f"local-{local_checkpoint_fingerprint(Path(model))}"
        else:
            config = AutoConfig.from_pretrained(model, revision=revision)
            resolved = getattr(config, "_commit_hash", None) or revision or "main"
        self.teacher_id = f"hf:{model}@{resolved}:{dtype}"
        self.decoding: dict[str, Any] = {"do_sample": False, "max_new_tokens": max_new_tokens}
        self.model: Any = None  # loaded by _load on first use

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self._torch = torch
        self.processor = AutoProcessor.from_pretrained(self._source, revision=self._revision)
        self.processor.tokenizer.padding_side = "left"  # decoder-only batching pads on the left
        self.model = AutoModelForImageTextToText.from_pretrained(
            self._source, revision=self._revision, dtype=getattr(torch, self._dtype)
        ).to(self.device)
        self.model.eval()
        self._eos = self.model.generation_config.eos_token_id

    def _messages(self, prompt: Prompt) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": [{"type": "text", "text": prompt.system}]},
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt.user}]},
        ]

    def answer(self, prompts: Sequence[Prompt]) -> list[Reply]:
        if self.model is None and prompts:
            self._load()
        replies: list[Reply] = []
        for start in range(0, len(prompts), self.batch_size):
            replies += self._answer_batch(prompts[start : start + self.batch_size])
        return replies

    def _answer_batch(self, prompts: Sequence[Prompt]) -> list[Reply]:
        texts = [
            self.processor.apply_chat_template(
                self._messages(p), tokenize=False, add_generation_prompt=True
            )
            for p in prompts
        ]
        images = [Image.open(io.BytesIO(p.frame_png)).convert("RGB") for p in prompts]
        inputs = self.processor(text=texts, images=images, return_tensors="pt", padding=True).to(
            self.device
        )
        started = time.perf_counter()
        with self._torch.inference_mode():
            output = self.model.generate(**inputs, **self.decoding)
        latency = (time.perf_counter() - started) / len(prompts)
        generated = output[:, inputs["input_ids"].shape[1] :]  # (B, new tokens)
        decoded = self.processor.batch_decode(generated, skip_special_tokens=True)
        eos = {self._eos} if isinstance(self._eos, int) else set(self._eos or [])
        replies = []
        for tokens, text in zip(generated.tolist(), decoded, strict=True):
            stopped = any(t in eos for t in tokens)
            finish = (
                "stop" if stopped or len(tokens) < self.decoding["max_new_tokens"] else "length"
            )
            replies.append(Reply(text=text, finish_reason=finish, latency_s=latency))
        return replies
