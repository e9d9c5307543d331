"""The config system of every command: typed dataclasses (the one source of every default) and one
loader, plus the settings of ``toolgym train`` (and of anything else that loads a policy and an env).

``load_config(schema, path, overrides)`` layers ``OmegaConf.structured(schema)`` <- YAML file <-
``key=value`` overrides and returns a ``schema`` instance; ``load_train_config`` is it for
:class:`TrainConfig`, validated. Structured mode makes every section strict (an unknown key or a value
of the wrong type fails at load, naming the key); :func:`validate` then checks ranges and the
machine (model path, device). The free dicts are ``env.kwargs`` / ``train_kwargs`` /
``eval_kwargs`` / ``reset_options`` (to ``gymnasium.make`` / ``reset``), ``reward.options`` (to the
reward module) and ``grpo.lora`` (``peft.LoraConfig`` fields); the trainer checks those by
building one env and the reward before it loads the model.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable, Optional, Sequence, TypeVar

from toolgym.data.config_keys import UnknownConfigKeyError, check_known_keys, require  # noqa: F401  (require: re-exported)
from toolgym.data.readers import (MAX_CONFIG_REFERENCES, check_finite_fields, check_override_shapes, read_yaml_mapping,
                                  yaml_references)
from toolgym.agents.model import ModelConfig, check_device, model_source
from toolgym.agents.policy import SamplingConfig, check_bf16_setting
from toolgym.trainers.allocator import MAX_MMAP_THRESHOLD

T = TypeVar("T")

__all__ = ["EnvConfig", "EvalConfig", "GRPOConfig", "ModelConfig", "RewardConfig", "SamplingConfig", "TrainConfig",
           "TrainLoopConfig", "UnknownConfigKeyError", "check_lora_numbers", "check_reward_names", "config_dict",
           "config_yaml", "load_config", "load_train_config", "require", "strict_dataclass", "validate"]


@dataclass
class EnvConfig:
    """The environment episodes run in.

    Parameters:
        id (`str`, defaults to `"toolgym/ToolSearch-v0"`):
            A registered id (``toolgym envs``).
        kwargs (`dict`, defaults to `{}`):
            Passed to ``gymnasium.make`` for training and evaluation envs.
        train_kwargs (`dict`, defaults to `{"split": "train"}`):
            Added to ``kwargs`` for training envs.
        eval_kwargs (`dict`, defaults to `{"split": "heldout"}`):
            Added to ``kwargs`` for evaluation envs. A ``curriculum`` is dropped there:
            evaluation searches the way the env does after training (global search).
        reset_options (`dict`, defaults to `{}`):
            Extra ``reset(options=...)`` for every episode (the trainer adds ``task`` and, for an
            env with a curriculum, ``progress`` = step / steps).
    """

    id: str = "toolgym/ToolSearch-v0"
    kwargs: dict[str, Any] = field(default_factory=dict)
    train_kwargs: dict[str, Any] = field(default_factory=lambda: {"split": "train"})
    eval_kwargs: dict[str, Any] = field(default_factory=lambda: {"split": "heldout"})
    reset_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The ``env`` section: a non-empty id and four mappings (whether the id is registered and
        the env takes the keywords is checked by building one env, before the model loads)."""
        require(isinstance(self.id, str) and bool(self.id.strip()), "env.id", self.id, "must be a non-empty env id")
        for key in ("kwargs", "train_kwargs", "eval_kwargs", "reset_options"):
            value = getattr(self, key)
            require(_is_mapping(value), f"env.{key}", value, "must be a mapping")


