"""Stage one, where the teacher is paid for once: collect rollouts, ask the teacher (label),
compute CLIP masks, audit and correct the answers, and measure the teacher acting alone. Imports
only `pipeline.core`: never stage two (a trained agent reaches it as a deployed policy that its
stage loads, `pipeline.core.policy`)."""
