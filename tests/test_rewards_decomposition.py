"""MagicSelector rewards on hand numbers: NDCG / R_cf, fusion options, the three preference
scorers (reference-based, HF sequence classifier, LLM judge) and the joint scheme."""
from __future__ import annotations

import math

import numpy as np
import pytest

from toolgym.data.records import Task, Trajectory
from toolgym.rewards import (
    Counterfactual,
    HFRewardModelScorer,
    LLMJudgeScorer,
    Preference,
    ReferenceAgreementScorer,
    get_reward,
    grpo_advantage,
    joint_decomposition_reward,
    preference_reward,
)
from toolgym.rewards.preference import PREFERENCE_CRITERIA, parse_judge_scores, soft_subtask_f1

L3 = 1 / math.log2(3)  # discount of rank 2
L4 = 1 / math.log2(4)  # discount of rank 3
IDCG2 = 1 + L3  # ideal DCG for |G| = 2


def table_retrieve(table: dict[str, list]):
    calls = []

    def retrieve(queries: list[str], k: int) -> list[list]:
        calls.append(list(queries))
        return [table[q][:k] for q in queries]

    retrieve.calls = calls
    return retrieve


TASK = Task(id="d1", query="then book a taxi there", gold=frozenset({"a", "b"}),
            messages=({"role": "user", "content": "find an airport"},),
            subtasks=("find an airport", "book a taxi to the airport"))
RAW = "find an airport then book a taxi there"  # Task.context_text: the same query DecompositionEnv uses


def rollout(subtasks: list[str]) -> Trajectory:
    return Trajectory(task_id="d1", subtasks=subtasks, num_turns=1, terminated_by="submit")


