"""benchmarks/return_spread.py: the seed spread behind the reproducibility tolerance."""

import json
import statistics

import pytest

from benchmarks.return_spread import main


def _metrics(root, eval_return, train_return):
    (root / "eval").mkdir(parents=True)
    (root / "train").mkdir()
    (root / "eval" / "cart-sac.json").write_text(
        json.dumps({"return_mean": eval_return, "episodes": 5})
    )
    (root / "train" / "cart-sac.json").write_text(json.dumps({"last_eval_return": train_return}))
    return root


def test_the_tolerance_is_four_sample_stds_of_the_largest_spread(tmp_path, capsys):
    seeds = [
        _metrics(tmp_path / f"s{i}", e, t) for i, (e, t) in enumerate([(10, 0), (20, 0), (40, 3)])
    ]
    native = _metrics(tmp_path / "native", 13, 0)
    main(["--seeds", *map(str, seeds), "--kernels", str(native), "--envs", "cart"])
    out = capsys.readouterr().out
    std = statistics.stdev([10, 20, 40])
    assert (
        f"| eval/cart-sac | return_mean | 10.0 | 20.0 | 40.0 | 23.3 +- {std:.1f} | {4 * std:.1f} | 3.0 |"
        in out
    )
    assert out.strip().endswith(f"| cart | {4 * std:.1f} |")


def test_one_seed_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="at least two"):
        main(["--seeds", str(_metrics(tmp_path / "s0", 1, 1))])
