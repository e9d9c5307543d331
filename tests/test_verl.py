"""The verl plugin driven through verl's own classes on CPU (docs/scale.md).

verl cannot train here (it needs NCCL and a vLLM/SGLang server), so each test drives one real
verl component: the tool through verl's YAML loader and its create/execute/release lifecycle,
the ``toolgym_agent`` loop with a scripted generation server (the one fake: no GPU inference
server runs here), the registered estimator through verl's ``compute_advantage`` on a
``DataProto`` built from real toolgym rollouts, and verl's policy loss on masked tokens.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch

pytest.importorskip("verl")

import toolgym.envs  # noqa: F401
from toolgym.agents.hf_policy import Generation, HFChatPolicy, load_tokenizer, tiny_causal_lm
from toolgym.trainers.grpo import trajectory_token_advantages
from toolgym.agents.rollout import collect_rollouts

import toolgym.trainers.verl as plugin  # noqa: E402  (registers the agent loop and estimator)
from toolgym.trainers.verl import episodes
from toolgym.trainers.verl.reward import compute_score

ROOT = Path(__file__).resolve().parent.parent
ENV_KWARGS = {"split": "train", "max_turns": 4}


def _call(name, **args):
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("smollm2")


@pytest.fixture(scope="module")
def env():
    return gymnasium.make("toolgym/ToolSearch-v0", **ENV_KWARGS)


@pytest.fixture(scope="module")
def verl_tools(tmp_path_factory):
    """The project's tool YAML loaded by verl's own loader, with this test's env settings."""
    from omegaconf import OmegaConf
    from verl.tools.tool_registry import initialize_tools_from_config

    cfg = OmegaConf.load(ROOT / "configs/verl/tool_config.yaml")
    for tool in cfg.tools:
        tool.config.env_kwargs = ENV_KWARGS
    path = tmp_path_factory.mktemp("verl") / "tools.yaml"
    OmegaConf.save(cfg, path)
    return {t.name: t for t in initialize_tools_from_config(str(path))}


def test_tool_yaml_lifecycle_records_the_same_events_as_the_env(verl_tools, env):
    task = env.unwrapped.tasks[0]
    search, submit = verl_tools["search"], verl_tools["submit"]
    assert isinstance(search, plugin.ToolgymTool) and search.tool_schema.function.name == "search"
    queries = ["number of nurses in a country", "health workforce"]

    async def lifecycle():
        # one instance per trajectory (create once, execute, release at the end)
        iid, _ = await search.create(instance_id="traj-0", create_kwargs={"task_id": task.id})
        out = [await search.execute(iid, {"query": q}) for q in queries]
        await submit.create(instance_id=iid, create_kwargs={"task_id": task.id})
        final = await submit.execute(iid, {"tools": sorted(task.gold)})
        reward = await submit.calc_reward(iid)
        events = list(episodes.get(iid).events)
        await search.release(iid)
        return out, final, reward, events

    before = episodes.live_count()
    out, final, reward, events = asyncio.run(lifecycle())
    assert episodes.live_count() == before  # released
    assert reward == 1.0 and final[2]["episode_done"] and "episode is over" in final[0].text
    # the same actions on a plain env give the same observations and SearchEvents
    env.reset(seed=0, options={"task": task.id})
    for q, (resp, score, metrics) in zip(queries, out):
        obs, *_, info = env.step(_call("search", query=q))
        assert resp.text == obs and score == 0.0
        assert info["event"].to_dict() == events[len(env.unwrapped.trajectory().events) - 1]


