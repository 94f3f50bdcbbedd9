"""VLM teacher throughput against the hardware: Qwen2-VL-2B- and 7B-shaped models built from their
published configs with random weights (generation costs the same whatever the weights; nothing is
downloaded), a fixed number of new tokens, frames/s batched vs one frame at a time.

The roofline figures are measured in the same run: the bf16 matrix-product rate of an
8192^3 product (compute bound) and a device-to-device copy (memory bound). Per frame, a forward
pass costs about 2 x parameters x tokens FLOPs (prompt text + image tokens + new tokens, and the
vision tower over the image patches); each decode step of a batch reads every weight once.

    python -m benchmarks.vlm_gpu_throughput [--models 2b 7b] [--sizes 84 128] \
        [--batches 1 8 32 128] [--text-tokens 150] [--new-tokens 32] [--out results.json]
    python -m benchmarks.vlm_gpu_throughput --models tiny --device cpu   # a check of the script

Stand-alone on purpose (torch + transformers only): it runs on a bare GPU machine.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

# Qwen2-VL special token ids (Qwen/Qwen2-VL-*-Instruct config.json).
IMAGE_PAD, VISION_START, VISION_END, IM_END, PAD = 151655, 151652, 151653, 151645, 151643

# From the published config.json of Qwen/Qwen2-VL-2B-Instruct and Qwen/Qwen2-VL-7B-Instruct.
_VISION = {
    "depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
    "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
}  # fmt: skip
CONFIGS: dict[str, dict[str, Any]] = {
    "2b": {
        "text": {
            "vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960,
            "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
            "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        },
        "vision": {**_VISION, "hidden_size": 1536},
    },
    "7b": {
        "text": {
            "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
            "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
            "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        },
        "vision": {**_VISION, "hidden_size": 3584},
    },
    "tiny": {  # a CPU check of this script, not a figure
        "text": {
            "vocab_size": 151936, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        },
        "vision": {**_VISION, "depth": 1, "embed_dim": 32, "num_heads": 2, "hidden_size": 32},
    },
}  # fmt: skip


def build_model(name: str, device: str, dtype: Any, attn: str) -> Any:
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    spec = CONFIGS[name]
    config = Qwen2VLConfig(
        text_config={
            **spec["text"],
            "bos_token_id": PAD, "eos_token_id": IM_END, "pad_token_id": PAD,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                "mrope_section": [16, 24, 24] if name != "tiny" else [2, 3, 3]},
        },
        vision_config=spec["vision"],
        image_token_id=IMAGE_PAD, vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
    )  # fmt: skip
    config._attn_implementation = attn
    with torch.device(device):
        torch.manual_seed(0)
        model = Qwen2VLForConditionalGeneration._from_config(
            config, dtype=dtype, attn_implementation=attn
        )
    return model.eval()


def count_parameters(model: Any) -> dict[str, int]:
    vision = sum(p.numel() for n, p in model.named_parameters() if ".visual." in f".{n}")
    embed = model.get_input_embeddings().weight.numel()
    total = sum(p.numel() for p in model.parameters())
    return {"total": total, "vision": vision, "text_embedding": embed}


def make_inputs(batch: int, size: int, text_tokens: int, device: str, dtype: Any) -> dict:
    """What Qwen2VLProcessor gives for one frame of `size` pixels and a prompt of `text_tokens`
    tokens: the frame resized to a multiple of 28 (patch 14 x merge 2), split into 14x14x2 patches,
    one image token per 2x2 merged patches. Token ids are random: cost does not depend on them."""
    import numpy as np
    import torch
    from transformers import Qwen2VLImageProcessor

    processor = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=1280 * 28 * 28)
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(batch)]
    pixels = processor(images=frames, return_tensors="pt")
    grid = pixels["image_grid_thw"]  # (batch, 3): t, h, w in patches
    image_tokens = int(grid[0].prod()) // 4
    before = text_tokens // 3  # the system prompt and the chat template's header
    ids = torch.randint(0, 150000, (batch, text_tokens), generator=torch.Generator().manual_seed(0))
    image = torch.tensor([VISION_START] + [IMAGE_PAD] * image_tokens + [VISION_END])
    input_ids = torch.cat([ids[:, :before], image.expand(batch, -1), ids[:, before:]], dim=1)
    return (
        {
            "input_ids": input_ids.to(device),
            "attention_mask": torch.ones_like(input_ids).to(device),
            "pixel_values": pixels["pixel_values"].to(device, dtype),
            "image_grid_thw": grid.to(device),
        },
        image_tokens,
        int(grid[0].prod()),
    )


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed_generate(model: Any, inputs: dict, new_tokens: int, device: str, repeats: int) -> float:
    """Seconds per generate call of exactly `new_tokens` tokens (EOS suppressed), median."""
    import torch

    kwargs = {
        "max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False,
        "eos_token_id": IM_END, "pad_token_id": PAD,
    }  # fmt: skip
    times = []
    with torch.inference_mode():
        model.generate(**inputs, **kwargs)  # warm-up (kernels, allocator)
        for _ in range(repeats):
            synchronize(device)
            started = time.perf_counter()
            out = model.generate(**inputs, **kwargs)
            synchronize(device)
            times.append(time.perf_counter() - started)
    generated = out.shape[1] - inputs["input_ids"].shape[1]
    if generated != new_tokens:
        raise RuntimeError(f"generated {generated} tokens, asked for exactly {new_tokens}")
    return sorted(times)[len(times) // 2]


def hardware_peaks(device: str) -> dict[str, float]:
    """Measured here, now: bf16 matmul TFLOP/s and device copy GB/s (read + write)."""
    import torch

    if not device.startswith("cuda"):
        return {}
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    synchronize(device)
    started = time.perf_counter()
    for _ in range(10):
        a @ b
    synchronize(device)
    tflops = 10 * 2 * 8192**3 / (time.perf_counter() - started) / 1e12
    x = torch.empty(2**30, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    y.copy_(x)
    synchronize(device)
    started = time.perf_counter()
    for _ in range(10):
        y.copy_(x)
    synchronize(device)
    gbps = 10 * 2 * x.numel() / (time.perf_counter() - started) / 1e9
    del a, b, x, y
    torch.cuda.empty_cache()
    return {"bf16_tflops": tflops, "copy_gbps": gbps}


def rooflines(
    params: dict[str, int], tokens: int, patches: int, batch: int, new_tokens: int, peaks: dict
) -> dict[str, float]:
    """Frames/s bounds: compute (2 FLOPs per parameter per token, all tokens) and memory (every
    decode step of a batch reads all text weights once; prefill is compute bound)."""
    if not peaks:
        return {}
    text = params["total"] - params["vision"] - params["text_embedding"]
    flops = 2 * text * tokens + 2 * params["vision"] * patches
    compute = peaks["bf16_tflops"] * 1e12 / flops
    bytes_per_step = 2 * (params["total"] - params["vision"])  # bf16 text weights + lm head
    decode_s = new_tokens * bytes_per_step / (peaks["copy_gbps"] * 1e9)
    prefill_s = batch * (2 * text * (tokens - new_tokens) + 2 * params["vision"] * patches)
    prefill_s /= peaks["bf16_tflops"] * 1e12
    return {"compute_fps": compute, "memory_fps": batch / (decode_s + prefill_s)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["2b", "7b"], choices=sorted(CONFIGS))
    parser.add_argument("--sizes", nargs="+", type=int, default=[84, 128])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32, 128])
    parser.add_argument("--text-tokens", type=int, default=150)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--attn", nargs="+", default=["sdpa"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, default=None, help="append results as JSON lines")
    args = parser.parse_args()

    import torch

    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    peaks = hardware_peaks(args.device)
    env = {
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        **{k: round(v, 1) for k, v in peaks.items()},
    }
    print(json.dumps(env), flush=True)
    header = (
        f"{'model':>5} {'attn':>5} {'px':>4} {'batch':>5} {'tok/frame':>9} {'s/call':>8} "
        f"{'frames/s':>9} {'x batch 1':>9} {'compute':>8} {'memory':>8}"
    )
    print(header, flush=True)
    for name in args.models:
        for attn in args.attn:
            model = build_model(name, args.device, dtype, attn)
            params = count_parameters(model)
            print(json.dumps({"model": name, "parameters": params}), flush=True)
            for size in args.sizes:
                single = None
                for batch in args.batches:
                    inputs, image_tokens, patches = make_inputs(
                        batch, size, args.text_tokens, args.device, dtype
                    )
                    tokens = inputs["input_ids"].shape[1] + args.new_tokens
                    try:
                        seconds = timed_generate(
                            model, inputs, args.new_tokens, args.device, args.repeats
                        )
                    except torch.OutOfMemoryError:
                        print(f"{name:>5} {attn:>5} {size:>4} {batch:>5} out of memory", flush=True)
                        torch.cuda.empty_cache()
                        break
                    fps = batch / seconds
                    single = single or fps
                    bound = rooflines(params, tokens, patches, batch, args.new_tokens, peaks)
                    row = {
                        "model": name, "attn": attn, "size": size, "batch": batch,
                        "image_tokens": image_tokens, "tokens_per_frame": tokens,
                        "new_tokens": args.new_tokens, "seconds_per_call": seconds,
                        "frames_per_s": fps, "speedup_vs_batch_1": fps / single, **bound,
                        **env,
                    }  # fmt: skip
                    print(
                        f"{name:>5} {attn:>5} {size:>4} {batch:>5} {tokens:>9} {seconds:>8.3f} "
                        f"{fps:>9.1f} {fps / single:>9.1f} "
                        f"{bound.get('compute_fps', math.nan):>8.0f} "
                        f"{bound.get('memory_fps', math.nan):>8.0f}",
                        flush=True,
                    )
                    if args.out:
                        with open(args.out, "a") as f:
                            f.write(json.dumps(row) + "\n")
            del model
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
