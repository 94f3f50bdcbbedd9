"""RL agents that read cached labels; nothing here imports a teacher.

Every agent (PPO's actor-critic, and the SAC family on one off-policy base: SAC, ERPv, Semore)
offers the same deployment interface (`pipeline.learn.evaluation.Agent`) and checkpoint layout
(`pipeline.learn.agents.checkpoint`); a method (pipeline.learn.methods) says how to train and load each.
"""
