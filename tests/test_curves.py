"""The compare stage's PNG curves: drawn for any number of episodes."""

import numpy as np
import pytest
from PIL import Image

from pipeline.curves import plot_curves, trailing_mean


def test_trailing_mean_starts_at_the_first_episode():
    values = np.array([1.0, 3.0, 5.0, 7.0])
    assert trailing_mean(values, 2).tolist() == [1.0, 2.0, 4.0, 6.0]
    assert trailing_mean(values, 10).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert trailing_mean(values, 1).tolist() == values.tolist()


def _pixels_of(path, rgb):
    image = np.asarray(Image.open(path).convert("RGB")).astype(int)
    return int((np.abs(image - np.array(rgb)).sum(axis=-1) < 30).sum())


@pytest.mark.parametrize("episodes", [1, 3, 40])
def test_every_run_is_visible_however_few_its_episodes(episodes, tmp_path):
    """A run with fewer episodes than the smoothing window once drew nothing."""
    rng = np.random.default_rng(0)
    curve = [(100 * (i + 1), float(r)) for i, r in enumerate(rng.normal(size=episodes))]
    plot_curves({"run (sac)": curve}, "t", tmp_path / "c.png")
    c0 = (31, 119, 180)  # matplotlib's C0, the first run's colour
    assert _pixels_of(tmp_path / "c.png", c0) > 40  # more than the legend's short line
