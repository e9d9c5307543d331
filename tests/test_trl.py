"""TRL's GRPOTrainer end to end on CPU through real toolgym envs (toolgym.integrations.trl).

A tiny random Llama over the SmolLM2 vocabulary is first fitted for a few seconds on four tool
calls (a search and a submit per task) so that it speaks the Hermes format at all; everything
after that is TRL's own code: its generation, its tool-call parsing and dispatch to the env's
``search`` / ``submit`` methods, its tool mask, the env-owned ``get_reward``, its GRPO loss and
optimizer step. Nothing is faked.
"""
import copy
import json
import os

import pytest
import torch

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from toolgym.integrations import trl as tg  # noqa: E402
from conftest import load_script  # noqa: E402

ENV_ID, ENV_KWARGS = "toolgym/ToolSearch-v0", {"max_turns": 3}


def fit_tool_calls(model, tokenizer, prompts, texts, steps=600, lr=1e-2, target=0.08):
    """Teacher-force ``texts`` after every prompt (loss on the completion tokens only) until the mean
    loss is below ``target`` (at most ``steps``). The floor is ~0.03 (which of the texts comes next is
    a coin the model cannot know); at 0.27, sampled at T 0.7, no completion parsed as a tool call on
    an AVX2-only CPU, so the bar is a loss, not a step count (kernels differ between CPUs)."""
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    rows = [(p, tokenizer(t, add_special_tokens=False)["input_ids"] + [end]) for p in prompts for t in texts]
    length = max(len(p) + len(c) for p, c in rows)
    ids = torch.full((len(rows), length), tokenizer.pad_token_id)
    att = torch.zeros_like(ids)
    pos, tgt = [], []
    for i, (p, c) in enumerate(rows):
        seq = p + c
        ids[i, : len(seq)] = torch.tensor(seq)
        att[i, : len(seq)] = 1
        pos += [(i, j) for j in range(len(p) - 1, len(seq) - 1)]
        tgt += c
    rows_i, cols_i = torch.tensor([r for r, _ in pos]), torch.tensor([c for _, c in pos])
    tgt = torch.tensor(tgt)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        hidden = model.model(input_ids=ids, attention_mask=att).last_hidden_state[rows_i, cols_i]
        loss = torch.nn.functional.cross_entropy(model.lm_head(hidden), tgt)
        if float(loss) < target:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss.detach())


def test_tool_methods_carry_the_env_schemas():
    import gymnasium as gym
    from transformers.utils import get_json_schema

    for mode in ("off", "optional", "required"):
        factory = tg.environment_factory(ENV_ID, {"category_mode": mode})
        env = factory()
        _, info = gym.make(ENV_ID, category_mode=mode).reset(seed=0)
        expected = {s["function"]["name"]: s["function"] for s in info["tool_schemas"]}
        for method in (env.search, env.submit):
            schema = get_json_schema(method)["function"]
            schema.pop("return", None)
            assert schema == expected[method.__name__], mode


@pytest.mark.parametrize("mode", ["off", "optional", "required"])
def test_trl_renders_the_chat_exactly_as_a_toolgym_rollout(tokenizer, mode):
    """A toolgym warm start must see under TRL the bytes it was trained on: the env's system prompt
    (schema block included), its own call text, tool results as a ``tool`` turn. TRL's bundled Qwen2.5
    template wrapped results in ``<|im_start|>user\n<tool_response>``; the SmolLM2 warm start then wrote
    ``<tool_response>`` instead of a call, and every TRL reward was 0."""
    import gymnasium as gym

    from toolgym.envs.actions import Search, Submit
    from toolgym.envs.syntax import render_call
    from toolgym.trainers.export_hf import instructions_prompt

    tok = tg.prepare_tokenizer(copy.deepcopy(tokenizer))
    env = tg.environment_factory(ENV_ID, {"category_mode": mode})()
    _, info = gym.make(ENV_ID, category_mode=mode).reset(seed=0)
    tools = [env.search, env.submit]  # what TRL passes: the env object's bound tool methods
    search = {"query": "weather <now>", **({"category": "Weather"} if mode == "required" else {})}
    trl_chat = instructions_prompt(info["messages"], True) + [
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": search}}]},
        {"role": "tool", "name": "search", "content": "Top 5 tools for ..."}]
    local_chat = info["messages"] + [
        {"role": "assistant", "content": render_call(Search(**search))},
        {"role": "tool", "content": "Top 5 tools for ..."}]
    for n in (len(info["messages"]), len(trl_chat)):  # the opening prompt, then a whole search turn
        got = tok.apply_chat_template(trl_chat[:n], tools=tools, tokenize=False, add_generation_prompt=True)
        want = tokenizer.apply_chat_template(local_chat[:n], tokenize=False, add_generation_prompt=True)
        assert got == want
    # TRL parses the model's own call text back into the call the env would parse
    submit = render_call(Submit(tool_ids=("a", "b")))
    parsed = tok.parse_response(submit + "<|im_end|>")["tool_calls"][0]["function"]
    assert parsed == {"name": "submit", "arguments": {"tools": ["a", "b"]}}


