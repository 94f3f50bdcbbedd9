"""Stage two, which reads only the dataset: agents (PPO and the SAC family), the methods
(sac, drq, erpv, semore, hybrid_ppo, ppo), reward shaping, C_V's pre-training, evaluation and
learning curves. Imports `pipeline.core` and `pipeline.dataset`: never stage one."""
