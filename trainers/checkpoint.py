"""The tensor checkpoints of a local GRPO run and the planning of a resume.

A checkpoint is written to a temporary folder and renamed into place, so a run killed while
saving leaves the previous checkpoint intact. ``step`` in ``state.json`` is the number of
completed steps: resuming runs step ``step`` next, so no step is lost or repeated.

Resume safety lives here too: every ``.pt`` file loads with ``torch.load(weights_only=True)``
(a crafted pickle cannot run code), :func:`plan_resume` finds the newest intact checkpoint and
what the resume does to the metrics, and :func:`check_resume_config` says which settings of a
resumed run differ from the checkpoint's where they must not. The other files of a run have
their own modules: atomic JSON in :mod:`toolgym.data.atomic`, ``metrics.jsonl`` in
:mod:`toolgym.trainers.metrics`, the run-folder lock in :mod:`toolgym.trainers.run_lock`, and
:func:`~toolgym.trainers.policy_loading.load_policy` in :mod:`toolgym.trainers.policy_loading`.
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import shutil
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.data.atomic import is_no_space, no_space_error, read_json, refuse_non_regular
from toolgym.trainers.metrics import MetricsPlan, plan_metrics

STATE_FILE = "state.json"
WEIGHTS_FILE = "trainable.pt"
OPTIMIZER_FILE = "optimizer.pt"
STEP_FOLDER = re.compile(r"step_(\d+)")


def trainable_state(model: Any) -> dict[str, Any]:
    """The parameters that training changes (the LoRA adapter, or every weight without LoRA)."""
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(run_dir: str | Path, step: int, model: Any, optimizer: Any, state: dict[str, Any], keep: int = 1) -> Path:
    """Write ``run_dir/checkpoints/step_<step>`` atomically and keep only the newest ``keep``.

    Every file is written into ``.tmp_step_<step>`` and fsynced before the folder is renamed into
    place. A failed write (a full disk, an exception) removes the temporary folder and keeps the
    older checkpoints; a full disk is one ``OSError`` line saying "no space left". A Ctrl-C during
    the write is held until the checkpoint is in place, then raised: interrupted inside
    ``torch.save`` it surfaced as torch's zip-writer ``RuntimeError`` instead of ``KeyboardInterrupt``."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp_step_{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    with sigint_deferred():
        _write_checkpoint(tmp, final, model, optimizer, {**state, "step": step})
    _fsync_folder(root)
    for old in list_checkpoints(run_dir)[:-max(keep, 1)]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _write_checkpoint(tmp: Path, final: Path, model: Any, optimizer: Any, state: dict[str, Any]) -> None:
    import torch

    try:
        tmp.mkdir()
        _save_synced(lambda f: torch.save(trainable_state(model), f), tmp / WEIGHTS_FILE)
        if optimizer is not None:
            _save_synced(lambda f: torch.save(optimizer.state_dict(), f), tmp / OPTIMIZER_FILE)
        text = json.dumps(state, indent=2, default=str)
        _save_synced(lambda f: f.write(text.encode("utf-8")), tmp / STATE_FILE)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # never a .tmp_step_* left behind
        if is_no_space(exc):
            raise no_space_error(final, "checkpoint", "the older checkpoints are kept") from None
        raise


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold SIGINT for the block and deliver it to the previous handler afterwards.

    Only the main thread can set signal handlers; elsewhere the block runs unguarded. An ignored
    SIGINT stays ignored; the default disposition becomes ``KeyboardInterrupt`` as Python's own."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    if previous is None:  # a handler installed from C: Python cannot reinstall it, take the default
        previous = signal.default_int_handler
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if not pending or previous is signal.SIG_IGN:
        return
    if callable(previous):  # Python's default_int_handler raises KeyboardInterrupt itself
        previous(signal.SIGINT, None)
    else:  # SIG_DFL
        raise KeyboardInterrupt


