"""Foundations that both wings stand on: errors, atomic writes, env ids and the env factory,
params.yaml as typed config, table schemas, the parquet store, keyed caches, Ray batches, the
portable float kernels, frame stacking, and the deployed-policy protocol. Imports nothing else
of the package."""