def test_tool_per_call_lifecycle_shares_one_episode_per_trajectory(verl_tools, env):
    """verl's ToolAgentLoop creates and releases an instance per call; the episode follows agent_data."""
    from verl.experimental.agent_loop.tool_agent_loop import AgentData

    task = env.unwrapped.tasks[1]
    data = AgentData(messages=[], image_data=None, video_data=None, audio_data=None, mm_processor_kwargs=None,
                     metrics={}, request_id="req-1", tools_kwargs={})

    async def call(tool, args):
        iid, _ = await tool.create(create_kwargs={"task_id": task.id})
        try:
            return await tool.execute(iid, args, agent_data=data)
        finally:
            await tool.release(iid)

    async def run():
        r1 = await call(verl_tools["search"], {"query": "weather forecast"})
        r2 = await call(verl_tools["search"], {"query": ""})  # invalid: the env's error observation
        r3 = await call(verl_tools["submit"], {"tools": ["no-such-tool"]})
        return r1, r2, r3

    r1, r2, r3 = asyncio.run(run())
    assert "error" in r2[0].text.lower()
    traj = data.extra_fields[episodes.TRAJECTORY_KEY]
    assert len(data.extra_fields[episodes.EVENTS_KEY]) == 1 == len(traj["events"])
    assert traj["invalid_actions"] >= 1 and traj["task_id"] == task.id
    episodes.release("req-1")


def test_tool_without_task_id_answers_with_an_error(verl_tools):
    async def run():
        iid, _ = await verl_tools["search"].create(instance_id="no-task")
        return await verl_tools["search"].execute(iid, {"query": "x"})

    resp, score, _ = asyncio.run(run())
    assert "task id" in resp.text and score == 0.0


# -- agent loop with a scripted generation server ---------------------------------------------
class ScriptedServer:
    """Stands in for vLLM/SGLang: returns the scripted turns' token ids, records every prompt."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script, self.prompts = tokenizer, list(script), []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append(list(prompt_ids))
        text = self.script[min(len(self.prompts) - 1, len(self.script) - 1)]
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")


def _verl_config(tool_yaml: str, response_length: int = 2048):
    from omegaconf import OmegaConf
    import verl

    cfg = OmegaConf.load(Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml")
    rollout = cfg.actor_rollout_ref.rollout
    rollout.prompt_length, rollout.response_length = 4096, response_length
    rollout.multi_turn.enable = True
    rollout.multi_turn.format = "hermes"
    rollout.multi_turn.max_assistant_turns = 6
    rollout.multi_turn.max_tool_response_length = 100_000
    rollout.multi_turn.tool_config_path = tool_yaml
    return cfg


def _run_agent_loop(tokenizer, verl_tools, script, task_id=None, response_length=2048, row=None):
    """One ``toolgym_agent`` episode; ``row`` is a verl dataset item (else built from the env's reset)."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    cfg = _verl_config("unused.yaml", response_length)
    server = ScriptedServer(tokenizer, script)
    if row is None:
        env = gymnasium.make("toolgym/ToolSearch-v0", **ENV_KWARGS)
        _, info = env.reset(options={"task": task_id})
        row = {"raw_prompt": list(info["messages"]), "extra_info": {"task_id": task_id}, "tools_kwargs": {}}
    keys = ("raw_prompt", "extra_info", "tools_kwargs", "index", "agent_name", "data_source", episodes.PROGRESS_KEY)

    async def run():  # verl binds the agent loop to the running event loop at construction
        loop = plugin.ToolgymAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server, tokenizer=tokenizer,
                                       processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data),
                                       tools=ToolListWrap(list(verl_tools.values())))
        return await loop.run({"temperature": 1.0}, **{k: row[k] for k in keys if k in row})

    return asyncio.run(run()), server


