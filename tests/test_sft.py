"""The supervised warm start: one token layout shared with the GRPO rollout, masked labels, a run."""
import json

import numpy as np
import pytest

from toolgym.agents.hf_policy import Generation, HFChatPolicy, load_causal_lm
from toolgym.trainers.demos import collect_demos
from toolgym.evaluation.paired import paired_gain
from toolgym.trainers.sft import build_examples, episode_tokens, load_sft_config, turn_end_id


@pytest.fixture(scope="module")
def tiny_policy():
    model, tok = load_causal_lm("tiny-llama")
    return HFChatPolicy(model, tok, {"max_new_tokens": 256, "stop_strings": ["</tool_call>"]})


class _ReplayPolicy:
    """Wraps a real policy; "samples" exactly the given per-turn ids (one script per env slot)."""

    def __init__(self, policy, scripts):
        self.inner, self.scripts = policy, scripts
        self.sampling, self.end_ids, self.tokenizer = policy.sampling, policy.end_ids, policy.tokenizer
        self.turn = 0

    def encode_prompt(self, messages, tools=None):
        return self.inner.encode_prompt(messages, tools)

    def encode_tool_turn(self, text, generated_end):
        return self.inner.encode_tool_turn(text, generated_end)

    def generate_batch(self, prompts, max_new_tokens=None):
        out = [Generation(self.tokenizer.decode(s[self.turn], skip_special_tokens=True), list(s[self.turn]), "stop")
               for s in self.scripts[: len(prompts)]]
        self.turn += 1
        return out


def _same_layout_as_rollout(policy, env_id, env_kwargs, agents, stop_strings):
    """Demo episodes -> SFT ids; replaying the demo's turn ids through the real env must give the same sequence."""
    import gymnasium

    from toolgym.agents.rollout import collect_rollouts

    groups, _ = collect_demos(env_id, agents, split="train", limit=3, env_kwargs=env_kwargs, progress=False)
    assert groups
    for task, (demo,) in groups:
        ids, mask, spans = episode_tokens(policy, demo.messages, stop_strings)
        turns = [ids[a:b] for a, b in spans]
        env = gymnasium.make(env_id, split="train", **env_kwargs)
        (rollout,) = collect_rollouts(_ReplayPolicy(policy, [turns]), [env], [task.id], seeds=[0])
        traj = rollout.trajectory
        assert traj.token_ids == ids
        assert traj.loss_mask == mask
        assert [tuple(s) for s in traj.turn_spans] == spans
        assert rollout.env_return == pytest.approx(demo.env_reward)  # the replay is the same episode
        assert [m["content"] for m in traj.messages if m["role"] == "assistant"] == \
               [m["content"] for m in demo.messages if m["role"] == "assistant"]


def test_sft_ids_equal_rollout_ids_on_toolsearch(tiny_policy):
    import toolgym.envs  # noqa: F401

    _same_layout_as_rollout(tiny_policy, "toolgym/ToolSearch-v0", {"max_turns": 4}, ["clauses_top1"], ["</tool_call>"])


def test_sft_ids_equal_rollout_ids_on_decompose_with_end_token(tiny_policy):
    import toolgym.envs  # noqa: F401

    policy = HFChatPolicy(tiny_policy.model, tiny_policy.tokenizer, {"max_new_tokens": 256, "stop_strings": []})
    _same_layout_as_rollout(policy, "toolgym/Decompose-v0", {}, ["clauses"], ["</tool_call>"])
    groups, _ = collect_demos("toolgym/Decompose-v0", ["clauses"], split="train", limit=1, progress=False)
    ids, mask, spans = episode_tokens(policy, groups[0][1][0].messages)
    assert ids[spans[-1][1] - 1] == turn_end_id(policy) and mask[-1] == 1  # the model learns to end its turn


def test_masks_tool_text_and_template_glue(tiny_policy):
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "find tools"},
                {"role": "assistant", "content": "<tool_call>A</tool_call>"},
                {"role": "tool", "content": "RESULT TEXT"},
                {"role": "assistant", "content": "<tool_call>B</tool_call>"},
                {"role": "tool", "content": "The episode is over."}]
    ids, mask, spans = episode_tokens(tiny_policy, messages)
    tok = tiny_policy.tokenizer
    assert tok.decode([t for t, m in zip(ids, mask) if m]) == "<tool_call>A</tool_call><tool_call>B</tool_call>"
    assert "RESULT TEXT" in tok.decode([t for t, m in zip(ids, mask) if not m])
    assert "episode is over" not in tok.decode(ids)  # the closing observation is not part of the sequence
    # The whole sequence is the chat template of the episode (up to the last assistant turn).
    full = tok.apply_chat_template(messages[:5], tokenize=False, add_generation_prompt=False)
    assert tok.decode(ids) == full[: len(tok.decode(ids))]
    (ex,), dropped = build_examples(tiny_policy, [messages], ["</tool_call>"], max_tokens=10_000)
    assert dropped == 0
    assert [l != -100 for l in ex["labels"]] == [bool(m) for m in mask]
    assert build_examples(tiny_policy, [messages], ["</tool_call>"], max_tokens=5) == ([], 1)
    with pytest.raises(ValueError, match="no assistant"):
        episode_tokens(tiny_policy, messages[:2])


