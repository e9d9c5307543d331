"""toolgym's verl plugin (docs/scale.md): loaded into an unmodified verl, no patched files.

Importing this package registers, in the importing process:

* the agent loop ``toolgym_agent`` (:class:`.agent_loop.ToolgymAgentLoop`);
* the advantage estimator ``toolgym_turn_credit`` (:mod:`.credit`).

verl imports it in every one of its processes when ``VERL_USE_EXTERNAL_MODULES=toolgym.trainers.verl``
is set (``configs/verl/launch.sh`` does). The other parts are named by path in the verl config:
``ToolgymTool`` in the tool YAML (``configs/verl/tool_config.yaml``), ``ToolgymAgentLoopManager``
as ``actor_rollout_ref.rollout.agent.agent_loop_manager_class`` and :func:`.reward.compute_score`
as ``reward.custom_reward_function``. See docs/scale.md.
"""
from toolgym.trainers.verl.agent_loop import AGENT_NAME, ToolgymAgentLoop, ToolgymAgentLoopManager, TurnCreditScorer
from toolgym.trainers.verl.credit import ESTIMATOR_NAME, compute_turn_credit_advantage, register_estimator
from toolgym.trainers.verl.tool import ToolgymTool

register_estimator()

__all__ = ["AGENT_NAME", "ESTIMATOR_NAME", "ToolgymAgentLoop", "ToolgymAgentLoopManager", "ToolgymTool",
           "TurnCreditScorer", "compute_turn_credit_advantage", "register_estimator"]
