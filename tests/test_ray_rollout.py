"""Ray rollout backend on a local 2-CPU Ray (docs/scale.md): same rollouts as the local backend,
LoRA-only weight shipping, one batching retrieval server per node, and a worker killed mid-step."""
from __future__ import annotations

import functools
import json
import sys
import threading
import time

import gymnasium
import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")

import toolgym.envs  # noqa: F401
from toolgym.agents.hf_policy import Generation, HFChatPolicy, load_tokenizer, tiny_causal_lm
from toolgym.trainers.ray_rollout import RayRollout, RemoteIndex, RetrievalServer, init_ray, weights_payload
from toolgym.agents.rollout import rollout_groups

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import test modules

ENV_ID = "toolgym/ToolSearch-v0"
ENV_KWARGS = {"split": "train", "max_turns": 2}


def tiny_policy(sampling: dict) -> HFChatPolicy:
    """The worker's policy: the same tiny model the test builds locally (seeded init)."""
    tokenizer = load_tokenizer("smollm2")
    return HFChatPolicy(tiny_causal_lm(tokenizer, seed=0), tokenizer, sampling)


class SlowScriptedPolicy(HFChatPolicy):
    """Scripted searches then a submit, one second per turn: long enough to kill a worker mid-chunk."""

    def __init__(self):
        tokenizer = load_tokenizer("smollm2")
        super().__init__(tiny_causal_lm(tokenizer, seed=0), tokenizer, {"max_new_tokens": 64})

    def generate_batch(self, prompts, max_new_tokens=None):
        time.sleep(1.0)
        out = []
        for p in prompts:
            turn = sum(1 for t in p if t == self.end_ids[0]) // 2  # assistant turns so far (one end per turn + tool turn)
            call = {"name": "search", "arguments": {"query": f"query {turn} {len(p) % 7}"}}
            text = "<tool_call>" + json.dumps(call) + "</tool_call>"
            out.append(Generation(text, self.tokenizer.encode(text, add_special_tokens=False) + [self.end_ids[0]], "stop"))
        return out


@pytest.fixture(scope="module")
def cluster():
    init_ray(num_cpus=2, object_store_memory=200 * 1024 * 1024)  # local, on loopback
    yield
    ray.shutdown()


@pytest.fixture()
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers run one thread each: same float reduction order
    yield
    torch.set_num_threads(before)


def _tasks(n=2):
    env = gymnasium.make(ENV_ID, **ENV_KWARGS)
    return [t.id for t in env.unwrapped.tasks[:n]]


def _local(policy, task_ids, group_size, seed, torch_seed):
    envs = [gymnasium.make(ENV_ID, **ENV_KWARGS) for _ in range(len(task_ids) * group_size)]
    torch.manual_seed(torch_seed)
    return rollout_groups(policy, envs, task_ids, group_size, seed=seed, max_context_tokens=4096)


def _same(groups_a, groups_b):
    assert [len(g) for g in groups_a] == [len(g) for g in groups_b]
    for ga, gb in zip(groups_a, groups_b):
        for a, b in zip(ga, gb):
            ta, tb = a.trajectory, b.trajectory
            assert ta.task_id == tb.task_id and ta.token_ids == tb.token_ids and ta.loss_mask == tb.loss_mask
            assert ta.turn_spans == tb.turn_spans and [e.to_dict() for e in ta.events] == [e.to_dict() for e in tb.events]
            assert a.env_return == b.env_return


def test_one_worker_sampling_equals_the_local_backend_after_a_weight_sync(cluster, one_thread):
    sampling = {"max_new_tokens": 8, "temperature": 1.0}
    local = tiny_policy(sampling)
    torch.manual_seed(7)
    with torch.no_grad():  # an "update": the workers must receive it to match
        for p in local.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    backend = RayRollout(functools.partial(tiny_policy, sampling), ENV_ID, ENV_KWARGS, num_workers=1)
    try:
        shipped = backend.sync_weights(local.model)
        assert shipped == sum(p.numel() * 4 for p in local.model.parameters())
        ids = _tasks(2)
        expected = _local(local, ids, 2, seed=5, torch_seed=123)
        torch.manual_seed(123)
        got = backend.rollout_groups(local, None, ids, 2, seed=5, max_context_tokens=4096)
        _same(got, expected)
        assert any(r.generated_tokens for g in got for r in g)
    finally:
        backend.shutdown()


@pytest.mark.slow
def test_two_workers_ship_only_the_lora_adapter_and_match_greedy_local(cluster, one_thread):
    from toolgym.agents.hf_policy import apply_lora

    sampling = {"max_new_tokens": 8, "temperature": 0.0}
    local = tiny_policy(sampling)
    full_bytes = sum(p.numel() * 4 for p in local.model.parameters())
    local.model = apply_lora(local.model, {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]})
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in local.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.5 * torch.randn_like(p))  # a non-zero adapter changes the greedy rollouts
    payload = weights_payload(local.model)
    assert payload["kind"] == "lora" and all("lora" in k for k in payload["state"])
    backend = RayRollout(functools.partial(tiny_policy, sampling), ENV_ID, ENV_KWARGS, num_workers=2)
    try:
        shipped = backend.sync_weights(local.model)
        assert 0 < shipped < full_bytes / 10
        ids = _tasks(2)
        expected = _local(local, ids, 2, seed=11, torch_seed=0)
        got = backend.rollout_groups(local, None, ids, 2, seed=11, max_context_tokens=4096)
        _same(got, expected)
        # without the adapter the workers would have produced other greedy rollouts
        base = tiny_policy(sampling)
        assert any(a.trajectory.token_ids != b.trajectory.token_ids
                   for ga, gb in zip(_local(base, ids, 2, seed=11, torch_seed=0), expected) for a, b in zip(ga, gb))
        # one retrieval server on this node answered both workers' searches, in batches
        (stats,) = backend.retrieval_stats().values()
        searched = sum(len(r.trajectory.events) for g in got for r in g)
        assert stats["queries"] >= searched and stats["batches"] <= stats["requests"]
    finally:
        backend.shutdown()