def _save_synced(write: Any, path: Path) -> None:
    with open(path, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def _fsync_folder(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (best effort: not every file system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _step_folders(run_dir: str | Path) -> list[tuple[int, Path]]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_FOLDER.fullmatch(p.name))]
    return sorted(found, key=lambda item: item[0])


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run (``state.json`` and ``trainable.pt`` both there), oldest first
    by step number."""
    return [p for _, p in _step_folders(run_dir) if (p / STATE_FILE).exists() and (p / WEIGHTS_FILE).exists()]


def incomplete_checkpoints(run_dir: str | Path) -> list[Path]:
    """Step folders with a ``state.json`` but no ``trainable.pt`` (a damaged checkpoint), oldest first."""
    return [p for _, p in _step_folders(run_dir) if (p / STATE_FILE).exists() and not (p / WEIGHTS_FILE).exists()]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def read_state(checkpoint: str | Path) -> dict[str, Any]:
    path = Path(checkpoint) / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{checkpoint} is not a toolgym checkpoint (no {STATE_FILE})")
    state = read_json(path)
    step = state.get("step") if isinstance(state, dict) else None
    if not isinstance(step, int) or isinstance(step, bool):
        raise ValueError(f"{path}: not a toolgym checkpoint state (needs an integer 'step')")
    if step < 0:
        raise ValueError(f"{path}: step {step} is negative; the checkpoint is damaged")
    folder = STEP_FOLDER.fullmatch(Path(checkpoint).name)
    if folder and int(folder.group(1)) != step:
        raise ValueError(f"{path}: says step {step} but its folder is {Path(checkpoint).name}; "
                         "the checkpoint is damaged or was moved: fix or delete it")
    return state


def load_tensors(path: str | Path) -> Any:
    """``torch.load`` with ``weights_only=True``: tensors and plain containers only, never code.

    A file holding anything else (a crafted pickle) or a damaged file is a ``ValueError`` naming it.
    """
    import torch

    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: missing; the checkpoint is incomplete")
    refuse_non_regular(path, "file", follow_symlinks=True)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: refused to load: it holds objects other than tensors and plain containers "
                         f"(torch.load weights_only=True: {first})") from None
    except (RuntimeError, EOFError, OSError) as exc:  # torch's zip reader on a truncated or foreign file
        # (a truncated trainable.pt gave a bare "[Errno 22] Invalid argument", naming no file)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: damaged or not a torch checkpoint file ({first})") from None


def tensor_file_problem(path: str | Path) -> str | None:
    """Why the ``.pt`` file at ``path`` cannot be a whole ``torch.save`` file, or ``None``.

    A cheap check that reads only the zip directory at the file's end: a file cut short (a kill
    or a full disk during an older, non-atomic save; a copy that stopped) has none, or names
    members past its end. Content damage inside is caught when it loads (:func:`load_tensors`)."""
    import zipfile

    path = Path(path)
    try:
        size = path.stat().st_size
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.header_offset + info.compress_size > size:
                    return f"{path.name} is cut short ({size} bytes; {info.filename} reaches past its end)"
    except FileNotFoundError:
        return f"no {path.name}"
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        return f"{path.name} is damaged or cut short ({str(exc).strip() or type(exc).__name__})"
    return None


def checkpoint_problem(checkpoint: str | Path) -> str | None:
    """Why a step folder cannot be resumed from (its weights or optimiser file damaged), or ``None``."""
    folder = Path(checkpoint)
    problem = tensor_file_problem(folder / WEIGHTS_FILE)
    if problem is None and (folder / OPTIMIZER_FILE).exists():
        problem = tensor_file_problem(folder / OPTIMIZER_FILE)
    return problem


def load_weights(checkpoint: str | Path, model: Any) -> None:
    """Load the trainable weights into ``model``; every saved tensor must find its parameter, same shape."""
    import torch

    path = Path(checkpoint) / WEIGHTS_FILE
    saved = load_tensors(path)
    if not isinstance(saved, dict):
        raise ValueError(f"{path}: expected a name -> tensor dict, got {type(saved).__name__}")
    params = dict(model.named_parameters())
    missing = [n for n in saved if n not in params]
    if missing:
        raise ValueError(f"{checkpoint}: {len(missing)} saved tensors have no parameter in the model (e.g. {missing[0]}); "
                         "was it trained with a different model or LoRA setting?")
    for name, tensor in saved.items():
        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != tuple(params[name].shape):
            shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"{path}: {name} has shape {shape} but the model's is {tuple(params[name].shape)}; "
                             "was it trained with a different model or LoRA setting?")
    with torch.no_grad():
        for name, tensor in saved.items():
            params[name].copy_(tensor.to(params[name].device, params[name].dtype))


def load_optimizer(checkpoint: str | Path, optimizer: Any) -> None:
    """Restore the optimiser state (loaded with ``weights_only=True``) if the checkpoint has one."""
    path = Path(checkpoint) / OPTIMIZER_FILE
    if not path.exists():
        return
    state = load_tensors(path)
    try:
        optimizer.load_state_dict(state)
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: does not fit this run's optimiser ({exc})") from None


@dataclass
class ResumePlan:
    """Where a resume starts (``checkpoint`` None: step 0) and what it does to the metrics."""

    checkpoint: Path | None
    step: int
    metrics: MetricsPlan
    skipped: list[Path] = field(default_factory=list)  # newer step folders that are incomplete or damaged
    reasons: dict[Path, str] = field(default_factory=dict)  # why each was skipped


def plan_resume(run_dir: str | Path, steps: int | None = None) -> ResumePlan:
    """Check everything a resume of ``run_dir`` relies on, writing nothing: the newest intact
    checkpoint (newer incomplete ones, e.g. without ``trainable.pt``, or damaged ones, e.g. a
    ``trainable.pt`` cut short, are skipped and named: the run falls back to the one before), its
    state against its folder (:func:`read_state`) and against ``train.steps``, and the metrics
    lines (:func:`plan_metrics`). A bad state or metrics file raises ``ValueError`` before any
    file is touched."""
    run_dir = Path(run_dir)
    reasons = {p: f"no {WEIGHTS_FILE} (an incomplete checkpoint)" for p in incomplete_checkpoints(run_dir)}
    latest = None
    for folder in reversed(list_checkpoints(run_dir)):
        problem = checkpoint_problem(folder)
        if problem is None:
            latest = folder
            break
        reasons[folder] = f"{problem} (a damaged checkpoint)"
    number = lambda p: int(STEP_FOLDER.fullmatch(p.name).group(1))  # noqa: E731
    skipped = sorted((p for p in reasons if latest is None or number(p) > number(latest)), key=number)
    if latest is None and skipped:
        raise ValueError(f"{skipped[-1]}: {reasons[skipped[-1]]}, and no earlier complete checkpoint to fall back "
                         "to: delete it to start again from step 0")
    step = int(read_state(latest)["step"]) if latest is not None else 0
    if steps is not None and step > steps:
        raise ValueError(f"{latest}: the checkpoint is at step {step}, past train.steps={steps}: "
                         "raise train.steps to train on, or choose another run_dir")
    return ResumePlan(latest, step, plan_metrics(run_dir / "metrics.jsonl", step), skipped,
                      {p: reasons[p] for p in skipped})


def apply_optimizer_settings(optimizer: Any, settings: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Set ``settings`` (``lr``, ``weight_decay``) on every param group of a restored optimiser,
    which otherwise keeps the checkpoint's values while ``state.json`` records the new ones.
    Returns ``{name: (checkpoint's, now)}`` for the values that changed."""
    changed: dict[str, tuple[float, float]] = {}
    for group in optimizer.param_groups:
        for name, value in settings.items():
            if name in group and group[name] != value:
                changed.setdefault(name, (group[name], value))
                group[name] = value
    return changed


