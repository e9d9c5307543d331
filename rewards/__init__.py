"""toolgym.rewards: reward and advantage modules for tool search and decomposition (docs/rewards.md).

``score_group(trajectories, task) -> GroupCredit`` on every module. Modules are registered by
name (``register_reward``); ``build_reward(config, index=..., embed=..., judge=...)`` builds a
module, a named scheme (``scheme_names()``: ``toolsearcher``, ``esm_only``, ``tca_only``,
``magicselector``, ``grpo_f1``, ``grpo_match``) or a ``{modules: [{module, weight, ...options}]}``
composite from any accepted config shape (:mod:`toolgym.rewards.build`; every trainer and
integration calls it); ``get_reward(name, **runtime, **options)`` is the by-name form. Helpers
and scorer internals stay in their submodules (``toolgym.rewards.search``, ``.preference``,
``.monitors``, ...). See docs/rewards.md.
"""
if __name__ != "toolgym.rewards":  # the checkout folder imported by its own name: every module would load twice
    raise ImportError(f"this folder is the package toolgym.rewards: import toolgym.rewards (after `pip install -e .` or `make install`), not {__name__!r}")
from toolgym.rewards.base import (
    GroupCredit,
    RewardModule,
    grpo_advantage,
    grpo_advantage_masked,
    is_zero_variance,
    register_reward,
    reward_names,
)
from toolgym.rewards.search import (  # also registers esm, tca, selection_f1, selection_match, search_recall, valid_actions
    ESM,
    TCA,
    SearchRecall,
    SelectionF1,
    SelectionMatch,
    ValidActions,
    esm_tool_advantages,
    esm_turn_advantages,
    first_discoveries,
    tca_gate,
    tca_selection_advantages,
)
from toolgym.rewards.monitors import HackingMonitors
from toolgym.rewards.preference import (
    HFRewardModelScorer,
    LLMJudgeScorer,
    PreferenceScorer,
    ReferenceAgreementScorer,
    joint_decomposition_reward,
    preference_reward,
)
from toolgym.rewards.decomposition import Counterfactual, Preference
from toolgym.rewards.env_return import EnvReturn
from toolgym.rewards.composite import (
    CompositeReward,
    aggregate_components,
    get_reward,
    register_scheme,
    scheme_names,
)
from toolgym.rewards.build import DEFAULT_REWARD, build_reward, reward_config, runtime_needs

__all__ = [
    # the interface and the registry
    "GroupCredit", "RewardModule", "register_reward", "reward_names", "register_scheme", "scheme_names",
    "get_reward", "build_reward", "reward_config", "DEFAULT_REWARD", "runtime_needs", "CompositeReward",
    "aggregate_components",
    # GRPO normalisation
    "grpo_advantage", "grpo_advantage_masked", "is_zero_variance",
    # ToolSearcher credit and outcome rewards
    "ESM", "TCA", "SelectionF1", "SelectionMatch", "SearchRecall", "ValidActions", "first_discoveries", "esm_tool_advantages",
    "esm_turn_advantages", "tca_gate", "tca_selection_advantages",
    # MagicSelector decomposition rewards and preference scorers
    "Counterfactual", "Preference", "preference_reward", "joint_decomposition_reward", "PreferenceScorer",
    "ReferenceAgreementScorer", "HFRewardModelScorer", "LLMJudgeScorer",
    # the env's own return, and the hacking monitors
    "EnvReturn", "HackingMonitors",
]