@dataclass
class RewardConfig:
    """How rollouts are scored and credited.

    Parameters:
        name (`str`, defaults to `"grpo_f1"`):
            A scheme (``toolsearcher``, ``magicselector``, ``grpo_f1``, ``grpo_match``) or a reward
            module (``counterfactual``, ``esm``, ...); see ``toolgym.rewards``.
        options (`dict`, defaults to `{}`):
            Keyword arguments of the module; a ``retrieve`` over the env's own index is added.
        modules (`list`, *optional*):
            A composite written out, ``[{module, weight, **options}, ...]`` (the config shape of
            ``toolgym.rewards``, e.g. ``configs/rewards/decomposition_env_return.yaml``); when set,
            ``name`` only labels it and ``options`` must be empty (``toolgym.rewards.build_reward``).
    """

    name: str = "grpo_f1"
    options: dict[str, Any] = field(default_factory=dict)
    modules: Optional[list[Any]] = None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The ``reward`` section's shape: a non-empty name, a mapping of options, a list or null for
        ``modules``. Whether the names are registered is :func:`check_reward_names` (at load), and
        the modules' options are checked by building the reward, before the model loads."""
        require(isinstance(self.name, str) and bool(self.name.strip()), "reward.name", self.name,
              "must be a non-empty scheme or module name")
        require(_is_mapping(self.options), "reward.options", self.options, "must be a mapping")
        require(self.modules is None or (isinstance(self.modules, Sequence) and not isinstance(self.modules, str)),
              "reward.modules", self.modules, "must be a list of {module, weight, ...} entries, or null")