# -- counterfactual --------------------------------------------------------------------------
def test_counterfactual_hand_numbers_round_robin():
    retrieve = table_retrieve({
        RAW: ["x", "a", "y"],
        "find a": ["a", "x", "z"],
        "find b": ["b", "y", "a"],
        "nothing": ["x", "y", "z"],
    })
    module = Counterfactual(retrieve, k=3)
    group = [rollout(["find a", "find b"]), rollout(["find b"]), rollout(["nothing"]), rollout([]), rollout(["  "])]
    credit = module.score_group(group, TASK)
    n_raw = L3 / IDCG2  # raw top-3 [x, a, y]: gold at rank 2 -> 0.38685
    assert n_raw == pytest.approx(0.386853, abs=1e-6)
    # rollout 0: round robin [a, b, x, y, z][:3] = [a, b, x] -> NDCG 1, complete -> (1 - n_raw) + (1 - 0)
    # rollout 1: [b, y, a] -> (1 + L4) / IDCG2 = 0.91972, complete
    # rollout 2: [x, y, z] -> NDCG 0: max(0, 0 - n_raw) = 0, completeness 0 - 0
    # rollouts 3, 4: no (non-blank) subtasks -> empty list -> 0
    expected = [(1 - n_raw) + 1, ((1 + L4) / IDCG2 - n_raw) + 1, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(credit.rewards, expected, atol=1e-12)
    assert credit.components["ndcg_raw"] == pytest.approx(n_raw)
    assert credit.components["full_atom"] == pytest.approx(2 / 5)
    # one retrieve call for the raw context and every distinct subtask
    assert len(retrieve.calls) == 1 and retrieve.calls[0][0] == RAW and len(retrieve.calls[0]) == 4


def test_counterfactual_lambdas_and_fusion_options():
    scored = {
        RAW: [("x", 1.0), ("a", 0.5), ("y", 0.2)],
        "find a": [("x", 0.6), ("a", 0.55), ("z", 0.1)],
        "find b": [("b", 0.95), ("a", 0.9), ("y", 0.5)],
    }
    group = [rollout(["find a", "find b"]), rollout(["find b"])]
    n_raw = L3 / IDCG2
    # round robin [x, b, a]: (L3 + L4)/IDCG2; rrf: a = 2/62 first, then x, b (1/61 each, first seen) -> [a, x, b]
    # max score: b .95, a .9, x .6 -> [b, a, x] -> NDCG 1
    n_atom = {"round_robin": (L3 + L4) / IDCG2, "rrf": (1 + L4) / IDCG2, "max_score": 1.0}
    for fusion, n in n_atom.items():
        credit = Counterfactual(table_retrieve(scored), k=3, fusion=fusion, lambda_ndcg=2.0, lambda_full=0.5).score_group(group, TASK)
        assert credit.rewards[0] == pytest.approx(2.0 * (n - n_raw) + 0.5 * 1), fusion
    with pytest.raises(ValueError, match="max_score"):
        Counterfactual(table_retrieve({RAW: ["x"], "find a": ["a"]}), k=3, fusion="max_score").score_group([rollout(["find a"])], TASK)
    with pytest.raises(ValueError, match="fusion"):
        Counterfactual(table_retrieve({}), fusion="borda")
    with pytest.raises(ValueError, match="retrieve"):
        get_reward("counterfactual")


def test_counterfactual_completeness_can_be_negative():
    # raw context already complete, decomposition loses b: 0 gain, completeness 0 - 1
    retrieve = table_retrieve({RAW: ["a", "b", "x"], "only a": ["a", "x", "y"]})
    credit = Counterfactual(retrieve, k=3).score_group([rollout(["only a"])], TASK)
    assert credit.rewards[0] == pytest.approx(-1.0)
    assert credit.advantages[0] == 0.0  # group of one


def test_signed_ndcg_gain_charges_a_split_that_ranks_the_gold_tools_lower():
    # raw [a, b, x]: NDCG 1; split [a, x, b]: DCG 1 + 1/2, NDCG (1 + L4) / IDCG2 = 0.9197; both complete
    retrieve = table_retrieve({RAW: ["a", "b", "x"], "s1": ["a", "x", "y"], "s2": ["x", "b", "y"]})
    group = [rollout(["s1", "s2"]), rollout([RAW])]
    clipped = Counterfactual(retrieve, k=3).score_group(group, TASK)
    assert list(clipped.rewards) == [0.0, 0.0] and list(clipped.advantages) == [0.0, 0.0]  # the clip hides the loss
    signed = Counterfactual(retrieve, k=3, ndcg_gain="signed").score_group(group, TASK)
    assert signed.rewards[0] == pytest.approx((1 + L4) / IDCG2 - 1) and signed.rewards[0] == pytest.approx(-0.080, abs=1e-3)
    assert signed.rewards[1] == 0.0 and signed.advantages[0] < 0 < signed.advantages[1]
    for bad in ("signed ", "max", None):
        with pytest.raises(ValueError, match="ndcg_gain"):
            Counterfactual(retrieve, k=3, ndcg_gain=bad)


# -- preference ------------------------------------------------------------------------------
def test_preference_reward_is_sigmoid_of_difference():
    assert preference_reward(1.0, 1.0) == pytest.approx(0.5)
    assert preference_reward(2.0, 1.0) == pytest.approx(1 / (1 + math.exp(-1)))
    assert preference_reward(-800.0, 0.0) == pytest.approx(0.0)  # no overflow
    np.testing.assert_allclose(joint_decomposition_reward([0.5, 1.0], [2.0, 0.0], alpha=0.3, beta=2.0), [4.15, 0.3])


def test_soft_subtask_f1_hand_numbers():
    sim = np.array([[1.0, 0.0], [0.0, 0.8], [0.2, -0.5]])
    # P = mean(1, .8, .2) = 2/3; R = mean(1, .8) = .9; F1 = 2PR/(P+R)
    p, r = 2 / 3, 0.9
    assert soft_subtask_f1(sim) == pytest.approx(2 * p * r / (p + r))
    assert soft_subtask_f1(np.zeros((0, 2))) == 0.0


VECTORS = {
    "book a taxi to the airport": [1.0, 0.0, 0.0],
    "Book a taxi to the airport!": [1.0, 0.0, 0.0],
    "play jazz music": [0.0, 1.0, 0.0],
    "play some jazz": [0.0, 0.8, 0.6],
    "play it": [0.0, 0.6, 0.8],
}


def fake_embed(texts: list[str]) -> np.ndarray:
    return np.array([VECTORS[t] for t in texts])


def test_reference_scorer_hand_numbers():
    task = Task(id="p", query="q", gold=frozenset({"a"}), subtasks=("book a taxi to the airport", "play jazz music"))
    scorer = ReferenceAgreementScorer(embed=fake_embed)  # scale 4, w_dup 1, w_empty 1, w_pron .5
    cands = [
        ["book a taxi to the airport", "play some jazz"],  # P = R = .9 -> F1 .9
        ["book a taxi to the airport", "Book a taxi to the airport!", "play jazz music"],  # F1 1, dup 1/3
        ["play it"],  # sims [0, .6]: P .6, R .3 -> F1 .4; pronoun share 1
        [],  # empty -> -w_empty
        ["book a taxi to the airport", "", "play jazz music"],  # F1 1, blank share 1/3
        list(task.subtasks),  # the reference itself
    ]
    s = scorer.score(task, cands)
    np.testing.assert_allclose(s, [4 * 0.9, 4 * (1 - 1 / 3), 4 * (0.4 - 0.5), -4.0, 4 * (1 - 1 / 3), 4.0], atol=1e-12)
    credit = Preference(scorer=scorer).score_group([Trajectory("p", subtasks=c, num_turns=1) for c in cands[:3]], task)
    np.testing.assert_allclose(credit.rewards, preference_reward(s[:3], 4.0))
    assert credit.components["reference_score"] == 4.0


def test_preference_needs_a_reference():
    task = Task(id="p", query="q", gold=frozenset({"a"}))
    with pytest.raises(ValueError, match="reference"):
        Preference(scorer=ReferenceAgreementScorer(embed=fake_embed)).score_group([Trajectory("p", subtasks=["x"])], task)


@pytest.fixture(scope="module")
def minilm():
    from toolgym.rewards.embedding import minilm_embed

    return minilm_embed


def test_reference_scorer_with_minilm_prefers_the_resolved_decomposition(minilm):
    task = Task(id="m", query="Also book a taxi there for 6 pm", gold=frozenset({"a"}),
                messages=({"role": "user", "content": "Find me a sushi restaurant in Shibuya"},),
                subtasks=("Find a sushi restaurant in Shibuya", "Book a taxi to the sushi restaurant in Shibuya at 6 pm"))
    scorer = ReferenceAgreementScorer(embed=minilm)
    good = ["Find a sushi restaurant in Shibuya", "Book a taxi to the Shibuya sushi restaurant for 6 pm"]
    lazy = ["Find a sushi restaurant", "Book a taxi there"]  # "there" left unresolved
    spam = ["Find a sushi restaurant in Shibuya"] * 3
    s_good, s_lazy, s_spam, s_ref = scorer.score(task, [good, lazy, spam, list(task.subtasks)])
    assert s_good > s_lazy and s_good > s_spam
    assert s_ref == pytest.approx(4.0, abs=1e-5)
    assert s_good <= s_ref + 1e-6


# -- HF sequence-classification reward model (tiny, random, built from a config) -------------
@pytest.fixture(scope="module")
def tiny_rm():
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from toolgym.retrieval.models import minilm_path

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(minilm_path()))
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=1, max_position_embeddings=128)
    return BertForSequenceClassification(config).eval(), tok


