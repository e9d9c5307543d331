"""toolgym's envs as TRL ``GRPOTrainer`` environments (TRL's ``environment_factory`` API, trl 1.16).

TRL's contract (``GRPOTrainer(environment_factory=...)``): the factory makes one environment
object per rollout; its ``reset(**row)`` is called with the dataset row before generation; every
public method other than ``reset`` / ``get_reward`` is a tool, its JSON schema read by
transformers' ``get_json_schema`` from the signature and the Google-style docstring and
rendered by the chat template; TRL parses the model's tool calls, calls the method, appends its
return value as a ``tool`` message and generates again, until the model answers without a call
(or ``max_tool_calling_iterations``); ``get_reward()`` scores the finished rollout. Tool-result
tokens get ``tool_mask = 0`` and are left out of the loss.

What this module adds:

* :func:`environment_factory` ``(env_id, env_kwargs, reward)``: a factory whose objects each own
  one toolgym env (``gymnasium.make(env_id, **env_kwargs)``) and one reward module. For tool
  search the tools are ``search(query[, category])`` and ``submit(tools)`` with the env's own
  schemas (names, descriptions, the ``category`` enum of the corpus), and each call steps the
  env with the Hermes call text :func:`~toolgym.envs.render_call` writes, so searches, errors,
  turn budget and ``SearchEvent`` s are exactly the local env's. ``get_reward()`` is the reward
  module's score of the env's :class:`~toolgym.data.records.Trajectory`.
* Decomposition (``toolgym/Decompose-*``) has no tools: its answer is the completion text, which
  TRL hands to reward functions only, so :func:`reward_funcs` gives the one reward function that
  steps each rollout's env with its final text and returns the same module's score.
* :func:`train_dataset`: the ``prompt`` + ``task_id`` rows of
  :func:`toolgym.trainers.export_hf.task_rows` as a ``datasets.Dataset`` (the system prompt
  without its schema block: the chat template renders ``tools``).
* :func:`prepare_tokenizer`: TRL needs a chat template that renders tool calls and tool
  messages. SmolLM2's template does not; it speaks ChatML, so a ChatML tokenizer gets
  :func:`toolgym_chat_template`, which renders a TRL chat byte for byte as a toolgym rollout
  (the env's system prompt, its call text, results as a ``tool`` turn), plus TRL's Hermes
  response parser. A warm start trained by ``toolgym sft`` thus sees under TRL what it was
  trained on.

Only outcome-level reward modules run here (``kind == "outcome"``: ``selection_f1``,
``selection_match``, ``search_recall``, ``valid_actions``, ``env_return``, ``counterfactual``,
``preference``, and schemes made of them such as ``grpo_f1``): TRL normalises one scalar per
completion over the group and gives it to every token. Per-turn credit (ESM, TCA, the
``toolsearcher`` scheme) is refused with a pointer to the local trainer or verl; see
docs/integrations.md.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from toolgym.data.records import Trajectory
from toolgym.envs.actions import Invalid, Search, Submit
from toolgym.envs.syntax import hermes_call, parse_action, render_call

__all__ = ["environment_factory", "reward_funcs", "train_dataset", "prepare_tokenizer", "outcome_reward",
           "grpo_trainer_kwargs", "toolgym_chat_template", "ToolgymEnvironment"]

CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")


# -- reward ---------------------------------------------------------------------------------------
def outcome_reward(reward: Any = "grpo_f1", env: Any = None, **runtime: Any) -> Any:
    """A toolgym reward module that TRL can run: every module with a non-zero weight is an outcome module.

    ``reward``: a module or scheme name, or a config (any shape :func:`toolgym.rewards.build_reward`
    takes); a module that needs ``retrieve`` (``counterfactual``) searches ``env``'s own index. A
    per-turn credit module (ESM, TCA) with a non-zero weight is a ``ValueError``: TRL gives one
    scalar per completion, so per-turn advantages would be lost.
    """
    from toolgym.rewards import build_reward
    from toolgym.rewards.composite import CompositeReward

    if hasattr(reward, "score_group"):
        module = reward
    else:  # the shapes and default of `toolgym train`; a retrieve over the env's own index, as it does
        index = env.unwrapped.index if env is not None and "retrieve" not in runtime else None
        module = build_reward(reward, index=index, **runtime)
    parts = [(m.key, m.module, m.weight) for m in module.modules] if isinstance(module, CompositeReward) else [
        (module.name, module, 1.0)]
    credit = [key for key, m, w in parts if getattr(m, "kind", None) != "outcome" and w != 0]
    if credit:
        raise ValueError(f"reward {getattr(module, 'name', reward)!r} has per-turn credit module(s) {credit}: TRL's GRPO "
                         "scores whole completions, so use an outcome module or scheme (e.g. grpo_f1) here and train "
                         "turn-level credit with `toolgym train` or verl (docs/integrations.md)")
    return module


# -- environments ---------------------------------------------------------------------------------
class ToolgymEnvironment:
    """One toolgym env for one TRL rollout. Public methods are TRL tools, so helpers are private."""

    env_id: str = ""
    env_kwargs: dict[str, Any] = {}
    reward_config: Any = "grpo_f1"
    _shared: dict[tuple[str, str], Any] = {}  # one reward module per (env id, config), shared by instances

    def __init__(self) -> None:
        import gymnasium

        import toolgym.envs  # noqa: F401  (registers the ids)

        self._env = gymnasium.make(self.env_id, **self.env_kwargs)
        key = (self.env_id, json.dumps(self.reward_config, sort_keys=True, default=str))
        if key not in self._shared:
            self._shared[key] = outcome_reward(self.reward_config, env=self._env)
        self._reward = self._shared[key]
        self._task = None
        self._final: Trajectory | None = None
        self.episodes: list[Trajectory] = []  # every finished episode of this instance (tests, logging)
        self.rewards: list[float] = []        # and its reward, in the same order

    def reset(self, task_id: str | None = None, seed: int | None = None, **row: Any) -> None:
        """Start an episode on the row's task (TRL passes the dataset row as keywords)."""
        options = {"task": task_id} if task_id is not None else None
        self._env.reset(seed=seed, options=options)
        self._task = self._env.unwrapped.episode.task
        self._final = None
        return None  # the row's prompt already holds the request

    # -- private helpers (not tools) --
    def _running(self) -> bool:
        episode = self._env.unwrapped.episode
        return episode is not None and not episode.done

    def _step(self, action: str) -> str:
        if self._task is None:
            raise ValueError("reset() first")
        if not self._running():
            raise ValueError("the episode is over; answer without a tool call")
        obs, _, terminated, truncated, info = self._env.step(action)
        if terminated or truncated:
            self._final = info["trajectory"]
        return obs

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        """Step the env with the tool call TRL parsed, written in the env's protocol.

        The arguments are judged as the Hermes parser judges a call (a non-string query, a
        non-list ``tools``...); under Hermes the call text goes to the env as is. Under Search-R1,
        arguments the tags cannot carry (a wrong type; a query holding ``</search>`` or a NUL)
        become the env's own error observation (an invalid turn), as Hermes gives, never an
        exception out of the tool method."""
        call = hermes_call(name, arguments)
        protocol = self._env.unwrapped.protocol
        if protocol == "hermes":
            return self._step(call)  # the env parses and judges it exactly as a local rollout's turn
        action = parse_action(call, "hermes")
        try:
            text = render_call(action, protocol) if isinstance(action, (Search, Submit)) else None
        except ValueError as exc:
            return self._invalid(call, str(exc))
        if text is None:
            return self._invalid(call, action.reason if isinstance(action, Invalid) else "unrecognised tool call")
        return self._step(text)

    def _invalid(self, call: str, reason: str) -> str:
        """An invalid turn with ``reason``: the env's error observation, counted in ``invalid``."""
        if self._task is None:
            raise ValueError("reset() first")
        if not self._running():
            raise ValueError("the episode is over; answer without a tool call")
        obs, _, terminated, truncated, info = self._env.unwrapped.finish_step(call, Invalid(reason), None)
        if terminated or truncated:
            self._final = info["trajectory"]
        return obs

    def _trajectory(self) -> Trajectory:
        """The episode: the env's own record when it ended, else what it holds so far, ended by ``no_call``
        (TRL stops a rollout when the model answers without a tool call; verl's loop says the same)."""
        if self._final is not None:
            return self._final
        trajectory = self._env.unwrapped.trajectory()
        trajectory.terminated_by = "no_call"
        return trajectory

    def _score(self) -> float:
        trajectory = self._trajectory()
        value = float(self._reward.score_group([trajectory], self._task).rewards[0])
        self.episodes.append(trajectory)
        self.rewards.append(value)
        return value