@dataclass
class GRPOConfig:
    """Optimisation settings of :class:`~toolgym.trainers.grpo.GRPOTrainer`.

    Parameters:
        lr (`float`, defaults to `1e-6`):
            AdamW learning rate (LoRA adapters take larger steps, ~1e-4).
        clip_eps (`float`, defaults to `0.2`):
            PPO clip range ε of the ratio.
        kl_coef (`float`, defaults to `0.001`):
            β of the k3 KL penalty to the reference policy; ``0`` keeps no reference.
        weight_decay (`float`, defaults to `0.0`):
            AdamW weight decay.
        max_grad_norm (`float`, defaults to `1.0`):
            Gradient-norm clip; ``0`` = no clip.
        micro_batch_size (`int`, defaults to `4`):
            Sequences per forward pass; gradients accumulate over a mini-batch.
        mini_batch_size (`int` or `None`, defaults to `None`):
            Sequences per optimiser step; ``None`` = the whole batch (one step per epoch). With
            one step per batch (and ``epochs: 1``) the update is on-policy: the old log-probs are
            the current ones, taken from the training pass itself (ratio exactly 1), so no
            separate no-grad pass runs.
        epochs (`int`, defaults to `1`):
            Passes over one rollout batch (shuffled, seeded by run seed and step, when > 1).
        logprob_chunk (`int`, defaults to `1024`):
            Response positions per LM-head chunk (bounds the logits' memory).
        lora (`dict` or `None`, defaults to `None`):
            ``peft.LoraConfig`` fields under peft's own names, e.g. ``{r: 16, lora_alpha: 32,
            target_modules: [q_proj, v_proj]}``; ``None`` trains every weight. (The older
            ``alpha`` / ``dropout`` still load.)
        gradient_checkpointing (`bool`, defaults to `False`):
            Recompute activations in the backward pass (less memory, ~30% slower).
        autocast_bf16 (`bool` or ``"auto"``, defaults to `False`):
            Run the decoder of every log-prob pass under bfloat16 autocast (weights and the LM
            head stay float32): ~1.6x faster forward+backward on CPUs with AVX512-BF16, ~70x
            slower on CPUs without bf16 matrix units; ``auto`` autocasts only where they exist
            (:func:`toolgym.agents.decoding.bf16_autocast`). Rollouts
            may sample in bf16 too (``sampling.precision``); on-policy updates take the old
            log-probs from the same pass.
        share_prompt_prefix (`bool`, defaults to `False`):
            Run a micro-batch's common prompt once: rollouts of one task share it, so the update
            groups them into micro-batches, runs the shared prefix as one row and attends every
            continuation to its (repeated) key/value cache. Same loss and gradient up to float
            rounding; the prompt's forward and backward cost one row instead of ``group_size``.
            Skipped while ``gradient_checkpointing`` is on (it turns the decoder's cache off).
        recompute_prompt (`bool`, defaults to `False`):
            With ``share_prompt_prefix``: keep none of the shared prompt's activations and run its
            forward again in the backward pass (``torch.utils.checkpoint`` on that one row). The
            prompt is the longest part of a one-turn rollout, so this removes most of an update's
            activation memory for about one extra prompt forward per micro-batch; unlike
            ``gradient_checkpointing`` it keeps the shared prompt (docs/training.md#quickstart).
        pad_to_multiple (`int`, defaults to `1`):
            Right-pad every micro-batch to a multiple of this many tokens (the padding is masked
            and changes no log-prob). Sequence lengths vary from one micro-batch to the next, and
            every new shape leaves the CPU allocator (and oneDNN's cache) holding blocks of a new
            size: 64 lowered the quickstart's resident memory (docs/training.md#quickstart) at
            the price of up to 63 padded tokens a row.
        tis_cap (`float` or `None`, defaults to `None`):
            Truncated importance sampling against the sampler/trainer mismatch: each policy
            token's loss is weighted by ``min(π_train / π_sample, C)`` with ``C = tis_cap``,
            ``π_train`` the trainer's own (recomputed, float32-weights) old log-prob and
            ``π_sample`` the sampler's (e.g. bf16) one. ``None`` = off; the mean ``|Δ log p|``
            and the weights' spread are logged either way when the sampler reports log-probs.
    """

    lr: float = 1e-6
    clip_eps: float = 0.2
    kl_coef: float = 0.001
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch_size: int = 4
    mini_batch_size: int | None = None
    epochs: int = 1
    logprob_chunk: int = 1024
    lora: dict[str, Any] | None = None
    gradient_checkpointing: bool = False
    autocast_bf16: bool | str = False
    tis_cap: float | None = None
    share_prompt_prefix: bool = False
    recompute_prompt: bool = False
    pad_to_multiple: int = 1

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The ``grpo`` section's ranges, one ``ValueError`` naming the key: every float finite
        (``lr=.inf`` trained to all-NaN weights with exit 0), the LoRA scale too. Run at
        construction and again by :func:`validate` (a field may be set after construction)."""
        check_finite_fields(self, "grpo")
        check_bf16_setting(self.autocast_bf16, "grpo.autocast_bf16")
        require(self.lr >= 0, "grpo.lr", self.lr, "must be >= 0")
        require(self.clip_eps > 0, "grpo.clip_eps", self.clip_eps, "must be > 0")
        require(self.kl_coef >= 0, "grpo.kl_coef", self.kl_coef, "must be >= 0")
        require(self.weight_decay >= 0, "grpo.weight_decay", self.weight_decay, "must be >= 0")
        require(self.max_grad_norm >= 0, "grpo.max_grad_norm", self.max_grad_norm, "must be >= 0 (0 = no clip)")
        require(self.micro_batch_size >= 1, "grpo.micro_batch_size", self.micro_batch_size, "must be >= 1")
        require(self.mini_batch_size is None or self.mini_batch_size >= 1, "grpo.mini_batch_size", self.mini_batch_size,
              "must be >= 1, or null for the whole batch")
        require(self.epochs >= 1, "grpo.epochs", self.epochs, "must be >= 1")
        require(self.logprob_chunk >= 1, "grpo.logprob_chunk", self.logprob_chunk, "must be >= 1")
        require(self.pad_to_multiple >= 1, "grpo.pad_to_multiple", self.pad_to_multiple, "must be >= 1")
        require(self.tis_cap is None or self.tis_cap >= 1, "grpo.tis_cap", self.tis_cap,
              "must be >= 1 (a cap on π_train/π_sample), or null")
        check_lora_numbers(self.lora, "grpo.lora")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "GRPOConfig":
        return strict_dataclass(cls, dict(d or {}), "GRPO")


@dataclass
class TrainLoopConfig:
    """The ``train`` section: the shape and length of the run.

    Parameters:
        steps (`int`, defaults to `10`):
            GRPO steps (one rollout batch and one update each); >= 1.
        tasks_per_step (`int`, defaults to `2`):
            Tasks per step, taken from seeded per-epoch permutations of the task list.
        group_size (`int`, defaults to `4`):
            Rollouts per task (G): advantages are relative within a group.
        max_context_tokens (`int`, defaults to `4096`):
            An episode whose next turn could exceed this is cut (``terminated_by="context"``);
            must exceed ``sampling.max_new_tokens``, and a step in which no prompt leaves room
            for one turn fails.
        checkpoint_every (`int`, defaults to `5`):
            Save a checkpoint every N steps (and at the end); ``0`` = never.
        keep_checkpoints (`int`, defaults to `1`):
            Newest checkpoints kept.
        save_rollouts (`bool`, defaults to `True`):
            Write ``rollouts/step_*.jsonl`` (for ``toolgym replay``).
        skip_zero_advantage (`bool`, defaults to `False`):
            Leave rollouts whose token advantages are all zero out of the update. Off by default:
            dropping them also drops their KL term and shrinks the token-mean divisor, which
            changes the objective; turn it on only to save compute.
        max_tasks (`int` or `None`, defaults to `None`):
            Train on the first N tasks of the split only; ``None`` = all.
        time_budget_s (`float` or `None`, defaults to `None`):
            Stop (and checkpoint) after the step that spends this many seconds.
        malloc_mmap_threshold (`int` or `None`, defaults to `None`):
            Bytes from which glibc mmaps an allocation and returns it to the OS on free, fixed
            for the run (:func:`~toolgym.trainers.allocator.fix_mmap_threshold`); ``None`` leaves
            glibc's self-raising default. 1048576 (1 MiB) lowered the quickstart's resident memory
            without slowing its steps (docs/training.md#quickstart). No effect off glibc.
    """

    steps: int = 10
    tasks_per_step: int = 2
    group_size: int = 4
    max_context_tokens: int = 4096
    checkpoint_every: int = 5
    keep_checkpoints: int = 1
    save_rollouts: bool = True
    skip_zero_advantage: bool = False
    max_tasks: int | None = None
    time_budget_s: float | None = None
    malloc_mmap_threshold: int | None = None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The ``train`` section's ranges (see :meth:`GRPOConfig.check`)."""
        check_finite_fields(self, "train")
        require(self.steps >= 1, "train.steps", self.steps, "must be >= 1")
        require(self.tasks_per_step >= 1, "train.tasks_per_step", self.tasks_per_step, "must be >= 1")
        require(self.group_size >= 1, "train.group_size", self.group_size, "must be >= 1")
        require(self.group_size <= MAX_GROUP_SIZE, "train.group_size", self.group_size, f"must be <= {MAX_GROUP_SIZE}")
        require(self.tasks_per_step <= MAX_TASKS_PER_STEP, "train.tasks_per_step", self.tasks_per_step,
              f"must be <= {MAX_TASKS_PER_STEP}")
        require(self.group_size * self.tasks_per_step <= MAX_EPISODES_PER_STEP, "train.group_size", self.group_size,
              f"times train.tasks_per_step ({self.tasks_per_step}) must be <= {MAX_EPISODES_PER_STEP} episodes per "
              "step (each has its own env and rollout)")
        require(self.checkpoint_every >= 0, "train.checkpoint_every", self.checkpoint_every, "must be >= 0 (0 = never)")
        require(self.keep_checkpoints >= 1, "train.keep_checkpoints", self.keep_checkpoints, "must be >= 1")
        require(self.max_tasks is None or self.max_tasks >= 1, "train.max_tasks", self.max_tasks,
              "must be >= 1, or null for all tasks")
        require(self.time_budget_s is None or self.time_budget_s > 0, "train.time_budget_s", self.time_budget_s,
              "must be > 0, or null")
        require(self.malloc_mmap_threshold is None or 0 <= self.malloc_mmap_threshold <= MAX_MMAP_THRESHOLD,
                "train.malloc_mmap_threshold", self.malloc_mmap_threshold,
                f"must be a byte count in 0..{MAX_MMAP_THRESHOLD}, or null")


@dataclass
class EvalConfig:
    """The ``eval`` section: greedy evaluation before and/or after training.

    Parameters:
        before (`bool`, defaults to `False`), after (`bool`, defaults to `False`):
            Evaluate the policy before / after training (written to ``eval.json``, per task).
        num_tasks (`int` or `None`, defaults to `20`):
            The first N tasks of the eval split; ``None`` = all of them.
        batch_size (`int`, defaults to `8`):
            Episodes generated together.
        temperature (`float`, defaults to `0.0`):
            ``0`` = greedy.
    """

    before: bool = False
    after: bool = False
    num_tasks: int | None = 20
    batch_size: int = 8
    temperature: float = 0.0

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The ``eval`` section's ranges (see :meth:`GRPOConfig.check`)."""
        check_finite_fields(self, "eval")
        require(self.num_tasks is None or self.num_tasks >= 1, "eval.num_tasks", self.num_tasks,
              "must be >= 1, or null for all tasks")
        require(self.batch_size >= 1, "eval.batch_size", self.batch_size, "must be >= 1")
        require(self.temperature >= 0, "eval.temperature", self.temperature, "must be >= 0 (0 = greedy)")


@dataclass
class RolloutConfig:
    """The ``rollout`` section: where episodes are generated.

    Parameters:
        backend (`str`, defaults to `"local"`):
            ``local`` (this process) or ``ray`` (rollout workers as Ray actors,
            :mod:`toolgym.trainers.ray_rollout`; see docs/scale.md).
        num_workers (`int`, defaults to `2`):
            Ray rollout workers, each with a policy copy and its envs.
        address (`str`, *optional*):
            ``ray.init`` address; ``auto`` joins a running cluster, ``None`` starts a local one.
        worker_cpus (`float`, defaults to `1`), worker_gpus (`float`, defaults to `0`):
            Resources each worker actor asks Ray for (a GPU puts its policy on ``cuda``).
        threads_per_worker (`int`, defaults to `1`):
            torch intra-op threads inside each worker.
    """

    backend: str = "local"
    num_workers: int = 2
    address: Optional[str] = None
    worker_cpus: float = 1.0
    worker_gpus: float = 0.0
    threads_per_worker: int = 1

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The ``rollout`` section's ranges (see :meth:`GRPOConfig.check`)."""
        check_finite_fields(self, "rollout")
        require(self.backend in ("local", "ray"), "rollout.backend", self.backend, "must be local or ray")
        require(self.num_workers >= 1, "rollout.num_workers", self.num_workers, "must be >= 1")
        require(self.threads_per_worker >= 1, "rollout.threads_per_worker", self.threads_per_worker, "must be >= 1")
        require(self.worker_cpus >= 0, "rollout.worker_cpus", self.worker_cpus, "must be >= 0")
        require(self.worker_gpus >= 0, "rollout.worker_gpus", self.worker_gpus, "must be >= 0")


@dataclass
class TrainConfig:
    """Everything ``toolgym train`` reads; ``toolgym train CONFIG --print-config`` shows it merged.

    Parameters:
        run_dir (`str`, defaults to `"runs/train"`): outputs (metrics, rollouts, checkpoints, plots).
        seed (`int`, defaults to `0`): task order, sampling and shuffling derive from it and the step.
    """

    run_dir: str = "runs/train"
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    train: TrainLoopConfig = field(default_factory=TrainLoopConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The top-level settings: ``seed`` in ``[0, MAX_SEED]`` (``seed=1e23`` died in torch with
        "Overflow when unpacking long long", naming nothing; a negative one in numpy)."""
        require(isinstance(self.seed, int) and 0 <= self.seed <= MAX_SEED, "seed", self.seed,
              f"must be an integer in [0, {MAX_SEED}]")


# -- loading ----------------------------------------------------------------------------------
def strict_dataclass(cls: type, d: dict[str, Any], what: str) -> Any:
    """``cls(**d)`` through omegaconf's structured mode: an unknown key or a value of the wrong type
    is a ``ValueError`` naming it (config typos fail loudly)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    check_known_keys(d, [f.name for f in dataclasses.fields(cls)], f"{what} settings")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), d))
    except ConfigKeyError as exc:  # a nested section's unknown key
        raise _unknown_key(exc, f"{what} settings: ") from None
    except OmegaConfBaseException as exc:
        raise ValueError(f"{what} settings: {_one_line(exc)}") from None


