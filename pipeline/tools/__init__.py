"""Command lines over the whole pipeline: `vlmrl-sweep` (benchmark tables as DVC
experiments, their seeds and reports), `vlmrl-verify`, `vlmrl-lockcheck`."""