def test_hf_reward_model_scorer_matches_a_manual_forward(tiny_rm):
    import torch

    model, tok = tiny_rm
    scorer = HFRewardModelScorer(model, tok, batch_size=2, max_length=128)
    cands = [["Find a sushi restaurant"], ["Book a taxi", "Play jazz"], []]
    s = scorer.score(TASK, cands)
    assert s.shape == (3,) and np.all(np.isfinite(s))
    enc = tok(TASK.dialogue_text(), "1. Book a taxi\n2. Play jazz", return_tensors="pt")  # the reader sees the dialogue
    with torch.inference_mode():
        manual = model(**enc).logits[0, 0].item()
    assert s[1] == pytest.approx(manual, abs=1e-5)
    # batching (padding) does not change scores
    np.testing.assert_allclose(HFRewardModelScorer(model, tok, batch_size=16).score(TASK, cands), s, atol=1e-5)
    assert len(set(np.round(s, 6))) == 3  # a random model still tells the inputs apart
    credit = Preference(scorer=scorer).score_group([rollout(c) for c in cands], TASK)
    ref = scorer.score(TASK, [list(TASK.subtasks)])[0]
    np.testing.assert_allclose(credit.rewards, preference_reward(s, ref), atol=1e-6)


def test_hf_scorer_uses_the_chat_template_when_there_is_one(tiny_rm):
    model, tok = tiny_rm
    scorer = HFRewardModelScorer(model, tok)
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    try:
        texts, second = scorer._pairs(TASK, [["Book a taxi"]])
    finally:
        tok.chat_template = None
    assert second is None and texts[0].startswith("<user>") and "<assistant>1. Book a taxi" in texts[0]


def test_hf_scorer_label_index_for_two_label_models(tiny_rm):
    from transformers import BertConfig, BertForSequenceClassification

    _, tok = tiny_rm
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, num_labels=2, max_position_embeddings=128)
    model = BertForSequenceClassification(config).eval()
    s_pos = HFRewardModelScorer(model, tok, label_index=1).score(TASK, [["a b"]])
    s_neg = HFRewardModelScorer(model, tok, label_index=0).score(TASK, [["a b"]])
    assert s_pos[0] != s_neg[0]


# -- LLM judge ---------------------------------------------------------------------------------
def scripted_judge(messages: list[dict]) -> str:
    text = messages[-1]["content"].split("Subtasks:")[1]  # grade the subtasks, not the dialogue
    if "(no subtasks)" in text:
        return "This is empty. garbage"
    if "book a taxi to the airport" in text:  # the reference (TASK.subtasks)
        return 'Scores: {"completeness": 9, "accuracy": 9, "coreference_resolution": 10, "standard_expression": 8, "context_consistency": 9}'
    if "there" in text:
        return "completeness: 6\naccuracy 7\ncoreference resolution: 2\nstandard_expression: 8\ncontext_consistency: 15"
    return '{"completeness": 8, "accuracy": 8, "coreference_resolution": 8, "standard_expression": 8, "context_consistency": 8}'


