"""RL agents that read cached labels; nothing here imports a teacher."""

# Beside every agent checkpoint: which architecture to rebuild, what was trained, on what data.
AGENT_JSON = "agent.json"
