"""vlmrl-pipeline: VLM labels paid for once (stage one), read by RL agents (stage two)."""

from pipeline.core.kernels import pin_portable_kernels

# before anything imports numpy through this package: the same float kernels on every x86-64
# machine, so that data outputs hash as in dvc.lock (pipeline/core/kernels.py says why)
pin_portable_kernels()
