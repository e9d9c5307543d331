"""toolgym.trainers: RL training of a policy (the local GRPO loop, rollouts on Ray, the verl plugin), SFT warm starts, demonstrations, checkpoints and dataset export."""
if __name__ != "toolgym.trainers":  # the checkout folder imported by its own name: every module would load twice
    raise ImportError(f"this folder is the package toolgym.trainers: import toolgym.trainers (after `pip install -e .` or `make install`), not {__name__!r}")
