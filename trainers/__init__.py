"""toolgym.trainers: RL training of a policy (the local GRPO loop, rollouts on Ray, the verl plugin), SFT warm starts, demonstrations, checkpoints and dataset export."""
