"""toolgym as a verifiers 0.4 environment (toolgym.integrations.verifiers), driven end to end.

verifiers' own machinery runs: its loader builds the env from the plugin id, ``env.serving()``
brings up its interception server, ``env.run_slot`` runs each episode (agent, local runtime,
harness session, scoring by the task's ``@vf.reward`` / ``@vf.metric``), its ``EvalClient``
forwards every model call. The only fake is the model endpoint: an OpenAI-compatible
``/v1/chat/completions`` on 127.0.0.1 whose replies are scripted tool calls (a search of the
request, then a submit of the first two ids that search returned). Any connection off loopback
fails the test.
"""
import asyncio
import json
import re
import socket
import time

import pytest

pytest.importorskip("verifiers")
import verifiers.v1 as vf  # noqa: E402
from aiohttp import web  # noqa: E402  (a verifiers dependency)

from toolgym.data.records import Task  # noqa: E402
from toolgym.envs import render_call  # noqa: E402
from toolgym.envs.actions import Search, Submit  # noqa: E402
from toolgym.integrations import verifiers as tv  # noqa: E402
from toolgym.rewards import get_reward  # noqa: E402

ENV_ID, ENV_KWARGS = "toolgym/ToolSearch-v0", {"max_turns": 3}
ID_LINE = re.compile(r"^\[\d+\] id: (\S+)", re.M)


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """Refuse every connection that is not to this machine's loopback (verifiers must reach nothing)."""
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def check(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"connection off loopback attempted: {address!r}")

    monkeypatch.setattr(socket.socket, "connect", lambda self, a: (check(self, a), real_connect(self, a))[1])
    monkeypatch.setattr(socket.socket, "connect_ex", lambda self, a: (check(self, a), real_connect_ex(self, a))[1])
    monkeypatch.delenv("PRIME_API_KEY", raising=False)


