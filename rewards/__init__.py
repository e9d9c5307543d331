"""toolgym.rewards: reward and advantage modules for tool search and decomposition (DESIGN §7).

``score_group(trajectories, task) -> GroupCredit`` on every module; modules are registered by
name (``register_reward``, ``get_reward``, ``reward_names``) and combined by a config
(``build_reward``) or a named scheme (``toolsearcher``, ``magicselector``, ``grpo_f1``,
``grpo_match``). See docs/rewards.md.
"""
from toolgym.rewards.base import (
    GRPO_EPS,
    GroupCredit,
    RewardModule,
    grpo_advantage,
    grpo_advantage_masked,
    is_zero_variance,
    register_reward,
    reward_names,
)
from toolgym.rewards.search import (  # noqa: F401  (registers esm, tca, selection_f1, ...)
    ESM,
    TCA,
    SearchRecall,
    SelectionF1,
    SelectionMatch,
    esm_tool_advantages,
    esm_turn_advantages,
    first_discoveries,
    tca_gate,
    tca_selection_advantages,
)
from toolgym.rewards.monitors import (
    HackingMonitors,
    duplicate_subtask_rate,
    invalid_action_rate,
    repeated_search_rate,
)
from toolgym.rewards.preference import (
    PREFERENCE_CRITERIA,
    HFRewardModelScorer,
    LLMJudgeScorer,
    PreferenceScorer,
    ReferenceAgreementScorer,
    joint_decomposition_reward,
    preference_reward,
    reference_agreement_score,
    soft_subtask_f1,
)
from toolgym.rewards.decomposition import Counterfactual, Preference, make_scorer
from toolgym.rewards.composite import (
    SCHEMES_NEEDING_RETRIEVAL,
    CompositeReward,
    WeightedModule,
    aggregate_components,
    build_reward,
    get_reward,
    get_scheme,
    register_scheme,
    scheme_names,
)
from toolgym.rewards.batch import SearchBatch, encode_search_groups, esm_tca_batch

__all__ = [
    "GRPO_EPS", "GroupCredit", "RewardModule", "grpo_advantage", "grpo_advantage_masked", "is_zero_variance",
    "register_reward", "reward_names", "get_reward", "build_reward", "get_scheme", "scheme_names",
    "register_scheme", "CompositeReward", "WeightedModule", "aggregate_components", "SCHEMES_NEEDING_RETRIEVAL",
    "ESM", "TCA", "SelectionF1", "SelectionMatch", "SearchRecall", "esm_tool_advantages", "esm_turn_advantages",
    "first_discoveries", "tca_gate", "tca_selection_advantages", "HackingMonitors", "duplicate_subtask_rate",
    "repeated_search_rate", "invalid_action_rate", "PREFERENCE_CRITERIA", "PreferenceScorer",
    "ReferenceAgreementScorer", "HFRewardModelScorer", "LLMJudgeScorer", "preference_reward",
    "joint_decomposition_reward", "reference_agreement_score", "soft_subtask_f1", "Counterfactual", "Preference", "make_scorer",
    "SearchBatch", "encode_search_groups", "esm_tca_batch",
]