def test_agent_loop_masks_retrieved_tokens_and_records_the_trajectory(tokenizer, verl_tools, env):
    task = env.unwrapped.tasks[0]
    script = [_call("search", query="number of nurses in a country"), _call("search", query="health workforce"),
              _call("submit", tools=sorted(task.gold))]
    live = episodes.live_count()
    out, server = _run_agent_loop(tokenizer, verl_tools, script, task.id)
    assert episodes.live_count() == live  # the loop ended its episode
    ids, mask = out.response_ids, out.response_mask
    assert len(ids) == len(mask) and len(server.prompts) == 3
    spans = out.extra_fields[episodes.SPANS_KEY]
    assert len(spans) == 3
    # mask 1 exactly on the tokens the server generated, in the spans the loop recorded
    generated = [tokenizer.encode(t, add_special_tokens=False) for t in script]
    for (s, e), gen in zip(spans, generated):
        ones = [p for p in range(s, e) if mask[p]]
        assert [ids[p] for p in ones][: len(gen)] == gen
    inside = {p for s, e in spans for p in range(s, e) if mask[p]}
    assert {p for p, m in enumerate(mask) if m} == inside
    # every retrieved tool id sits in mask-0 tokens, never in the policy's
    traj = out.extra_fields[episodes.TRAJECTORY_KEY]
    assert traj["terminated_by"] == "submit" and traj["selection"] == sorted(task.gold) and len(traj["events"]) == 2
    masked_text = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
    search_turns = [p for s, e in spans[:2] for p in range(s, e) if mask[p]]  # the submit names gold ids itself
    policy_text = tokenizer.decode([ids[p] for p in search_turns])
    for event in traj["events"]:
        for tool_id in event["results"]:
            assert tool_id in masked_text and tool_id not in policy_text
    assert out.extra_fields[episodes.RETURN_KEY] == 1.0
    score = compute_score(extra_info=dict(out.extra_fields))
    assert score["score"] == 1.0 and score["searches"] == 2.0


def test_agent_loop_marks_an_answer_without_a_call(tokenizer, verl_tools, env):
    task = env.unwrapped.tasks[0]
    out, _ = _run_agent_loop(tokenizer, verl_tools, ["I think the answer is 42."], task.id)
    traj = out.extra_fields[episodes.TRAJECTORY_KEY]
    assert traj["terminated_by"] == "no_call" and traj["events"] == [] and sum(out.response_mask) > 0


def test_the_manager_passes_training_progress_to_the_episodes(tokenizer):
    """``(global_steps - 1) / total`` as the local trainer's ``step / steps``; validation is 1; no total, nothing."""
    from verl import DataProto

    from toolgym.trainers.verl.agent_loop import add_progress, batch_progress

    cfg = _verl_config("unused.yaml")
    assert batch_progress({"global_steps": 4}, cfg) is None  # verl's own default: no total yet
    cfg.actor_rollout_ref.actor.optim.total_training_steps = 10  # what verl's trainer writes at start-up
    assert [batch_progress({"global_steps": g}, cfg) for g in (1, 4, 10, 12)] == [0.0, 0.3, 0.9, 1.0]
    cfg.trainer.total_training_steps = 20  # an explicit total wins
    assert batch_progress({"global_steps": 4}, cfg) == 0.15
    assert batch_progress({"global_steps": 4, "validate": True}, cfg) == 1.0 and batch_progress({}, cfg) is None
    batch = DataProto.from_dict(non_tensors={"uid": np.array(["a", "a", "b"], dtype=object)}, meta_info={"global_steps": 7})
    assert add_progress(batch, cfg) == 0.3
    assert batch.non_tensor_batch[episodes.PROGRESS_KEY].tolist() == [0.3, 0.3, 0.3]