def test_credit_schemes_are_refused_outcome_schemes_accepted():
    with pytest.raises(ValueError, match="per-turn credit"):
        tg.outcome_reward("toolsearcher")
    with pytest.raises(ValueError, match="per-turn credit"):
        tg.environment_factory(ENV_ID, reward="esm")
    for name in ("grpo_f1", "grpo_match", "selection_f1", "search_recall", "env_return"):
        tg.outcome_reward(name)


def test_decomposition_reward_func_steps_the_env_with_the_answer():
    kwargs = tg.grpo_trainer_kwargs("toolgym/Decompose-v0", {"k": 10}, "counterfactual", split=None, max_tasks=2)
    factory, (func,) = kwargs["environment_factory"], kwargs["reward_funcs"]
    envs = [factory(), factory()]
    for env, row in zip(envs, kwargs["train_dataset"]):
        env.reset(**row)
    answers = ["find the weather\nbook a flight", "convert currency"]
    rewards = func(completions=[[{"role": "assistant", "content": a}] for a in answers], environments=envs)
    for env, reward in zip(envs, rewards):
        (trajectory,) = env.episodes
        assert trajectory.subtasks and reward == trajectory.env_reward  # counterfactual = the env's R_cf


class RecordingTrainer:
    """Built lazily (trl import): a GRPOTrainer that keeps each batch's tool mask and completion ids."""

    @staticmethod
    def make(**kwargs):
        from trl import GRPOTrainer

        class _Recording(GRPOTrainer):
            batches: list = []

            def _generate_and_score_completions(self, inputs):
                out = super()._generate_and_score_completions(inputs)
                self.batches.append({k: out[k].clone() for k in ("completion_ids", "completion_mask", "tool_mask")
                                     if k in out})
                return out

        return _Recording(**kwargs)


