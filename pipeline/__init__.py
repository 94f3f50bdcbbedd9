"""vlmrl-pipeline: VLM labels paid for once (stage one), read by RL agents (stage two)."""