def _unknown_key(exc: Exception, prefix: str = "") -> UnknownConfigKeyError:
    """omegaconf's ``ConfigKeyError`` as :class:`UnknownConfigKeyError`, listing the valid keys of
    the section the key was given in."""
    key = str(getattr(exc, "full_key", None) or exc)
    section = getattr(exc, "object_type", None)  # the dataclass the key is not a field of
    valid = [f.name for f in dataclasses.fields(section)] if dataclasses.is_dataclass(section) else []
    return UnknownConfigKeyError(f"{prefix}unknown key {key}: {str(exc).splitlines()[0]}", key, valid)


def _one_line(exc: Exception) -> str:
    key = getattr(exc, "full_key", None)
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{key}: {msg}" if key else msg


# Command-line overrides count against the same reference cap (8 chained ${...} given as
# overrides hung omegaconf past 120 s), and their total size against the file's.
MAX_OVERRIDES_BYTES = 64 * 1024
# Every episode of a step has its own env and rollout; beyond these a run ends in MemoryError.
MAX_GROUP_SIZE = 1024
MAX_TASKS_PER_STEP = 4096
MAX_EPISODES_PER_STEP = 16384  # group_size * tasks_per_step
# Sampling seeds are seed * 1_000_003 + step * episodes: they must stay inside torch's int64.
MAX_SEED = 2**32 - 1