def test_agent_loop_episodes_follow_the_trainers_progress_not_the_envs_counter(tokenizer, verl_tools, env):
    """A curriculum env (required category for the first half of training, by 1000 episodes of its own
    counter otherwise): the batch's progress picks the mode, and the prompt is that mode's."""
    task = env.unwrapped.tasks[0]
    curriculum_kwargs = {**ENV_KWARGS, "curriculum": {"total_episodes": 1000, "required_fraction": 0.5}}
    probe = gymnasium.make("toolgym/ToolSearch-v0", **curriculum_kwargs)
    prompts = {mode: probe.unwrapped.system_prompt(mode) for mode in ("required", "off")}
    assert prompts["required"] != prompts["off"]
    _, info = env.reset(options={"task": task.id})  # the exported row: the plain env's prompt (mode off)
    category = env.unwrapped.corpus[sorted(task.gold)[0]].category
    script = [_call("search", query="number of nurses", category=category), _call("submit", tools=sorted(task.gold))]
    seen = {}
    for progress in (0.2, 0.8, None):
        row = {"raw_prompt": list(info["messages"]), "tools_kwargs": {},
               "extra_info": {"task_id": task.id, "env_kwargs": curriculum_kwargs}}
        if progress is not None:
            row[episodes.PROGRESS_KEY] = np.float64(progress)
        out, server = _run_agent_loop(tokenizer, verl_tools, script, row=row)
        first_prompt = tokenizer.decode(server.prompts[0])
        mode = next(m for m, text in prompts.items() if text in first_prompt)
        traj = out.extra_fields[episodes.TRAJECTORY_KEY]
        seen[progress] = (mode, traj["invalid_actions"], [e["category"] for e in traj["events"]])
    # 0.2: the constrained phase; the call with a category is valid and searches in it
    assert seen[0.2] == ("required", 0, [category])
    # 0.8: global search, although the env's own counter (a few episodes of 1000) says "required"
    assert seen[0.8][0] == "off" and seen[0.8][1] == 1 and seen[0.8][2] == []
    assert seen[None][0] == "required"  # no progress in the batch: the env's counter decides


def _verl_dataset(tokenizer, env_id, split, tmp_path, max_tasks=3, env_kwargs=None):
    """``toolgym export-verl``'s parquet read back by verl's own RLHFDataset."""
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from toolgym.cli.main import main

    args = ["export-verl", env_id, "--split", split, "--out", str(tmp_path), "--max-tasks", str(max_tasks)]
    assert main(args + (["--env-kwargs", json.dumps(env_kwargs)] if env_kwargs else [])) == 0
    cfg = OmegaConf.create({"max_prompt_length": 8192, "filter_overlong_prompts": False,
                            "cache_dir": str(tmp_path / "cache")})
    return RLHFDataset(str(tmp_path / f"{split}.parquet"), tokenizer, cfg)


def test_export_verl_parquet_drives_the_agent_loop(tokenizer, verl_tools, env, tmp_path):
    data = _verl_dataset(tokenizer, "toolgym/ToolSearch-v0", "train", tmp_path, env_kwargs={"max_turns": 4})
    assert len(data) == 3
    row = data[0]
    task = env.unwrapped.tasks[0]
    assert row["extra_info"]["task_id"] == task.id and sorted(row["extra_info"]["gold"]) == sorted(task.gold)
    assert row["agent_name"] == "toolgym_agent" and row["tools_kwargs"]["search"]["create_kwargs"]["task_id"] == task.id
    assert [s["function"]["name"] for s in json.loads(row["extra_info"]["tools"])] == ["search", "submit"]
    _, info = env.reset(options={"task": task.id})
    assert list(row["raw_prompt"]) == info["messages"]  # the env's own opening messages
    out, _ = _run_agent_loop(tokenizer, verl_tools, [_call("submit", tools=sorted(task.gold))], row=row)
    traj = out.extra_fields[episodes.TRAJECTORY_KEY]
    assert traj["task_id"] == task.id and traj["terminated_by"] == "submit" and out.extra_fields[episodes.RETURN_KEY] == 1.0


