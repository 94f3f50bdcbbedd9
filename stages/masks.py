"""DVC stage `masks@<env>`: masks for the object phrases of the env's `objects` labels.

    python -m stages.masks --params params.yaml --rollouts data/rollouts/CarRacing-v3 \\
        --labels data/labels/CarRacing-v3.parquet --cache data/mask_cache/CarRacing-v3 \\
        --out data/masks/CarRacing-v3.parquet
"""

from __future__ import annotations

import argparse
import sys

from pipeline.core.config import ConfigError, MasksConfig, load_params
from pipeline.core.errors import PipelineError, print_error
from pipeline.teach.masks import make_mask_backend
from pipeline.teach.masks.compute import compute_masks


def ray_settings(cfg: MasksConfig) -> dict:
    """compute_masks' Ray arguments: each actor builds the back end from the same settings."""
    if cfg.executor != "ray":
        return {}
    return {"ray": cfg.ray, "ray_build": lambda: make_mask_backend(cfg)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--rollouts", required=True)
    parser.add_argument("--labels", required=True, help="label table with `objects` rows")
    parser.add_argument("--cache", required=True, help="mask cache directory (kept across runs)")
    parser.add_argument("--out", required=True, help="mask table to write (parquet)")
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
        if params.masks is None:
            raise ConfigError(f"{args.params} has no `masks` section")
        backend = make_mask_backend(params.masks)
        summary = compute_masks(
            args.rollouts,
            args.labels,
            backend,
            args.cache,
            args.out,
            batch_size=params.masks.batch_size,
            **ray_settings(params.masks),
        )
    except (PipelineError, OSError) as exc:
        print_error(exc)
        return 2
    print(
        f"{args.out}: {summary.samples} frames, {summary.statuses['ok']} with masks "
        f"({summary.computed} computed, {summary.cache_hits} from the cache), "
        f"{summary.statuses['no_objects']} without an objects label"
    )
    if summary.statuses["no_backend"]:
        print(
            f"note: masks back end {backend.backend_id} has no masks for this env: "
            f"{summary.statuses['no_backend']} frames with object phrases are listed without one; "
            "set masks.backend to clip_dense or clipseg for masks of any env"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