def load_config(schema: type[T], path: str | Path | None, overrides: Sequence[str] = (), *,
                check: Callable[[T], None] | None = None) -> T:
    """``schema`` defaults <- YAML file <- ``key=value`` overrides (omegaconf dot-list): a ``schema`` instance.

    The one loader of every command that takes a config (``train``, ``sft``, ``generate``,
    ``fit-*``). Structured mode makes every section strict (an unknown key or a value of the
    wrong type fails, naming the key); sizes, YAML aliases / interpolations and nesting are
    capped before anything is parsed; ``check`` (e.g. :func:`validate`) then checks ranges. Any
    bad key or value is a ``ValueError`` (a missing file a ``FileNotFoundError``) with one line.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    overrides = list(overrides)
    bad = [o for o in overrides if not isinstance(o, str) or "=" not in o or o.startswith("-")]
    if bad:
        raise ValueError(f"overrides must look like key=value, got {[str(o)[:80] for o in bad[:5]]}")
    if sum(len(o) for o in overrides) > MAX_OVERRIDES_BYTES:
        raise ValueError(f"overrides are longer than {MAX_OVERRIDES_BYTES} characters in all")
    check_override_shapes(overrides)  # key parts and value nesting: omegaconf recurses over both
    # before any parsing: omegaconf's resolution of chained interpolations is what hangs
    override_references = sum(yaml_references(o.split("=", 1)[1]) for o in overrides)
    if override_references > MAX_CONFIG_REFERENCES:
        raise ValueError(f"overrides use more than {MAX_CONFIG_REFERENCES} YAML aliases / ${{}} interpolations")
    layers = [OmegaConf.structured(schema)]
    if path is not None:
        layers.append(read_yaml_mapping(path, override_references))
    try:
        layers.append(OmegaConf.from_dotlist(list(overrides)))
        cfg = OmegaConf.to_object(OmegaConf.merge(*layers))
    except ConfigKeyError as exc:
        raise _unknown_key(exc) from None
    except OmegaConfBaseException as exc:
        raise ValueError(f"bad config value {_one_line(exc)}") from None
    if check is not None:
        check(cfg)
    return cfg


def load_train_config(path: str | Path | None, overrides: Sequence[str] = (), check_machine: bool = True) -> "TrainConfig":
    """The :class:`TrainConfig` of ``toolgym train``, validated (:func:`validate`).

    ``check_machine=False`` skips the model-path and device checks (to read a GPU recipe on a laptop).
    """
    return load_config(TrainConfig, path, overrides, check=lambda cfg: validate(cfg, check_machine=check_machine))


def config_yaml(cfg: Any) -> str:
    """A config dataclass as YAML (what ``--print-config`` prints)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def config_dict(cfg: Any) -> dict[str, Any]:
    """A config dataclass as plain JSON-able containers (summaries, checkpoints)."""
    return dataclasses.asdict(cfg)