def test_export_verl_decompose_env_takes_the_answer_as_its_action(tokenizer, tmp_path):
    data = _verl_dataset(tokenizer, "toolgym/Decompose-v0", "train", tmp_path, max_tasks=1)
    row = data[0]
    assert json.loads(row["extra_info"]["tools"]) == [] and row["extra_info"]["env_id"] == "toolgym/Decompose-v0"
    answer = "find cloud SLA info\nback up data to the cloud"
    out, _ = _run_agent_loop(tokenizer, {}, [answer], row=row)
    traj = out.extra_fields[episodes.TRAJECTORY_KEY]
    assert traj["subtasks"] == ["find cloud SLA info", "back up data to the cloud"] and traj["terminated_by"] == "submit"
    env = gymnasium.make("toolgym/Decompose-v0", split="train")
    env.reset(options={"task": row["extra_info"]["task_id"]})
    assert out.extra_fields[episodes.RETURN_KEY] == pytest.approx(env.step(answer)[1])  # the env's own R_cf


def test_export_verl_rejects_bad_input(tmp_path, capsys):
    from toolgym.cli.main import main

    assert main(["export-verl", "toolgym/NoSuch-v0", "--out", str(tmp_path)]) == 2
    assert main(["export-verl", "toolgym/ToolSearch-v0", "--out", str(tmp_path), "--env-kwargs", "[1]"]) == 2
    assert main(["export-verl", "toolgym/ToolSearch-v0", "--out", str(tmp_path), "--env-kwargs", "{" * 10_000]) == 2
    assert main(["export-verl", "toolgym/ToolSearch-v0", "--out", str(tmp_path), "--env-kwargs", "[" * 30_000 + "]" * 30_000]) == 2
    assert main(["export-verl", "toolgym/ToolSearch-v0", "--out", str(tmp_path), "--env-kwargs", "[" * 70_000]) == 2
    err = capsys.readouterr().err
    assert "unknown env id" in err and "JSON object" in err and "not valid JSON" in err
    assert "nested too deeply" in err and "longer than" in err
    assert not list(tmp_path.glob("*.parquet"))  # nothing written on bad input


# -- the estimator on a DataProto built from real toolgym rollouts ------------------------------
class ScriptedTokenPolicy(HFChatPolicy):
    """The real tokenizer and template glue of local rollouts, with scripted turns (as in test_rollout)."""

    def __init__(self, model, tokenizer, script):
        super().__init__(model, tokenizer, {"max_new_tokens": 64})
        self.script, self.turn = script, 0

    def generate_batch(self, prompts, max_new_tokens=None):
        text = self.script[min(self.turn, len(self.script) - 1)]
        self.turn += 1
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.end_ids[0]]
        return [Generation(text, ids, "stop") for _ in prompts]


def _dataproto_from_rollouts(rollouts, uids, prompt_len, response_len):
    """verl's batch layout (left-padded prompts, right-padded responses) from toolgym rollouts."""
    from verl import DataProto

    B = len(rollouts)
    prompts = torch.zeros((B, prompt_len), dtype=torch.long)
    responses = torch.zeros((B, response_len), dtype=torch.long)
    rmask = torch.zeros((B, response_len), dtype=torch.long)
    attn = torch.zeros((B, prompt_len + response_len), dtype=torch.long)
    trajs, spans = [], []
    for i, r in enumerate(rollouts):
        t = r.trajectory
        p = t.turn_spans[0][0]  # the prompt is everything before the first generated token
        prompts[i, prompt_len - p:] = torch.tensor(t.token_ids[:p])
        resp = t.token_ids[p:]
        responses[i, : len(resp)] = torch.tensor(resp)
        rmask[i, : len(resp)] = torch.tensor(t.loss_mask[p:])
        attn[i, prompt_len - p: prompt_len + len(resp)] = 1
        d = t.to_dict()
        trajs.append(d)
        spans.append([[s - p, e - p] for s, e in t.turn_spans])
    nt = {"uid": np.array(uids, dtype=object), episodes.TRAJECTORY_KEY: np.array(trajs, dtype=object),
          episodes.SPANS_KEY: np.array(spans + [None], dtype=object)[:-1]}
    return DataProto.from_dict(tensors={"prompts": prompts, "responses": responses, "response_mask": rmask,
                                        "attention_mask": attn}, non_tensors=nt)