class ToolSearchEnvironment(ToolgymEnvironment):
    """Tool search: ``search`` / ``submit`` are added per env by :func:`environment_factory`."""

    def get_reward(self) -> float:
        """The reward module's score of this rollout's episode (TRL calls it once per rollout)."""
        return self._score()


class DecomposeEnvironment(ToolgymEnvironment):
    """Decomposition: no tools; :func:`reward_funcs` steps the env with the completion's final text."""

    def _answer(self, text: str) -> float:
        if self._running():
            self._step(text)
        return self._score()


def _schema_docstring(schema: dict[str, Any]) -> str:
    """A Google-style docstring from which ``get_json_schema`` rebuilds the schema (``choices`` = the enum)."""
    fn = schema["function"]
    lines = [fn["description"], "", "Args:"]
    for name, spec in fn["parameters"]["properties"].items():
        desc = spec.get("description", name)
        if "enum" in spec:
            desc += " (choices: " + json.dumps(spec["enum"], ensure_ascii=False) + ")"
        lines.append(f"    {name}: {desc}")
    return "\n".join(lines)


def _tool_methods(schemas: Sequence[dict[str, Any]]) -> dict[str, Callable[..., str]]:
    """``search`` / ``submit`` methods whose signatures and docstrings carry the env's schemas."""
    by_name = {s["function"]["name"]: s for s in schemas}
    methods: dict[str, Callable[..., str]] = {}
    search = by_name["search"]["function"]["parameters"]
    if "category" not in search["properties"]:
        def search_method(self, query: str) -> str:
            return self._call("search", {"query": query})
    elif "category" in search["required"]:
        def search_method(self, query: str, category: str) -> str:
            return self._call("search", {"query": query, "category": category})
    else:
        # `str` with a None default, not `str | None`: get_json_schema would add "nullable", which the env's schema lacks
        def search_method(self, query: str, category: str = None) -> str:  # type: ignore[assignment]
            args = {"query": query} if category is None else {"query": query, "category": category}
            return self._call("search", args)

    def submit_method(self, tools: list[str]) -> str:
        # the env checks the ids (unknown, duplicated, too many) exactly as for a local rollout
        return self._call("submit", {"tools": [str(t) for t in tools] if isinstance(tools, list) else tools})

    for name, fn in (("search", search_method), ("submit", submit_method)):
        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = _schema_docstring(by_name[name])
        methods[name] = fn
    return methods