@pytest.mark.slow  # about 1 min on an idle 2-core machine (the tiny model's fit, then 2 TRL steps)
def test_grpo_trainer_trains_through_toolgym_envs(tokenizer, tmp_path):
    from trl import GRPOConfig

    from toolgym.agents.hf_policy import tiny_causal_lm
    from toolgym.rewards import get_reward

    tok = tg.prepare_tokenizer(copy.deepcopy(tokenizer))  # the session fixture stays as it was
    kwargs = tg.grpo_trainer_kwargs(ENV_ID, ENV_KWARGS, "grpo_f1", split="train", max_tasks=2)
    base = kwargs["environment_factory"]
    calls: list = []  # (env, trajectory, reward) in the order TRL asked for rewards

    class Recorded(base):
        def get_reward(self):
            value = super().get_reward()
            calls.append((self, self.episodes[-1], value))
            return value

    kwargs["environment_factory"] = Recorded
    probe = Recorded()
    tasks = {t.id: t for t in probe._env.unwrapped.tasks}
    rows = list(kwargs["train_dataset"])
    texts = []
    other = [t.id for t in probe._env.unwrapped.corpus.tools[:50]]
    for row in rows:
        task = tasks[row["task_id"]]
        wrong = next(t for t in other if t not in task.gold)
        # a search, the gold submit (F1 1) and a wrong submit (F1 0): a group of 4 rollouts almost
        # surely draws different rewards, so each step has a gradient
        texts.append("<tool_call>\n" + json.dumps({"name": "search", "arguments": {"query": task.query[:40]}}) + "\n</tool_call>")
        texts.append("<tool_call>\n" + json.dumps({"name": "submit", "arguments": {"tools": sorted(task.gold)}}) + "\n</tool_call>")
        texts.append("<tool_call>\n" + json.dumps({"name": "submit", "arguments": {"tools": [wrong]}}) + "\n</tool_call>")
    prompts = [tok.apply_chat_template(r["prompt"], tools=[probe.search, probe.submit], tokenize=True,
                                       add_generation_prompt=True, return_dict=False) for r in rows]
    model = tiny_causal_lm(tok, seed=0, hidden_size=64)
    assert fit_tool_calls(model, tok, prompts, texts) < 0.08

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, max_steps=2, per_device_train_batch_size=8, num_generations=4,
                      temperature=0.7,  # sampled, yet the fitted call texts come out whole
                      max_completion_length=256, max_tool_calling_iterations=ENV_KWARGS["max_turns"], learning_rate=1e-3,
                      logging_steps=1, report_to=[], save_strategy="no", seed=0, bf16=False, dataloader_num_workers=0)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    trainer = RecordingTrainer.make(model=model, args=args, processing_class=tok, **kwargs)
    trainer.train()

    # 2 steps x 2 prompts x 4 generations, every reward from the env
    assert len(calls) == 16
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2 and any(h["tools/call_frequency"] > 0 for h in logs)
    # the envs were stepped by the model's own (TRL-parsed) tool calls
    stepped = [tj for _, tj, _ in calls if tj.num_turns > 0]
    assert stepped and any(tj.events or tj.selection for tj in stepped)
    for tj in stepped:
        assert tj.messages[2]["role"] == "assistant" and tj.messages[2]["content"].startswith("<tool_call>")
    # rewards equal toolgym.rewards on the same episodes (grouped as TRL grouped them: per step, per prompt)
    module = get_reward("grpo_f1")
    for step in range(2):
        batch = calls[8 * step: 8 * step + 8]
        for g in range(2):
            group = batch[4 * g: 4 * g + 4]
            task = tasks[group[0][1].task_id]
            assert all(tj.task_id == task.id for _, tj, _ in group)
            expected = module.score_group([tj for _, tj, _ in group], task).rewards
            assert [r for _, _, r in group] == pytest.approx(list(expected))
        assert logs[step]["reward"] == pytest.approx(sum(r for _, _, r in batch) / 8, abs=1e-6)
    # tool results are masked out of the loss: tool_mask 0 exactly on the env's text
    masked_any = False
    for batch in trainer.batches:
        for ids, cmask, tmask in zip(batch["completion_ids"], batch["completion_mask"], batch["tool_mask"]):
            n = int(cmask.sum())
            zero = [int(i) for i, m in zip(ids[:n], tmask[:n]) if m == 0]
            if zero:
                masked_any = True
                text = tok.decode(zero)
                # the env's observation, or TRL's own {'error': ...} when the call's arguments did not fit the method
                assert "<|im_start|>tool\n" in text  # the result's own ChatML turn, as in a local rollout
                assert any(s in text for s in ("Top 5 tools", "Error:", "Submitted", "No tool matched", "{'error'"))
                model_text = tok.decode([int(i) for i, m in zip(ids[:n], tmask[:n]) if m == 1])
                assert "<tool_call>" in model_text and "<|im_start|>tool" not in model_text
    assert masked_any
    # and the weights changed
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[k], after[k].detach()) for k in before)