def test_llm_judge_scorer_with_a_scripted_judge():
    seen = []

    def judge(messages):
        seen.append(messages)
        return scripted_judge(messages)

    scorer = LLMJudgeScorer(judge)
    cands = [["Find an airport", "Book a taxi"], ["Book a taxi there"], []]
    s = scorer.score(TASK, cands)
    # 8; mean(6, 7, 2, 8, clip(15) = 10) = 6.6; unparseable -> fallback 1
    np.testing.assert_allclose(s, [8.0, 6.6, 1.0])
    assert scorer.parse_failures == 1
    system = seen[0][0]["content"]
    assert all(c in system for c in PREFERENCE_CRITERIA)
    assert "find an airport" in seen[0][1]["content"] and "1. Find an airport" in seen[0][1]["content"]

    credit = Preference(scorer="judge", judge=judge).score_group([rollout(c) for c in cands], TASK)
    ref = np.mean([9, 9, 10, 8, 9])
    np.testing.assert_allclose(credit.rewards, preference_reward(np.array([8.0, 6.6, 1.0]), ref))
    assert credit.components["judge_parse_failures"] == 1.0


def test_llm_judge_accepts_an_object_with_generate():
    class Policy:
        def generate(self, messages):
            return scripted_judge(messages)

    assert LLMJudgeScorer(Policy()).score(TASK, [["Find an airport"]])[0] == 8.0
    with pytest.raises(TypeError):
        LLMJudgeScorer(42)


def test_parse_judge_scores():
    assert parse_judge_scores("nothing") is None
    assert parse_judge_scores('{"completeness": 1}') is None
    full = '{"Completeness": 1, "Accuracy": 2, "Coreference Resolution": 3, "Standard Expression": 4, "Context Consistency": 5}'
    assert parse_judge_scores(full) == dict(zip(PREFERENCE_CRITERIA, [1.0, 2.0, 3.0, 4.0, 5.0]))


# -- the joint scheme --------------------------------------------------------------------------
def test_magicselector_scheme_is_grpo_of_the_joint_reward():
    retrieve = table_retrieve({
        RAW: ["x", "a", "y"],
        "book a taxi to the airport": ["a", "b", "x"],
        "play jazz music": ["x", "y", "z"],
        "play some jazz": ["b", "x", "y"],
    })
    task = Task(id="d1", query=TASK.query, gold=TASK.gold, messages=TASK.messages,
                subtasks=("book a taxi to the airport", "play jazz music"))
    group = [rollout(["book a taxi to the airport", "play some jazz"]), rollout(["play jazz music", "play jazz music"]),
             rollout(["play some jazz"])]
    scheme = get_reward("magicselector", retrieve=retrieve, embed=fake_embed, alpha=0.5, beta=2.0, k=3)
    credit = scheme.score_group(group, task)
    r_cf = Counterfactual(retrieve, k=3).score_group(group, task).rewards
    r_pref = Preference(scorer=ReferenceAgreementScorer(embed=fake_embed)).score_group(group, task).rewards
    joint = joint_decomposition_reward(r_pref, r_cf, alpha=0.5, beta=2.0)
    np.testing.assert_allclose(credit.rewards, joint)
    np.testing.assert_allclose(credit.advantages, grpo_advantage(joint))
    assert credit.turn_advantages is None
    assert credit.components["monitors/duplicate_subtask_rate"] == pytest.approx(1 / 5)
    assert {"preference/r_pref", "counterfactual/r_cf", "counterfactual/zero_var", "outcome/zero_var"} <= set(credit.components)


@pytest.mark.parametrize("fusion", ["round_robin", "rrf", "max_score"])
def test_env_reward_equals_the_reward_module_on_the_same_rollout(fusion):
    """DecompositionEnv and the counterfactual module retrieve the same raw context: same R_cf."""
    import gymnasium as gym

    import toolgym.envs  # noqa: F401  (registers the ids)

    env = gym.make("toolgym/Decompose-v0", fusion=fusion)
    module = get_reward("counterfactual", retrieve=env.unwrapped.index.retriever(), fusion=fusion, k=10)
    for seed in range(3):
        _, info = env.reset(seed=seed)
        task = env.unwrapped.tasks[[t.id for t in env.unwrapped.tasks].index(info["task_id"])]
        words = task.query.split()
        action = "\n".join([" ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2:])])
        _, env_reward, *_, step_info = env.step(action)
        credit = module.score_group([step_info["trajectory"]], task)
        assert credit.rewards[0] == pytest.approx(env_reward)
    env.close()