def environment_factory(env_id: str = "toolgym/ToolSearch-v0", env_kwargs: dict[str, Any] | None = None,
                        reward: Any = "grpo_f1") -> type[ToolgymEnvironment]:
    """The class TRL's ``GRPOTrainer(environment_factory=...)`` calls once per rollout (a class is a factory).

    The reward is checked now (outcome modules only). Tool search envs get ``search``/``submit``
    tools from the env's schemas (its ``category_mode`` decides whether ``category`` exists and
    is required); decomposition envs get none (pass :func:`reward_funcs` as ``reward_funcs``).
    """
    import gymnasium

    from toolgym.envs.registry import require_env_id  # (importing it registers the ids)

    require_env_id(env_id)
    kwargs = dict(env_kwargs or {})
    probe = gymnasium.make(env_id, **kwargs)
    try:
        outcome_reward(reward, env=probe)  # refused now, not at the first rollout
        _, info = probe.reset(seed=0)
    finally:
        probe.close()
    schemas = info.get("tool_schemas") or []
    attrs: dict[str, Any] = {"env_id": env_id, "env_kwargs": kwargs, "reward_config": reward}
    if schemas:
        base: type[ToolgymEnvironment] = ToolSearchEnvironment
        attrs.update(_tool_methods(schemas))
    else:
        base = DecomposeEnvironment
    name = base.__name__.replace("Environment", "") + "_" + "".join(c if c.isalnum() else "_" for c in env_id.split("/")[-1])
    return type(name, (base,), attrs)