def _is_mapping(value: Any) -> bool:
    return isinstance(value, Mapping)


def check_reward_names(reward: Any) -> None:
    """Every scheme or module name a ``reward`` section uses is registered: an unknown one is one
    ``ValueError`` line at load (the reward registry's lookups raise ``KeyError``, which the command
    line treats as a bug)."""
    from toolgym.rewards import runtime_needs

    try:
        runtime_needs(reward)
    except KeyError as exc:
        message = exc.args[0] if exc.args and isinstance(exc.args[0], str) else repr(exc)
        raise ValueError(f"reward: {message}") from None


LORA_SCALES = ("alpha", "lora_alpha")
LORA_DROPOUTS = ("dropout", "lora_dropout")


def check_lora_numbers(lora: Any, prefix: str) -> None:
    """A LoRA dict's numbers: each float finite (``alpha=.nan`` trained to all-NaN weights), the
    scale (``alpha`` / ``lora_alpha``) > 0 and the dropout in [0, 1). peft checks the field names."""
    import math

    if not isinstance(lora, dict):
        return
    for key, value in lora.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{prefix}.{key}={value!r}: must be a finite number")
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if key in LORA_SCALES and number:
            require(value > 0, f"{prefix}.{key}", value, "must be > 0 (the adapter's scale is alpha / r)")
        if key in LORA_DROPOUTS and number:
            require(0 <= value < 1, f"{prefix}.{key}", value, "must be in [0, 1)")


def validate(cfg: Any, check_machine: bool = True) -> None:
    """Range checks of every section (one ``ValueError`` line naming the key); with
    ``check_machine`` also that the model weights exist locally and the device exists."""
    t, g, s = cfg.train, cfg.grpo, cfg.sampling
    # each section's own checks (its __post_init__ runs them too; a field may be set after construction)
    for section in (cfg, cfg.model, cfg.env, s, t, g, cfg.eval, cfg.rollout):
        section.check()
    # what no one section can check alone
    require(t.max_context_tokens > s.max_new_tokens, "train.max_context_tokens", t.max_context_tokens,
          f"must exceed sampling.max_new_tokens ({s.max_new_tokens}) plus the prompt")
    check_reward_names(cfg.reward)
    constrained = cfg.model.constrained
    if constrained:
        require(s.top_p == 1.0 and s.top_k == 0, "model.constrained", constrained,
              "needs sampling.top_p=1.0 and sampling.top_k=0 (the trainer scores the full restricted distribution)")
    if g.lora:
        from toolgym.agents.hf_policy import lora_config

        lora_config(dict(g.lora))  # unknown peft fields fail here, not after the model loaded
    if check_machine:
        model_source(cfg.model)
        check_device(cfg.model.device)
