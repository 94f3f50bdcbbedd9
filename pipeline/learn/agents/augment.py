"""Random-shift augmentation of frame stacks (DrQ, Kostrikov, Yarats & Fergus 2020; DrQ-v2's
`RandomShiftsAug`): pad each frame by `pad` pixels replicating its border, crop it back at a random
integer offset, one offset per row of the batch.

Replicate padding followed by a crop is an index clamp: output pixel (i, j) of a row shifted by
(dy, dx) is input pixel (clamp(i + dy - pad), clamp(j + dx - pad)). So the shift is one gather on
the frames as they are (uint8 stays uint8: a quarter of the float traffic), on whatever device they
live, with no padded copy and no interpolation (DrQ-v2 uses `grid_sample`; the result is the same
whole-pixel crop). Several tensors of one row (a frame stack and its Semore mask) take the same
offset through `shift`.
"""

from __future__ import annotations

import torch


def shift_offsets(n: int, pad: int, device: torch.device | str) -> torch.Tensor:
    """(n, 2) integer offsets (dy, dx), each uniform in [0, 2 pad]: the crop's top-left corner in
    the padded frame. Drawn from torch's global RNG of `device` (saved in a resume state on CPU)."""
    return torch.randint(0, 2 * pad + 1, (n, 2), device=device)


def shift(x: torch.Tensor, offsets: torch.Tensor, pad: int) -> torch.Tensor:
    """Frames (B, C, H, W) of any dtype, each row cropped at its offset (B, 2) from its
    replicate-padded self; same shape and dtype."""
    b, c, h, w = x.shape
    if offsets.shape != (b, 2):
        raise ValueError(f"need one (dy, dx) offset per row, shape ({b}, 2); got {offsets.shape}")
    dy, dx = (offsets - pad).unbind(-1)  # (B,) each, in [-pad, pad]
    rows = (torch.arange(h, device=x.device) + dy[:, None]).clamp_(0, h - 1)  # (B, H)
    cols = (torch.arange(w, device=x.device) + dx[:, None]).clamp_(0, w - 1)  # (B, W)
    index = (rows[:, :, None] * w + cols[:, None, :]).flatten(1)  # (B, H*W) into the flat frame
    return x.flatten(2).gather(2, index[:, None, :].expand(b, c, h * w)).view(b, c, h, w)


def random_shift(x: torch.Tensor, pad: int) -> torch.Tensor:
    """Frames (B, C, H, W) shifted by a random whole-pixel offset in [-pad, pad] on each axis, per
    row, the border replicated (DrQ's augmentation)."""
    return shift(x, shift_offsets(len(x), pad, x.device), pad)