def reward_funcs(factory: type[ToolgymEnvironment]) -> list[Callable[..., list[float]]]:
    """The ``reward_funcs`` for ``factory``: ``[]`` for tool search (its envs own ``get_reward``), else one
    function that answers each rollout's env with the completion's final text and returns its reward."""
    if issubclass(factory, ToolSearchEnvironment):
        return []

    def toolgym_decomposition(completions: list[Any], environments: list[DecomposeEnvironment], **kwargs: Any) -> list[float]:
        out = []
        for completion, env in zip(completions, environments, strict=True):
            text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
            out.append(env._answer(text or ""))
        return out

    toolgym_decomposition.__name__ = factory.__name__
    return [toolgym_decomposition]


def train_dataset(env_id: str = "toolgym/ToolSearch-v0", split: str | None = "train",
                  env_kwargs: dict[str, Any] | None = None, max_tasks: int | None = None) -> Any:
    """A ``datasets.Dataset`` of ``prompt`` (conversational, no schema block) and ``task_id`` per task."""
    import datasets

    from toolgym.trainers.export_hf import task_rows

    rows = task_rows(env_id, split, env_kwargs, max_tasks)
    if not rows:
        raise ValueError(f"{env_id} has no tasks in split {split!r}")
    return datasets.Dataset.from_list([{"prompt": r["prompt"], "task_id": r["task_id"]} for r in rows])