def completion(calls):
    message = {"role": "assistant", "content": None if calls else "done",
               "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                              for i, (n, a) in enumerate(calls)] or None}
    return {"id": "chatcmpl-scripted", "object": "chat.completion", "created": int(time.time()), "model": "scripted",
            "choices": [{"index": 0, "message": {k: v for k, v in message.items() if v is not None},
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class ScriptedModel:
    """The model endpoint. ``invalid_first``: the first call is an unknown tool with arguments that are not JSON."""

    def __init__(self, invalid_first=False):
        self.invalid_first = invalid_first
        self.requests: list[dict] = []

    async def handle(self, request):
        body = await request.json()
        self.requests.append(body)
        messages = body["messages"]
        results = [m for m in messages if m["role"] == "tool"]
        if self.invalid_first and not results:
            return web.json_response(completion([("serch", "{not json")]))
        ids = [i for m in results for i in ID_LINE.findall(m["content"])]
        if not ids:
            request_text = [m for m in messages if m["role"] == "user"][-1]["content"]
            return web.json_response(completion([("search", json.dumps({"query": request_text[:120]}))]))
        return web.json_response(completion([("submit", json.dumps({"tools": ids[:2]}))]))


async def drive(model, num_tasks, num_rollouts):
    app = web.Application()
    app.router.add_post("/v1/chat/completions", model.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        env = tv.load_environment(ENV_ID, ENV_KWARGS, reward="grpo_f1", split="heldout", num_tasks=num_tasks)
        client = vf.EvalClientConfig(base_url=f"http://127.0.0.1:{port}/v1", api_key_var="TOOLGYM_SCRIPTED_KEY")
        return env, await tv.run_episodes(env, client, "scripted", num_rollouts=num_rollouts)
    finally:
        await runner.cleanup()


@pytest.fixture(scope="module")
def scripted():
    model = ScriptedModel()
    env, episodes = asyncio.run(drive(model, num_tasks=2, num_rollouts=2))
    return model, env, episodes


def test_loader_builds_the_plugin_env():
    env = tv.load_environment(ENV_ID, ENV_KWARGS, num_tasks=1)
    assert isinstance(env, vf.SingleAgentEnv) and isinstance(env.taskset, tv.ToolgymTaskset)
    (task,) = list(env.taskset)
    assert isinstance(task, tv.ToolgymTask) and task.data.id == task.data.task_id
    assert [t["function"]["name"] for t in task.data.tools] == ["search", "submit"]
    assert "# Tools" not in task.data.prompt[0].content  # the schemas travel as `tools`, not in the prompt


def test_scripted_calls_step_the_toolgym_env(scripted):
    model, env, episodes = scripted
    assert len(episodes) == 4 and all(ep.ok for ep in episodes), [ep.errors for ep in episodes]
    schemas = list(env.taskset)[0].data.tools
    assert all(r["tools"] == schemas for r in model.requests)  # the env's own schemas, offered as OpenAI tools
    assert len(model.requests) == 8  # search + submit per episode
    for ep in episodes:
        (trace,) = ep.traces
        record = trace.info["toolgym"]
        trajectory = tv.Trajectory.from_dict(record["trajectory"])
        (event,) = trajectory.events
        assert trajectory.terminated_by == "submit" and trace.stop_condition == "toolgym_submit"
        assert trajectory.selection == event.results[:2] and trajectory.invalid_actions == 0
        # the same actions sent as a local rollout's text give the same episode
        local = tv._make_env(ENV_ID, {**ENV_KWARGS, "split": "heldout"})
        local.reset(seed=0, options={"task": record["task_id"]})
        local.step(render_call(Search(query=event.query)))
        *_, info = local.step(render_call(Submit(tool_ids=tuple(trajectory.selection))))
        assert info["trajectory"].events[0].results == event.results
        assert info["trajectory"].selection == trajectory.selection


def test_rubric_reward_is_the_toolgym_module(scripted):
    _, env, episodes = scripted
    tasks = {t.data.task_id: t.data for t in env.taskset}
    groups: dict[str, list] = {}
    for ep in episodes:
        groups.setdefault(ep.traces[0].info["toolgym"]["task_id"], []).append(ep.traces[0])
    assert len(groups) == 2
    f1 = get_reward("grpo_f1")
    for task_id, traces in groups.items():
        task = Task.from_dict(tasks[task_id].task)
        trajectories = [tv.Trajectory.from_dict(t.info["toolgym"]["trajectory"]) for t in traces]
        expected = f1.score_group(trajectories, task).rewards
        assert [t.rewards["grpo_f1"].score for t in traces] == pytest.approx(list(expected))
        assert [t.reward for t in traces] == pytest.approx(list(expected))
        metric = get_reward("selection_f1").score_group(trajectories, task).rewards
        assert [t.metrics["selection_f1"] for t in traces] == pytest.approx(list(metric))
        assert all(0 < t.reward < 1 for t in traces)  # a non-trivial score: two of five ids


def test_invalid_call_is_the_envs_error_message():
    model = ScriptedModel(invalid_first=True)
    _, (episode,) = asyncio.run(drive(model, num_tasks=1, num_rollouts=1))
    assert episode.ok, episode.errors
    error = [m for m in model.requests[1]["messages"] if m["role"] == "tool"][0]["content"]
    assert error.startswith("Error: unknown function 'serch'")
    trajectory = tv.Trajectory.from_dict(episode.traces[0].info["toolgym"]["trajectory"])
    assert trajectory.invalid_actions == 1 and trajectory.terminated_by == "submit" and len(trajectory.events) == 1


def test_per_turn_credit_is_refused():
    for scheme in ("toolsearcher", "esm", "tca"):
        with pytest.raises(ValueError, match="per-turn credit"):
            tv.load_environment(ENV_ID, ENV_KWARGS, reward=scheme, num_tasks=1)


def test_the_loopback_guard_is_live():
    with pytest.raises(AssertionError, match="off loopback"):
        socket.create_connection(("203.0.113.7", 80), timeout=0.1)