# -- resuming with a changed config ---------------------------------------------------------
# Settings a resumed run must share with its checkpoint: those that fix the trainable weights'
# shapes (model, LoRA rank and targets) or the task order (seed, env and its training data,
# tasks per step). Everything else may change; ``train.steps`` typically grows.
RESUME_MUST_MATCH = ("model.name", "model.init_from", "seed", "env.id", "env.kwargs", "env.train_kwargs",
                     "train.tasks_per_step", "train.max_tasks", "grpo.lora")
# LoRA settings that scale the update but leave every tensor's shape alone.
LORA_SHAPE_FREE = frozenset({"alpha", "lora_alpha", "dropout", "lora_dropout"})
_UNSET = "<unset>"


def _get(cfg: Any, dotted: str) -> Any:
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _UNSET
        node = node[part]
    return node


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key, sub in value.items():
            _flatten(f"{prefix}.{key}", sub, out)
    else:
        out[prefix] = list(value) if isinstance(value, tuple) else value


def _resume_view(cfg: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in RESUME_MUST_MATCH:
        value = _get(cfg, key)
        if key == "grpo.lora" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in LORA_SHAPE_FREE}
        _flatten(key, value, out)
    return out


def check_resume_config(saved: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted keys (under :data:`RESUME_MUST_MATCH`) whose values differ between a checkpoint's
    config and the config of the run resuming from it; empty when resuming is safe."""
    a, b = _resume_view(saved), _resume_view(new)
    return sorted(k for k in set(a) | set(b) if a.get(k, _UNSET) != b.get(k, _UNSET))


def check_resume(checkpoint: str | Path, config: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's state, after checking ``config`` may resume from it (``ValueError`` saying what differs)."""
    state = read_state(checkpoint)
    saved = state.get("config")
    if not isinstance(saved, dict):
        raise ValueError(f"{Path(checkpoint) / STATE_FILE}: has no 'config' to compare the resumed run with")
    differ = check_resume_config(saved, config)
    if differ:
        a, b = _resume_view(saved), _resume_view(config)
        what = "; ".join(f"{k}: {json.dumps(a.get(k, _UNSET))} in the checkpoint, {json.dumps(b.get(k, _UNSET))} now"
                         for k in differ)
        raise ValueError(f"cannot resume from {checkpoint}: {what} (these fix the weights' shapes or the task "
                         "order; resume with the checkpoint's values, or start a new run_dir)")
    return state


def __getattr__(name: str) -> Any:
    """``load_policy`` moved to :mod:`toolgym.trainers.policy_loading`; the benchmark scripts still
    import it from here (imported lazily: that module imports this one)."""
    if name == "load_policy":
        from toolgym.trainers.policy_loading import load_policy

        return load_policy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
