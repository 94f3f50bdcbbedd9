"""RL agents that read cached labels; nothing here imports a teacher.

Every agent (PPO's actor-critic, SAC, ERPv, Semore) offers the same deployment interface
(`pipeline.agents.load.Agent`) and checkpoint layout (`pipeline.agents.checkpoint`);
`pipeline.agents.load.load_agent(dir)` rebuilds any of them.
"""