@pytest.mark.slow  # about 1 min on a busy 2-core machine: a tiny model fitted to two answers, then 2 TRL steps
def test_grpo_trainer_trains_decomposition_through_toolgym_envs(tokenizer, tmp_path):
    """Decompose-v0 under a real GRPOTrainer: the completion's text is the env's answer, and the
    reward TRL trains on is the env's R_cf of exactly that text."""
    from trl import GRPOConfig

    import datasets

    from toolgym.agents.hf_policy import tiny_causal_lm
    from toolgym.retrieval.decompose import split_into_clauses
    from toolgym.rewards import build_reward

    tok = tg.prepare_tokenizer(copy.deepcopy(tokenizer))
    kwargs = tg.grpo_trainer_kwargs("toolgym/Decompose-v0", {"k": 10}, "counterfactual", split="train", max_tasks=200)
    base = kwargs["environment_factory"]
    answered: list = []  # (env, completion text, episode, reward) per rollout, in TRL's order

    class Recorded(base):
        def _answer(self, text):
            value = super()._answer(text)
            answered.append((self, text, self.episodes[-1], value))  # TRL reuses an env across rollouts
            return value

    kwargs["environment_factory"] = Recorded
    kwargs["reward_funcs"] = tg.reward_funcs(Recorded)
    # two tasks whose clause split (short enough not to be cut) scores above a nonsense answer, so
    # that a group's samples can differ in reward
    probe = base()
    tasks = {t.id: t for t in probe._env.unwrapped.tasks}
    rows, answers = [], []
    for row in kwargs["train_dataset"]:
        clauses = "\n".join(split_into_clauses(tasks[row["task_id"]].query))
        if len(tok(clauses)["input_ids"]) > 40:  # a cut answer loses what the clauses gain
            continue
        scores = []
        for text in (clauses, "zebra quartz"):
            probe.reset(**row)
            scores.append(probe._answer(text))
        if scores[0] > scores[1]:
            rows.append(row)
            answers.append(clauses)
        if len(rows) == 2:
            break
    assert len(rows) == 2
    kwargs["train_dataset"] = datasets.Dataset.from_list(rows)
    prompts = [tok.apply_chat_template(r["prompt"], tokenize=True, add_generation_prompt=True, return_dict=False) for r in rows]
    model = tiny_causal_lm(tok, seed=0, hidden_size=64)
    fit_tool_calls(model, tok, prompts, answers + ["zebra quartz"], steps=120, target=0.0)  # every answer after every prompt: a mixture
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, max_steps=2, per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=64, learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no",
                      seed=0, bf16=False, dataloader_num_workers=0, temperature=1.0)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    from trl import GRPOTrainer

    trainer = GRPOTrainer(model=model, args=args, processing_class=tok, **kwargs)
    trainer.train()

    assert len(answered) == 16  # 2 steps x 2 prompts x 4 generations
    module = build_reward({"name": "counterfactual", "options": {"k": 10}}, index=answered[0][0]._env.unwrapped.index)  # built here, not the env's
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2
    for step in range(2):
        batch = answered[8 * step: 8 * step + 8]
        rewards = []
        for env, text, trajectory, value in batch:
            assert value == trajectory.env_reward
            # the env was answered with the model's own completion, parsed into subtasks by the env
            assert trajectory.messages[-1]["role"] == "assistant" and trajectory.messages[-1]["content"] == text
            task = next(t for t in env._env.unwrapped.tasks if t.id == trajectory.task_id)
            (expected,) = module.score_group([trajectory], task).rewards
            assert trajectory.env_reward == pytest.approx(expected)  # and the env's own R_cf agrees
            rewards.append(expected)
        assert logs[step]["reward"] == pytest.approx(sum(rewards) / 8, abs=1e-6)
    assert min(h["frac_reward_zero_std"] for h in logs) < 1  # some group had an advantage to follow
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[k], after[k].detach()) for k in before)


def test_trl_example_report_states_the_paired_gain_and_the_zero_variance_steps():
    example = load_script("examples/trl_grpo.py")
    gain = {"gain": 0.05, "se": 0.02, "before": 0.30, "after": 0.35, "exceeds_2se": True, "n": 3}
    step = {"reward": "0.5", "reward_std": "0.4", "frac_reward_zero_std": "0.5", "tools/call_frequency": "1.5",
            "completions/mean_length": "80", "step_time": "90"}
    result = {"env_id": "toolgym/ToolSearch-v0", "env_kwargs": {"max_turns": 4}, "model": "m", "steps": 2,
              "prompts_per_step": 2, "generations": 4, "lora_r": 16, "lr": 1e-4, "reward": "grpo_f1", "seed": 0,
              "eval_tasks": 3, "paired_f1": gain, "paired_reward": {**gain, "gain": -0.1, "exceeds_2se": False},
              "seconds": {"train": 180, "per_step": 90, "eval_once": 60, "total": 300},
              "trl_log": [step, {**step, "frac_reward_zero_std": "1"}, {"train_runtime": 180}]}
    text = example.report_markdown(result)
    assert "**F1** +0.050 ± 0.020 (0.300 → 0.350; above 2 se)" in text
    assert "**reward** (`grpo_f1`) -0.100 ± 0.020 (0.300 → 0.350; below -2 se)" in text
    assert "| 1 | 0.500 | 0.400 | 1.00 | 1.50 | 80 | 90 |" in text  # the summary row of TRL's log is skipped
    assert "zero-std groups 0.75" in text
