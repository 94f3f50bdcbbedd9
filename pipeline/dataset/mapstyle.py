"""A dataset's transitions as a map-style dataset: `len()` and `ds[i]`, frames stacked by index
(the stacking rule of pipeline.core.stacking), the way LeRobotDataset serves its frames. Hand
it to torch's `DataLoader(ds, batch_size=..., shuffle=True)` (which needs only `__len__` and
`__getitem__`) or index it yourself; nothing here imports torch.

It reads the dataset's `data/train-*.parquet` (what `load_dataset(dir)` reads) through
`load_offline_transitions`, the reader the agents' replay uses, so that item i is the transition
the replay's offline row i holds: the same frames, action, reward and labels. `iter_stacked`
streams the training shards instead, in order, for one pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core.stacking import stack_window
from pipeline.dataset.transitions import Label, ObsKind, load_offline_transitions


class StackedDataset:
    """Transition i of a dataset as a dict of numpy arrays: `key` (`<episode>/<t>` of o_t, the
    dataset's and the label table's key of its frame), `episode`, `t`, `obs` and `next_obs` (pixels: the
    last `stack` frames of the episode, (stack, H, W, 3) uint8, oldest first, the first frame
    repeated before the episode's start; state: the state), `action`, `reward`, `terminated`,
    and each field of the label groups asked for (`labels`: "action" gives ERPv's `a_v` and its
    mask, "judge" Semore's verdicts, "mask" its masks, per frame of `obs`). `also`: more
    dataset directories read after it, as one (a run's labelling rounds)."""

    def __init__(
        self,
        dataset_dir: str | Path,
        obs: ObsKind = "pixels",
        stack: int = 3,
        labels: Iterable[Label] = (),
        also: Sequence[str | Path] = (),
    ) -> None:
        if stack < 1:
            raise ValueError(f"stack must be >= 1, got {stack}")
        self.data = load_offline_transitions(dataset_dir, obs, labels, also)
        self.obs_kind, self.stack = obs, stack

    def __len__(self) -> int:
        return len(self.data)

    def _frames(self, index: int, start: int) -> np.ndarray:
        if self.obs_kind == "state":
            return self.data.obs[index]
        window = stack_window(np.array([index]), np.array([start]), self.stack)[0]
        return self.data.obs[window]

    def __getitem__(self, i: int) -> dict[str, Any]:
        n = len(self)
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"index a StackedDataset with an int, got {type(i).__name__}")
        if not -n <= i < n:
            raise IndexError(f"transition {i} of a dataset of {n}")
        i = int(i) % n
        data = self.data
        index = int(data.obs_index[i])
        start = int(data.episode_start[index])
        assert data.episode is not None and data.t is not None  # read from a dataset
        item: dict[str, Any] = {
            "obs": self._frames(index, start),
            "action": data.action[i],
            "reward": data.reward[i],
            "next_obs": self._frames(index + 1, start),
            "terminated": data.terminated[i],
            # which sample o_t is: its row in the dataset and the label table (`sample_key`)
            "key": data.sample_key(index),
            "episode": int(data.episode[index]),
            "t": int(data.t[index]),
            "part": int(data.part[i]),  # 0: the dataset; k: its k-th `also`
        }
        for spec in data.specs:
            values = data.fields[spec.name]
            item[spec.name] = values[index] if spec.per == "observation" else values[i]
        return item