def _masked_inside_turns(t):
    """Each turn's middle token masked out (as a constrained policy's forced tokens are)."""
    mask = list(t.loss_mask)
    for s, e in t.turn_spans:
        mask[(s + e) // 2] = 0
    return replace(t, loss_mask=mask)


def _adjacent_turns(t):
    """The same turns with the tool text between them removed: every turn starts where the last ended."""
    p = t.turn_spans[0][0]
    ids, mask, spans = list(t.token_ids[:p]), list(t.loss_mask[:p]), []
    for s, e in t.turn_spans:
        spans.append((len(ids), len(ids) + e - s))
        ids += t.token_ids[s:e]
        mask += t.loss_mask[s:e]
    return replace(t, token_ids=ids, loss_mask=mask, turn_spans=spans)


@pytest.mark.parametrize("layout", ["as rolled out", "a masked token inside each turn", "adjacent turns"])
def test_registered_estimator_gives_the_local_trainers_token_advantages(tokenizer, env, layout):
    """Same rollouts, same reward module: verl's compute_advantage with toolgym_turn_credit equals
    the local trainer's per-token advantages on every response token, also when a turn holds a
    mask-0 token and when turns are adjacent (the two layouts a spread by runs of 1s got wrong)."""
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.ray_trainer import compute_advantage

    tiny = tiny_causal_lm(tokenizer, seed=0)
    tasks = env.unwrapped.tasks[:2]
    scripts = [  # four different behaviours per task, so ESM and TCA give non-zero, unequal credit
        lambda t: [_call("search", query=t.query), _call("submit", tools=sorted(t.gold))],
        lambda t: [_call("search", query="weather"), _call("search", query=t.query), _call("submit", tools=["x"])],
        lambda t: [_call("search", query="sports scores"), _call("submit", tools=[])],
        lambda t: [_call("search", query=t.query), _call("search", query="currency"), _call("submit", tools=sorted(t.gold))],
    ]
    rollouts, uids = [], []
    for task in tasks:
        for make in scripts:
            e = gymnasium.make("toolgym/ToolSearch-v0", **ENV_KWARGS)
            (r,) = collect_rollouts(ScriptedTokenPolicy(tiny, tokenizer, make(task)), [e], [task.id], seeds=[0])
            if layout != "as rolled out":
                change = _masked_inside_turns if layout.startswith("a masked") else _adjacent_turns
                r = replace(r, trajectory=change(r.trajectory))
            rollouts.append(r)
            uids.append(f"uid-{task.id}")
    prompt_len = max(r.trajectory.turn_spans[0][0] for r in rollouts)
    response_len = max(len(r.trajectory.token_ids) - r.trajectory.turn_spans[0][0] for r in rollouts) + 7
    data = _dataproto_from_rollouts(rollouts, uids, prompt_len, response_len)

    scorer = plugin.TurnCreditScorer("toolgym/ToolSearch-v0", ENV_KWARGS, {"name": "toolsearcher"})
    scored = scorer.score(data, data.non_tensor_batch["uid"])
    data.batch["token_level_rewards"] = scored["rm_scores"]
    data = compute_advantage(data, adv_estimator=plugin.ESTIMATOR_NAME, config=AlgoConfig())
    adv = data.batch["advantages"].numpy()

    from toolgym.rewards import get_reward

    local = get_reward("toolsearcher")  # what `toolgym train` would build (its retrieve is unused by this scheme)
    nonzero, values, run_spread_wrong = 0, set(), 0
    for g, task in enumerate(tasks):
        group = rollouts[4 * g: 4 * g + 4]
        credit = local.score_group([r.trajectory for r in group], task)
        for j, r in enumerate(group):
            t = r.trajectory
            p = t.turn_spans[0][0]
            expected = trajectory_token_advantages(t, credit, j)[p:]
            row = adv[4 * g + j]
            np.testing.assert_allclose(row[: len(expected)], expected, rtol=0, atol=1e-6)
            assert not row[len(expected):].any()  # padding
            nonzero += int(np.any(expected))
            values.update(np.round(expected[expected != 0], 6).tolist())
            assert scored["rewards"][4 * g + j] == pytest.approx(float(credit.rewards[j]))
            run_spread_wrong += _runs_of_ones_misplaced(expected, t.loss_mask[p:], [(a - p, b - p) for a, b in t.turn_spans])
    assert nonzero >= 2 and len(values) >= 2  # not a comparison of zeros: several rows, unequal turn values
    # the changed layouts are ones where giving each run of 1s the value at its end is wrong
    assert (run_spread_wrong > 0) == (layout != "as rolled out")


def _runs_of_ones_misplaced(advantages, mask, spans):
    """Policy tokens a spread by runs of 1s would get wrong: each turn's value put at its last
    mask-1 token, then every run of 1s in the mask given the value at its end."""
    at_end = np.zeros(len(mask))
    for s, e in spans:
        ones = [q for q in range(s, e) if mask[q]]
        if ones:
            at_end[ones[-1]] = advantages[s]
    wrong, carry = 0, 0.0
    for q in range(len(mask) - 1, -1, -1):
        if mask[q]:
            if q + 1 == len(mask) or not mask[q + 1]:
                carry = at_end[q]
            wrong += int(carry != advantages[q])
    return wrong


def _verl_advantages(token_level_rewards, mask):
    """verl's own compute_advantage with the registered estimator on a minimal DataProto."""
    from verl import DataProto
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.ray_trainer import compute_advantage

    B, W = mask.shape
    data = DataProto.from_dict(tensors={"token_level_rewards": token_level_rewards, "response_mask": mask,
                                        "responses": torch.zeros((B, W), dtype=torch.long),
                                        "attention_mask": torch.ones((B, W), dtype=torch.long)},
                               non_tensors={"uid": np.array(["g"] * B, dtype=object)})
    return compute_advantage(data, adv_estimator=plugin.ESTIMATOR_NAME, config=AlgoConfig()).batch["advantages"]


def test_turn_span_credit_on_hand_numbers():
    """Credit is placed by the recorded spans, not by runs of 1s in the mask: (a) a turn holding a
    mask-0 token inside it, (b) two adjacent turns, (c) a turn cut by the response length."""
    from toolgym.trainers.grpo import token_advantages
    from toolgym.trainers.verl.credit import turn_span_scores

    mask = torch.tensor([[1, 1, 0, 1, 1, 0, 0, 1, 1, 0],    # (a) turn 0 = [0, 5) holds the mask-0 token 2
                         [1, 1, 1, 1, 1, 0, 0, 0, 0, 0],    # (b) turns [0, 2) and [2, 5): one run of 1s
                         [0, 0, 1, 1, 0, 0, 1, 1, 1, 1]])   # (c) turn 1 = [6, 14) cut at 10
    spans = [[(0, 5), (7, 9)], [(0, 2), (2, 5)], [(2, 4), (6, 14)]]
    values = [[0.5, -2.0], [3.0, 1.5], [-1.0, 4.0]]
    expected = [[0.5, 0.5, 0.5, 0.5, 0.5, 0, 0, -2.0, -2.0, 0],
                [3.0, 3.0, 1.5, 1.5, 1.5, 0, 0, 0, 0, 0],
                [0, 0, -1.0, -1.0, 0, 0, 4.0, 4.0, 4.0, 4.0]]
    scores = turn_span_scores(mask, spans, values)
    adv = _verl_advantages(scores, mask)
    assert adv.tolist() == expected
    for i in range(3):  # the local trainer's rule, position for position
        local = token_advantages(14, spans[i], values[i])[:10]
        assert adv[i].tolist() == local.tolist()
    # what a spread by runs of 1s would have given: the first part of (a) and turn 0 of (b) get another value
    assert expected[0][:2] != [0.0, 0.0] and expected[1][:2] != [1.5, 1.5]
    with pytest.raises(ValueError, match="turn values"):
        turn_span_scores(mask, [[(0, 2), (2, 5)]], [[1.0]])


def test_turn_credit_estimator_refuses_a_kl_penalty_in_the_reward():
    from verl.trainer.config import AlgoConfig

    mask = torch.ones((1, 3), dtype=torch.long)
    with pytest.raises(ValueError, match="use_kl_in_reward"):
        plugin.compute_turn_credit_advantage(torch.ones((1, 3)), mask, config=AlgoConfig(use_kl_in_reward=True))


def test_verl_policy_loss_gives_zero_gradient_on_masked_tokens():
    """verl's own clipped PPO loss with the response mask: tool/glue tokens (mask 0) get no gradient."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.config import ActorConfig

    torch.manual_seed(0)
    mask = torch.tensor([[0, 1, 1, 0, 0, 1], [1, 1, 0, 0, 1, 0]], dtype=torch.float32)
    logp = torch.randn(2, 6, requires_grad=True)
    old = (logp.detach() + 0.05 * torch.randn(2, 6))
    adv = torch.randn(2, 6)
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, clip_ratio=0.2)
    loss, _ = get_policy_loss_fn("vanilla")(old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask,
                                            loss_agg_mode="token-mean", config=config)
    loss.backward()
    assert torch.all(logp.grad[mask == 0] == 0)
    assert torch.all(logp.grad[mask == 1] != 0)


# -- the launch configs ---------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", ["toolsearcher_stb", "magicselector_sealtools"])
def test_launch_configs_compose_and_name_real_toolgym_parts(recipe, monkeypatch):
    """Hydra composes each recipe over verl's own ppo_trainer config, and every toolgym part it
    names resolves: estimator, agent loop, manager class, tool YAML, reward function, env, reward module."""
    import gymnasium
    from hydra import compose, initialize_config_dir
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    from verl.utils.import_utils import load_extern_object

    from toolgym.rewards.base import get_reward_factory
    from toolgym.rewards.composite import _SCHEMES

    monkeypatch.chdir(ROOT)  # the recipes' paths are relative to the repository root, as launch.sh runs them
    with initialize_config_dir(config_dir=str(ROOT / "configs/verl"), version_base=None):
        cfg = compose(config_name=recipe)
    assert cfg.actor_rollout_ref.rollout.n >= 2 and cfg.trainer.n_gpus_per_node >= 1
    assert get_adv_estimator_fn(cfg.algorithm.adv_estimator) is plugin.compute_turn_credit_advantage
    agent = cfg.actor_rollout_ref.rollout.agent
    assert agent.default_agent_loop in _agent_loop_registry
    from omegaconf import OmegaConf

    assert OmegaConf.load(agent.agent_loop_config_path)[0]._target_.endswith("ToolgymAgentLoop")
    manager = agent.agent_loop_manager_class.rsplit(".", 1)
    import importlib

    assert getattr(importlib.import_module(manager[0]), manager[1]) is plugin.ToolgymAgentLoopManager
    tool_yaml = cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path
    if tool_yaml:
        from verl.tools.tool_registry import initialize_tools_from_config

        assert sorted(t.name for t in initialize_tools_from_config(tool_yaml)) == ["search", "submit"]
    fn = load_extern_object(module_path=cfg.reward.custom_reward_function.path,
                            object_name=cfg.reward.custom_reward_function.name)
    assert fn(extra_info={"toolgym_env_return": 0.25})["score"] == 0.25
    assert cfg.toolgym.env_id in gymnasium.registry
    name = cfg.toolgym.reward.name
    assert name in _SCHEMES or get_reward_factory(name)
    assert cfg.actor_rollout_ref.model.external_lib == "toolgym.trainers.verl"
