"""``toolgym generate CONFIG [key=value ...]``: MagicSelector-style multi-turn dialogues.

Reads an omegaconf YAML (``configs/generate_*.yaml``) with sections ``out_dir``, ``library``
(``{dataset: NAME}`` or ``{corpus: PATH}``), ``backend`` (``{name: templates}``, ``{name: hf,
model: ...}`` or ``{name: openai, base_url: ..., model: ...}``) and ``generator`` (the fields of
:class:`toolgym.data.dialogue_generator.GeneratorConfig`). Writes ``corpus.jsonl``,
``tasks.jsonl``, ``traces.jsonl`` and ``stats.json`` to ``out_dir`` and prints the statistics.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Sequence

DEFAULTS: dict[str, Any] = {
    "out_dir": "runs/generated",
    "library": {"dataset": "seal_tools"},
    "backend": {"name": "templates"},
    "generator": {},
}
BACKENDS = {
    "templates": set(),
    "hf": {"model", "dtype", "device", "max_new_tokens", "temperature", "top_p"},
    "openai": {"base_url", "model", "api_key", "temperature", "max_tokens", "timeout_s"},
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config (configs/generate_seal_tools.yaml)")
    parser.add_argument("settings", nargs="*", metavar="KEY=VALUE",
                        help="overrides in omegaconf dot-list form, e.g. generator.seed=3 out_dir=/tmp/dlg")
    parser.add_argument("--print-config", action="store_true", help="print the merged config and exit")


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """DEFAULTS <- YAML file <- ``key=value`` overrides, as plain containers; unknown sections are an error."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not Path(path).exists():
        raise FileNotFoundError(f"config file not found: {path}")
    bad = [o for o in overrides if "=" not in o or o.startswith("-")]
    if bad:
        raise ValueError(f"overrides must look like key=value, got {bad}")
    try:
        cfg = OmegaConf.merge(OmegaConf.create(DEFAULTS), OmegaConf.load(path), OmegaConf.from_dotlist(list(overrides)))
        plain = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        raise ValueError(f"{path}: {exc}") from None
    unknown = sorted(set(plain) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown config section(s) {unknown}; known: {sorted(DEFAULTS)}")
    backend = dict(plain["backend"] or {})
    name = backend.get("name")
    if name not in BACKENDS:
        raise ValueError(f"backend.name must be one of {sorted(BACKENDS)}, got {name!r}")
    extra = sorted(set(backend) - {"name"} - BACKENDS[name])
    if extra:
        raise ValueError(f"unknown backend key(s) for {name!r}: {extra}; known: {sorted(BACKENDS[name])}")
    if name != "templates" and not backend.get("model"):
        raise ValueError(f"backend {name!r} needs a 'model'")
    if name == "openai" and not backend.get("base_url"):
        raise ValueError("backend 'openai' needs a 'base_url'")
    return plain


def build_writer_policy(backend: dict[str, Any]) -> Any:
    """The chat policy of a non-template backend (imported here so templates never load torch)."""
    name = backend["name"]
    if name == "hf":
        from toolgym.agents.hf_policy import HFChatPolicy

        sampling = {"max_new_tokens": int(backend.get("max_new_tokens", 96)),
                    "temperature": float(backend.get("temperature", 0.7)),
                    "top_p": float(backend.get("top_p", 1.0)), "stop_strings": []}
        return HFChatPolicy.from_pretrained(backend["model"], sampling=sampling, dtype=backend.get("dtype"),
                                            device=backend.get("device"))
    if name == "openai":
        from toolgym.agents.openai_policy import OpenAICompatPolicy

        return OpenAICompatPolicy(backend["base_url"], backend["model"], api_key=backend.get("api_key"),
                                  temperature=float(backend.get("temperature", 0.7)),
                                  max_tokens=int(backend.get("max_tokens", 128)), stop=(),
                                  timeout_s=float(backend.get("timeout_s", 60.0)))
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
    from toolgym.data.dialogue_generator import (
        ChatPolicyWriter,
        DialogueGenerator,
        GeneratorConfig,
        TemplateWriter,
        generation_stats,
        tool_library,
        write_generated,
    )

    cfg = load_config(args.config, args.settings)
    if args.print_config:
        print(json.dumps(cfg, indent=2))
        return 0
    config = GeneratorConfig.from_dict(cfg["generator"])  # bad values fail before any loading
    corpus = tool_library(cfg["library"])
    policy = build_writer_policy(cfg["backend"])
    writer = ChatPolicyWriter(policy) if policy is not None else TemplateWriter()
    start = time.perf_counter()
    dialogues = DialogueGenerator(corpus, config, writer).generate()
    seconds = time.perf_counter() - start
    paths = write_generated(cfg["out_dir"], corpus, dialogues)
    print(f"corpus {corpus.name!r}: {len(corpus)} tools; backend {writer.name}")
    print_stats(generation_stats(dialogues), seconds)
    if isinstance(writer, ChatPolicyWriter):
        print(f"policy calls: {writer.calls}, fell back to the template draft: {writer.fallbacks}")
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0