# -- tokenizer -------------------------------------------------------------------------------------
def toolgym_chat_template() -> str:
    """ChatML that renders a tool-calling chat the way a toolgym rollout writes it, as a Jinja template.

    * ``tools`` go at the end of the first system message as the env's own Hermes schema block
      (:data:`toolgym.envs.prompts.HERMES_TOOLS_OPEN`, one JSON schema per line,
      :data:`~toolgym.envs.prompts.HERMES_TOOLS_CLOSE`), so a TRL prompt is byte for byte the
      env's system prompt;
    * an assistant's ``tool_calls`` are ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``,
      the text :func:`~toolgym.envs.render_call` writes (``<`` escaped as ``\\u003c``);
    * a ``tool`` message is its own ChatML turn, ``<|im_start|>tool\\n...<|im_end|>``, as in the
      local rollout and in ``toolgym sft``'s demonstrations (``HFChatPolicy``'s glue).

    Why not TRL's bundled Qwen2.5 template: it wraps tool results in a user turn
    (``<|im_start|>user\\n<tool_response>...``), a format a toolgym warm start never saw; a
    SmolLM2 warm start answered it with ``<tool_response>`` where a ``<tool_call>`` belongs, so
    every rollout ended without a submit and every reward was 0. Plain chats (no tools) render as
    SmolLM2's own template does, except that no default system prompt is added.
    """
    from toolgym.envs.prompts import HERMES_TOOLS_CLOSE, HERMES_TOOLS_OPEN

    def literal(text: str) -> str:  # a Jinja string literal (JSON escapes are Jinja escapes)
        return json.dumps(text)

    return (
        "{%- macro schema_block(tools) -%}" + "{{ " + literal(HERMES_TOOLS_OPEN) + " }}"
        "{%- for tool in tools -%}{%- set f = tool.function if tool.function is defined else tool -%}"
        "{{ {'type': 'function', 'function': {'name': f.name, 'description': f.description, "
        "'parameters': f.parameters}} | tojson }}{%- if not loop.last %}{{ '\\n' }}{% endif -%}{%- endfor -%}"
        "{{ " + literal(HERMES_TOOLS_CLOSE) + " }}{%- endmacro -%}"
        "{%- if tools and (not messages or messages[0]['role'] != 'system') -%}"
        "{{ '<|im_start|>system\\n' }}{{ schema_block(tools)[2:] }}{{ '<|im_end|>\\n' }}{%- endif -%}"
        "{%- for message in messages -%}"
        "{{ '<|im_start|>' + message['role'] + '\\n' }}"
        "{%- if message['content'] is string %}{{ message['content'] }}{% endif -%}"
        "{%- if loop.first and message['role'] == 'system' and tools %}{{ schema_block(tools) }}{% endif -%}"
        "{%- if message['role'] == 'assistant' and message.tool_calls -%}{%- for call in message.tool_calls -%}"
        "{%- set c = call.function if call.function is defined else call -%}"
        "{{ '<tool_call>{\"name\": ' + (c.name | tojson | replace('<', '\\\\u003c')) + ', \"arguments\": ' }}"
        "{%- if c.arguments is string %}{{ c.arguments }}"
        "{%- else %}{{ c.arguments | tojson | replace('<', '\\\\u003c') }}{% endif -%}"
        "{{ '}</tool_call>' }}{%- endfor -%}{%- endif -%}"
        "{{ '<|im_end|>\\n' }}{%- endfor -%}"
        "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif -%}"
    )


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Make ``tokenizer`` usable by ``GRPOTrainer`` with tools: a tool-calling chat template, a parser for the
    model's ``<tool_call>`` text, ``<|im_end|>`` as EOS and a pad token.

    A tokenizer whose template already supports tool calling keeps it. A ChatML one that does not
    (SmolLM2's) gets :func:`toolgym_chat_template`, which renders the chat exactly as a toolgym
    rollout does, and the Hermes response parser TRL ships for Qwen3 (``<tool_call>{json}</tool_call>``).
    """
    import transformers
    from packaging.version import Version
    from trl.chat_template_utils import qwen3_schema, qwen3_template, supports_tool_calling

    vocab = tokenizer.get_vocab()
    chatml = all(t in vocab for t in CHATML_TOKENS)
    if not supports_tool_calling(tokenizer):
        if not chatml:
            raise ValueError("the tokenizer's chat template cannot render tool calls and it is not ChatML; give it a "
                             "tool-calling template (tokenizer.chat_template = ...) first")
        tokenizer.chat_template = toolgym_chat_template()
        # TRL only recognises its bundled templates; set the parser it would pick for a Hermes template.
        # transformers >= 5.13 reads the new-style response_template, older versions the legacy schema.
        if Version(transformers.__version__) >= Version("5.13.0.dev0"):
            tokenizer.response_template = qwen3_template
        else:
            tokenizer.response_schema = qwen3_schema
    if chatml:
        tokenizer.eos_token = "<|im_end|>"  # SmolLM2's GGUF says <|im_start|>
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def grpo_trainer_kwargs(env_id: str = "toolgym/ToolSearch-v0", env_kwargs: dict[str, Any] | None = None,
                        reward: Any = "grpo_f1", split: str | None = "train", max_tasks: int | None = None) -> dict[str, Any]:
    """``environment_factory``, ``reward_funcs`` and ``train_dataset`` for ``GRPOTrainer(model, args=..., **these)``."""
    kwargs = {**dict(env_kwargs or {}), **({"split": split} if split is not None else {})}
    factory = environment_factory(env_id, kwargs, reward)  # the envs hold the dataset's split
    return {"environment_factory": factory, "reward_funcs": reward_funcs(factory),
            "train_dataset": train_dataset(env_id, split, env_kwargs, max_tasks)}