@pytest.mark.slow
def test_a_worker_killed_mid_step_loses_and_duplicates_nothing(cluster):
    ids = _tasks(2)
    backend = RayRollout(SlowScriptedPolicy, ENV_ID, ENV_KWARGS, num_workers=2)
    try:
        backend.sync_weights(SlowScriptedPolicy().model)
        reference = backend.rollout_groups(None, None, ids, 2, seed=0, max_context_tokens=4096)
        result: dict = {}
        thread = threading.Thread(target=lambda: result.setdefault("groups", backend.rollout_groups(
            None, None, ids, 2, seed=0, max_context_tokens=4096)))
        victim = backend.workers[0]
        thread.start()
        time.sleep(1.5)  # both chunks are running (each takes two 1 s turns)
        ray.kill(victim)
        thread.join(timeout=120)
        assert not thread.is_alive() and backend.retries >= 1
        groups = result["groups"]
        _same(groups, reference)  # every episode once, the killed chunk's redone identically
        assert [[r.trajectory.task_id for r in g] for g in groups] == [[i, i] for i in ids]
        assert len(backend.workers) == 2 and victim not in backend.workers  # replaced for the next step
    finally:
        backend.shutdown()


class SlowRetrievalServer(RetrievalServer):
    """Each index call takes 50 ms more, so requests sent together arrive while the first batch runs.
    With the real index (a BM25 call well under a millisecond) eight requests could each finish before
    the next arrived: 8 batches, and the test failed on a clean clone once."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.index = SlowIndex(self.index)


class SlowIndex:
    def __init__(self, index):
        self.index = index

    def search_batch(self, *args, **kwargs):
        time.sleep(0.05)
        return self.index.search_batch(*args, **kwargs)


def test_retrieval_server_batches_concurrent_requests_with_unchanged_results(cluster):
    env = gymnasium.make(ENV_ID, **ENV_KWARGS)
    index = env.unwrapped.index
    server = ray.remote(SlowRetrievalServer).options(max_concurrency=100, num_cpus=0).remote(ENV_ID, ENV_KWARGS)
    queries = [f"{w} information" for w in ("weather", "stock", "movie", "flight", "recipe", "music", "news", "hotel")]
    refs = [server.search_batch.remote([q], None, 5) for q in queries]  # all in flight at once
    got = [r[0] for r in ray.get(refs)]
    assert [g.ids for g in got] == [r.ids for r in index.search_batch(queries, None, 5)]
    stats = ray.get(server.stats.remote())
    assert stats["requests"] == len(queries) and stats["batches"] < len(queries)
    remote = RemoteIndex(server)
    assert remote.search("weather information", None, 3).ids == index.search("weather information", None, 3).ids
    ray.kill(server)


def test_bad_settings_are_rejected(cluster):
    with pytest.raises(ValueError, match="num_workers"):
        RayRollout(SlowScriptedPolicy, ENV_ID, ENV_KWARGS, num_workers=0)


@pytest.mark.slow
def test_toolgym_train_with_the_ray_backend_matches_the_local_run(cluster, one_thread, tmp_path):
    """`toolgym train` with rollout.backend=ray: the loop only picks the backend; with one worker both
    steps' rollouts (the second after a LoRA weight sync) equal the local run's."""
    from toolgym.data.records import read_rollouts
    from toolgym.trainers.config import load_train_config
    from toolgym.trainers.train import train

    base = ["model.name=tiny-llama", "env.kwargs={max_turns: 2}", "sampling.max_new_tokens=6", "grpo.lr=0.001",
            "grpo.lora={r: 2, alpha: 4}", "reward.name=toolsearcher", "train.steps=2", "train.tasks_per_step=1",
            "train.group_size=2", "train.checkpoint_every=0", "train.skip_zero_advantage=false"]
    runs = {}
    for backend in ("local", "ray"):
        run = tmp_path / backend
        cfg = load_train_config(None, base + [f"run_dir={run}", f"rollout.backend={backend}", "rollout.num_workers=1"])
        train(cfg, progress=False)
        runs[backend] = run
    rows = [json.loads(l) for l in (runs["ray"] / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1] and rows[0]["weights_shipped_bytes"] > 0
    for step in (0, 1):
        (task_l, trajs_l), = read_rollouts(runs["local"] / "rollouts" / f"step_{step:06d}.jsonl")
        (task_r, trajs_r), = read_rollouts(runs["ray"] / "rollouts" / f"step_{step:06d}.jsonl")
        assert task_l.id == task_r.id
        assert [t.token_ids for t in trajs_l] == [t.token_ids for t in trajs_r]
    with pytest.raises(ValueError, match="rollout.backend"):
        train(load_train_config(None, base + [f"run_dir={tmp_path / 'bad'}", "rollout.backend=spark"]), progress=False)
