"""RL agents that read cached labels; nothing here imports a teacher."""