def test_paired_gain_on_hand_computed_numbers():
    # d = [1, 0, 1, 0]: mean 0.5; sd (ddof 1) = sqrt(1/3); se = sqrt(1/3)/2 = 0.288675...
    out = paired_gain([0, 0, 0, 1], [1, 0, 1, 1])
    assert out["gain"] == pytest.approx(0.5)
    assert out["se"] == pytest.approx(np.sqrt(1 / 3) / 2)
    assert out["z"] == pytest.approx(0.5 / (np.sqrt(1 / 3) / 2))
    assert out["exceeds_2se"] is False and out["before"] == 0.25 and out["after"] == 0.75
    same = paired_gain([0.2, 0.4], [0.7, 0.9])  # a constant shift has zero paired spread
    assert same["gain"] == pytest.approx(0.5) and same["se"] == pytest.approx(0, abs=1e-12) and same["exceeds_2se"]
    with pytest.raises(ValueError):
        paired_gain([1, 2], [1])


def test_config_rejects_unknown_keys(tmp_path):
    with pytest.raises(ValueError, match="unknown key"):
        load_sft_config(None, ["train.lrr=1"])
    with pytest.raises(ValueError, match="unknown key optimizer"):
        load_sft_config(None, ["optimizer.lr=1"])
    with pytest.raises(FileNotFoundError):
        load_sft_config(tmp_path / "nope.yaml")


def test_sft_cli_trains_a_tiny_model_and_saves_a_loadable_folder(tmp_path, capsys):
    from toolgym.data.records import write_rollouts
    from toolgym.cli.main import main

    groups, _ = collect_demos("toolgym/ToolSearch-v0", ["clauses_top1"], split="train", limit=4,
                              env_kwargs={"max_turns": 4}, progress=False)
    demos = tmp_path / "demos.jsonl"
    write_rollouts(demos, groups)
    run_dir = tmp_path / "sft"
    rc = main(["sft", "configs/sft_toolsearch.yaml", f"run_dir={run_dir}", "model.name=tiny-llama",
               f"data.demos=[{demos}]", "train.max_steps=6", "train.lr=1e-2", "train.batch_size=2", "--no-progress"])
    assert rc == 0
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert len(losses) == 6 and losses[-1] < losses[0]  # it fits the demonstrations
    assert (run_dir / "curves.png").stat().st_size > 0
    policy = HFChatPolicy.from_pretrained(str(run_dir / "model"))
    assert policy.tokenizer.clean_up_tokenization_spaces is False  # round-trips text exactly, like the GGUF one
    assert "model:" in capsys.readouterr().out
    assert main(["sft", "configs/sft_toolsearch.yaml", f"run_dir={run_dir}", "model.name=tiny-llama",
                 f"data.demos=[{demos}]"]) == 2  # model/ exists: refuse to overwrite
    assert main(["sft", "configs/sft_toolsearch.yaml", f"run_dir={tmp_path / 'x'}", "data.demos=[/nope.jsonl]"]) == 2


def test_evaluate_per_task_rows_are_the_evaluators_per_task_numbers():
    """The benchmark's per-task rows are a view of the one evaluator: same rewards, and a
    decomposition row's ndcg5/c10 are the fused list's N@5/C@10."""
    from toolgym.agents.hf_policy import HFChatPolicy
    from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k
    from toolgym.evaluation.evaluate import make_envs
    from toolgym.evaluation.paired import evaluate_per_task
    from toolgym.agents.rollout import collect_rollouts

    policy = HFChatPolicy.from_pretrained("tiny-llama", sampling={"max_new_tokens": 6, "stop_strings": []})
    out = evaluate_per_task(policy, "toolgym/Decompose-v0", {"k": 10, "split": "heldout"}, num_tasks=3, progress=False)
    assert [r["task_id"] for r in out["rows"]] == [t.id for t in make_envs("toolgym/Decompose-v0", {"split": "heldout"}, 1)[0].unwrapped.tasks[:3]]
    envs = make_envs("toolgym/Decompose-v0", {"k": 10, "split": "heldout"}, 3)
    policy.sampling = type(policy.sampling)(**{**policy.sampling.__dict__, "temperature": 0.0})
    direct = collect_rollouts(policy, envs, [r["task_id"] for r in out["rows"]], seeds=[0, 1, 2])
    tasks = {t.id: t for t in envs[0].unwrapped.tasks}
    for row, ro in zip(out["rows"], direct):
        fused = list(ro.trajectory.selection or [])
        assert row["reward"] == pytest.approx(ro.env_return)
        assert row["ndcg5"] == pytest.approx(ndcg_at_k(fused, tasks[row["task_id"]].gold, 5))
        assert row["c10"] == pytest.approx(completeness_at_k(fused, tasks[row["task_id"]].gold, 10))
