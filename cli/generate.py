"""``toolgym generate CONFIG [key=value ...]``: MagicSelector-style multi-turn dialogues.

Reads a YAML config (``configs/generate_*.yaml``, schema :class:`GenerateConfig`) with sections
``out_dir``, ``library`` (``{dataset: NAME}`` or ``{corpus: PATH}``), ``backend`` (``{name:
templates}``, ``{name: hf, model: ...}`` or ``{name: openai, base_url: ..., model: ...}``) and
``generator`` (the fields of :class:`toolgym.data.dialogue_generator.GeneratorConfig`). Writes ``corpus.jsonl``,
``tasks.jsonl``, ``traces.jsonl`` and ``stats.json`` to ``out_dir`` and prints the statistics.
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from toolgym.data.dialogue_generator import GeneratorConfig
from toolgym.trainers.config import config_yaml, load_config, require

BACKENDS = ("templates", "hf", "openai")


@dataclass
class LibraryConfig:
    """The tools dialogues are written over: at most one of ``dataset`` (any ``toolgym.data``
    dataset; neither: ``seal_tools``) or ``corpus`` (a JSONL of Tool records, named ``name``)."""

    dataset: Optional[str] = None
    corpus: Optional[str] = None
    name: Optional[str] = None

    def __post_init__(self) -> None:
        if self.dataset is not None and self.corpus is not None:
            raise ValueError(f"library must give exactly one of 'dataset' or 'corpus', got {library_spec(self)!r}")


@dataclass
class BackendConfig:
    """Who writes the utterances.

    Parameters:
        name (`str`, defaults to `"templates"`):
            ``templates`` (no model), ``hf`` (a local chat model: ``model``, ``dtype``, ``device``,
            ``max_new_tokens``, ``temperature``, ``top_p``) or ``openai`` (a served model:
            ``base_url``, ``model``, ``api_key``, ``temperature``, ``max_tokens``, ``timeout_s``).
    """

    name: str = "templates"
    model: Optional[str] = None
    dtype: Optional[str] = None
    device: Optional[str] = None
    max_new_tokens: int = 96
    temperature: float = 0.7
    top_p: float = 1.0
    base_url: Optional[str] = None
    api_key: Optional[str] = None
    max_tokens: int = 128
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        from toolgym.data.readers import check_finite_fields

        if self.name not in BACKENDS:
            raise ValueError(f"backend.name must be one of {list(BACKENDS)}, got {self.name!r}")
        if self.name != "templates" and not self.model:
            raise ValueError(f"backend {self.name!r} needs a 'model'")
        if self.name == "openai" and not self.base_url:
            raise ValueError("backend 'openai' needs a 'base_url'")
        check_finite_fields(self, "backend")
        require(self.max_new_tokens >= 1, "backend.max_new_tokens", self.max_new_tokens, "must be >= 1")
        require(self.temperature >= 0, "backend.temperature", self.temperature, "must be >= 0 (0 = greedy)")
        require(0 < self.top_p <= 1, "backend.top_p", self.top_p, "must be in (0, 1]")
        require(self.max_tokens >= 1, "backend.max_tokens", self.max_tokens, "must be >= 1")
        require(self.timeout_s > 0, "backend.timeout_s", self.timeout_s, "must be > 0")


@dataclass
class GenerateConfig:
    """Everything ``toolgym generate`` reads; ``--print-config`` shows it merged. ``generator``
    holds fields of :class:`toolgym.data.dialogue_generator.GeneratorConfig` (checked by its
    ``from_dict``); kept a plain mapping so a dict-valued field given (``dialogues: {train: 8}``)
    replaces that field's default whole instead of being merged into it."""

    out_dir: str = "runs/generated"
    library: LibraryConfig = field(default_factory=LibraryConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    generator: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        GeneratorConfig.from_dict(self.generator)  # its keys and values, each checked


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config (configs/generate_seal_tools.yaml); key=value pairs after it "
                                       "override it, e.g. generator.seed=3 out_dir=/tmp/dlg")
    parser.add_argument("--print-config", action="store_true", help="print the merged config and exit")


def load_generate_config(path: str | Path | None, overrides: Sequence[str] = ()) -> GenerateConfig:
    """``GenerateConfig`` <- YAML file <- ``key=value`` overrides; each section checks itself when
    it is built (one line naming a bad value)."""
    return load_config(GenerateConfig, path, overrides)


def library_spec(lib: LibraryConfig) -> dict[str, str]:
    """The ``library`` section as :func:`~toolgym.data.dialogue_generator.tool_library` takes it
    (neither ``dataset`` nor ``corpus``: Seal-Tools)."""
    spec = {k: v for k, v in dataclasses.asdict(lib).items() if v is not None}
    return spec if ("dataset" in spec or "corpus" in spec) else {"dataset": "seal_tools", **spec}


def build_writer_policy(backend: BackendConfig) -> Any:
    """The chat policy of a non-template backend (imported here so templates never load torch)."""
    if backend.name == "hf":
        from toolgym.agents.hf_policy import HFChatPolicy

        sampling = {"max_new_tokens": backend.max_new_tokens, "temperature": backend.temperature,
                    "top_p": backend.top_p, "stop_strings": []}
        return HFChatPolicy.from_pretrained(backend.model, sampling=sampling, dtype=backend.dtype, device=backend.device)
    if backend.name == "openai":
        from toolgym.agents.openai_policy import OpenAICompatPolicy

        return OpenAICompatPolicy(backend.base_url, backend.model, api_key=backend.api_key,
                                  temperature=backend.temperature, max_tokens=backend.max_tokens, stop=(),
                                  timeout_s=backend.timeout_s)
    return None


def print_stats(stats: dict[str, Any], seconds: float) -> None:
    print(f"dialogues: {stats['dialogues']}  tasks: {stats['tasks']}  ({seconds:.1f} s)")
    t, k = stats["turns_per_dialogue"], stats["tools_per_turn"]
    print(f"turns per dialogue: mean {t['mean']}, max {t['max']}, histogram {t['histogram']}")
    print(f"tools per turn:     mean {k['mean']}, max {k['max']}, histogram {k['histogram']}")
    print(f"context decisions:  {stats['contexts']}")
    print("scenario labels:")
    for label, n in stats["labels"].items():
        print(f"  {label:30s} {n:6d}")
    print("states: " + ", ".join(f"{s} {n}" for s, n in stats["states"].items()))


def run(args: argparse.Namespace) -> int:
    from toolgym.agents.dialogue_writer import ChatPolicyWriter
    from toolgym.data.dialogue_generator import (
        DialogueGenerator,
        TemplateWriter,
        generation_stats,
        tool_library,
        write_generated,
    )

    cfg = load_generate_config(args.config, getattr(args, "overrides", None) or [])  # bad values fail before loading
    if args.print_config:
        print(config_yaml(cfg))
        return 0
    corpus = tool_library(library_spec(cfg.library))
    policy = build_writer_policy(cfg.backend)
    writer = ChatPolicyWriter(policy) if policy is not None else TemplateWriter()
    start = time.perf_counter()
    dialogues = DialogueGenerator(corpus, GeneratorConfig.from_dict(cfg.generator), writer).generate()
    seconds = time.perf_counter() - start
    paths = write_generated(cfg.out_dir, corpus, dialogues)
    print(f"corpus {corpus.name!r}: {len(corpus)} tools; backend {writer.name}")
    print_stats(generation_stats(dialogues), seconds)
    if isinstance(writer, ChatPolicyWriter):
        print(f"policy calls: {writer.calls}, fell back to the template draft: {writer.fallbacks}")
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0
