"""Checks at the door: every config dataclass checks its own values in ``__post_init__`` (one place),
unknown config keys have their own error type, and a ``KeyError`` from code is a bug, not a user error."""
import ast
import importlib
from pathlib import Path

import pytest

from toolgym.cli.main import main
from toolgym.trainers.config import (EnvConfig, RewardConfig, TrainConfig, UnknownConfigKeyError, load_config,
                                     load_train_config, strict_dataclass, validate)

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agents", "cli", "data", "envs", "evaluation", "fitting", "integrations", "retrieval", "rewards", "trainers")


def _config_classes():
    """Every ``@dataclass`` named ``*Config`` (and ``FitSource``, a config list entry) in the package."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in tree.body:
                decorated = any("dataclass" in ast.unparse(d) for d in getattr(node, "decorator_list", []))
                if isinstance(node, ast.ClassDef) and decorated and (node.name.endswith("Config") or node.name == "FitSource"):
                    module = "toolgym." + ".".join(path.relative_to(ROOT).with_suffix("").parts)
                    found.append((module, node.name))
    return found


def test_every_config_dataclass_checks_itself_in_post_init():
    classes = _config_classes()
    names = {name for _, name in classes}
    assert {"SamplingConfig", "ModelConfig", "SFTTrainConfig", "FitRetrieverConfig", "GeneratorConfig",
            "BackendConfig", "IndexConfig", "FitSource"} <= names, names
    missing = [f"{module}.{name}" for module, name in classes
               if getattr(getattr(importlib.import_module(module), name), "__post_init__", None) is None]
    assert not missing, f"config dataclasses without __post_init__ checks: {missing}"


# -- hand-picked bad values, each one ValueError line naming the key -------------------------------
def _raises(make, key):
    with pytest.raises(ValueError) as err:
        make()
    assert key in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_sampling_config_of_the_issue_raises():
    from toolgym.agents.policy import SamplingConfig

    with pytest.raises(ValueError, match="sampling"):
        SamplingConfig(temperature=-3, top_p=7.0, top_k=-2, max_new_tokens=0)


@pytest.mark.parametrize("kwargs, key", [
    ({"temperature": -3}, "sampling.temperature"), ({"temperature": float("nan")}, "sampling.temperature"),
    ({"top_p": 7.0}, "sampling.top_p"), ({"top_p": 0.0}, "sampling.top_p"), ({"top_k": -2}, "sampling.top_k"),
    ({"top_k": 1.5}, "sampling.top_k"), ({"max_new_tokens": 0}, "sampling.max_new_tokens"),
    ({"precision": "fp8"}, "sampling.precision"), ({"engine": "vllm"}, "sampling.engine"),
])
def test_sampling_config_bad_values(kwargs, key):
    from toolgym.agents.policy import SamplingConfig

    _raises(lambda: SamplingConfig(**kwargs), key)


def test_sampling_config_good_edges_pass():
    import numpy as np

    from toolgym.agents.policy import SamplingConfig

    SamplingConfig(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=1)  # greedy, the edges
    SamplingConfig(temperature=np.float32(0.7), max_new_tokens=np.int64(8))  # numpy numbers are numbers


@pytest.mark.parametrize("kwargs, key", [
    ({"dtype": "int8"}, "model.dtype"), ({"constrained": "json"}, "model.constrained"), ({"name": " "}, "model.name"),
])
def test_model_config_bad_values(kwargs, key):
    from toolgym.agents.model import ModelConfig

    _raises(lambda: ModelConfig(**kwargs), key)


def test_model_config_constrained_modes_match_the_constrained_policy():
    from toolgym.agents import constrained, model

    assert model.CONSTRAINED_MODES == constrained.CONSTRAINED_MODES


@pytest.mark.parametrize("make, key", [
    (lambda: EnvConfig(id=""), "env.id"), (lambda: EnvConfig(kwargs=[1]), "env.kwargs"),
    (lambda: RewardConfig(name=""), "reward.name"), (lambda: RewardConfig(options=[]), "reward.options"),
    (lambda: RewardConfig(modules="esm"), "reward.modules"),
])
def test_env_and_reward_sections(make, key):
    _raises(make, key)


def test_validate_reruns_each_sections_check_and_names_unknown_rewards():
    cfg = TrainConfig()
    cfg.sampling.top_k = -1  # set after construction: validate runs the section's own check
    _raises(lambda: validate(cfg, check_machine=False), "sampling.top_k")
    cfg = TrainConfig()
    cfg.model.dtype = "int4"
    _raises(lambda: validate(cfg, check_machine=False), "model.dtype")
    _raises(lambda: load_train_config(None, ["reward.name=no_such_reward"], check_machine=False), "no_such_reward")
    _raises(lambda: load_train_config(None, ["reward.modules=[{module: nope, weight: 1}]"], check_machine=False), "nope")


@pytest.mark.parametrize("override, key", [
    ("train.epochs=0", "train.epochs"), ("train.max_steps=0", "train.max_steps"), ("train.lr=-1", "train.lr"),
    ("train.batch_size=0", "train.batch_size"), ("train.grad_accum=0", "train.grad_accum"),
    ("train.warmup_ratio=1.5", "train.warmup_ratio"), ("train.save_steps=0", "train.save_steps"),
    ("train.keep_checkpoints=0", "train.keep_checkpoints"), ("train.time_budget_s=0", "train.time_budget_s"),
    ("data.max_tokens=0", "data.max_tokens"), ("data.max_episodes=0", "data.max_episodes"),
    ("data.min_reward=.nan", "data.min_reward"), ("seed=-1", "seed"), ("lora={r: 2, alpha: -1}", "lora.alpha"),
    ("model.dtype=int8", "model.dtype"),
])
def test_sft_sections_bad_values(override, key):
    from toolgym.trainers.sft import load_sft_config

    _raises(lambda: load_sft_config(None, [override]), key)


@pytest.mark.parametrize("schema, kwargs, key", [
    ("retriever", {"heldout_fraction": 1.0}, "heldout_fraction"), ("retriever", {"train_limit": -1}, "train_limit"),
    ("retriever", {"seed": -1}, "seed"), ("retriever", {"precision": "fp8"}, "precision"),
    ("retriever", {"budget_minutes": float("inf")}, "budget_minutes"), ("retriever", {"batch_size": 0}, "batch_size"),
    ("retriever", {"scale": 0.0}, "scale"), ("retriever", {"first_negatives": "bm25"}, "first_negatives"),
    ("retriever", {"dev_fraction": 1.0}, "dev_fraction"), ("retriever", {"eval_ks": [0]}, "eval_ks"),
    ("retriever", {"hybrid_bm25_weights": [1.5]}, "hybrid_bm25_weights"),
    ("reranker", {"stages": ["pointwise", "magic"]}, "unknown reranker stage"),
    ("reranker", {"stage_budget_shares": [0.5, 0.5]}, "stage_budget_shares"),
    ("reranker", {"candidates": 0}, "candidates"), ("reranker", {"list_size": 1}, "list_size"),
    ("reranker", {"dev_fraction": -0.1}, "dev_fraction"), ("reranker", {"first_stage_weights": [-1.0]}, "first_stage_weights"),
    ("preference", {"batch_size": 0}, "batch_size"), ("preference", {"corruptions_per_task": -1}, "corruptions_per_task"),
    ("preference", {"warmup_ratio": 2.0}, "warmup_ratio"),
])
def test_fit_configs_bad_values(schema, kwargs, key):
    from toolgym.fitting.preference import FitPreferenceConfig
    from toolgym.fitting.reranker import FitRerankerConfig
    from toolgym.fitting.retriever import FitRetrieverConfig

    cls = {"retriever": FitRetrieverConfig, "reranker": FitRerankerConfig, "preference": FitPreferenceConfig}[schema]
    _raises(lambda: cls(**kwargs), key)


@pytest.mark.parametrize("kwargs, key", [
    ({"dataset": "api_bank", "weight": 0}, "weight"), ({}, "exactly one"),
    ({"dataset": "api_bank", "tasks_path": "t.jsonl"}, "exactly one"),
    ({"dataset": "api_bank", "heldout_fraction": 1.0}, "heldout_fraction"),
])
def test_fit_source_bad_values(kwargs, key):
    from toolgym.fitting.common import FitSource

    _raises(lambda: FitSource(**kwargs), key)


def test_fit_source_in_a_config_file_is_checked_at_load():
    from toolgym.fitting.retriever import FitRetrieverConfig

    _raises(lambda: load_config(FitRetrieverConfig, None, ["sources=[{dataset: api_bank, weight: -1}]"]), "weight")


@pytest.mark.parametrize("make, key", [
    (lambda B: B(name="gpt"), "backend.name"), (lambda B: B(name="hf"), "model"),
    (lambda B: B(name="openai", model="m"), "base_url"), (lambda B: B(temperature=-1.0), "backend.temperature"),
    (lambda B: B(top_p=0.0), "backend.top_p"), (lambda B: B(timeout_s=0.0), "backend.timeout_s"),
    (lambda B: B(max_tokens=0), "backend.max_tokens"),
])
def test_generate_backend_bad_values(make, key):
    from toolgym.cli.generate import BackendConfig

    _raises(lambda: make(BackendConfig), key)


def test_generate_library_and_generator_check_themselves():
    from toolgym.cli.generate import GenerateConfig, LibraryConfig
    from toolgym.data.dialogue_generator import GeneratorConfig

    _raises(lambda: LibraryConfig(dataset="seal_tools", corpus="x.jsonl"), "exactly one")
    _raises(lambda: GeneratorConfig(max_turns=0), "max_turns")
    _raises(lambda: GeneratorConfig(p0=1.5), "p0")
    _raises(lambda: GenerateConfig(generator={"min_turns": 0}), "min_turns")


# -- unknown keys: their own error type, listing the valid keys --------------------------------------
def test_unknown_config_keys_have_their_own_error_listing_the_valid_keys():
    from toolgym.data.dialogue_generator import GeneratorConfig
    from toolgym.fitting.retriever import FitRetrieverConfig
    from toolgym.trainers.config import GRPOConfig
    from toolgym.trainers.sft import load_sft_config

    cases = [
        (lambda: load_train_config(None, ["train.stepz=3"], check_machine=False), "train.stepz", "tasks_per_step"),
        (lambda: load_train_config(None, ["stepz=3"], check_machine=False), "stepz", "run_dir"),
        (lambda: GRPOConfig.from_dict({"learning_rate": 1e-3}), "learning_rate", "clip_eps"),
        (lambda: strict_dataclass(TrainConfig, {"train": {"stepz": 1}}, "train"), "train.stepz", "group_size"),
        (lambda: load_sft_config(None, ["optimizer.lr=1"]), "optimizer", "data"),
        (lambda: load_config(FitRetrieverConfig, None, ["sources=[{datset: x}]"]), "datset", "tasks_path"),
        (lambda: GeneratorConfig.from_dict({"colour": "red"}), "colour", "max_turns"),
    ]
    for make, key, valid in cases:
        with pytest.raises(UnknownConfigKeyError) as err:
            make()
        assert isinstance(err.value, ValueError) and err.value.key == key and valid in err.value.valid, err.value
        assert key in str(err.value) and f"valid keys: " in str(err.value) and valid in str(err.value)


def test_unknown_key_on_the_command_line_is_one_line_with_the_valid_keys(capsys):
    assert main(["train", str(ROOT / "configs" / "quickstart.yaml"), "train.stepz=3", "--print-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "train.stepz" in err and "valid keys" in err and "group_size" in err


# -- KeyError from code is a bug; unknown names are ValueErrors ---------------------------------------
def test_a_key_error_from_code_keeps_its_traceback(monkeypatch):
    import toolgym.cli.envs as envs_cmd

    def buggy(args):
        return {}["missing"]  # a KeyError bug inside a command

    monkeypatch.setattr(envs_cmd, "run", buggy)
    with pytest.raises(KeyError, match="missing"):
        main(["envs"])


def test_unknown_env_id_is_a_value_error_that_is_still_a_key_error():
    from toolgym.envs.registry import UnknownEnvIdError, require_env_id
    from toolgym.evaluation.evaluate import make_envs

    assert require_env_id("toolgym/ToolSearch-v0") == "toolgym/ToolSearch-v0"
    for call in (lambda: require_env_id("toolgym/ToolSearch-v9"), lambda: make_envs("toolgym/Nope-v0", {}, 1)):
        with pytest.raises(UnknownEnvIdError) as err:
            call()
        assert isinstance(err.value, ValueError) and isinstance(err.value, KeyError)
        assert str(err.value).startswith("unknown env id 'toolgym/"), str(err.value)  # not KeyError's quoted repr
    with pytest.raises(UnknownEnvIdError, match="did you mean 'toolgym/ToolSearch-v0'"):
        require_env_id("toolgym/ToolSearch-v9")


@pytest.mark.parametrize("argv", [
    ["demos", "toolgym/Nope-v0", "--agent", "reference", "--out", "OUT/d.jsonl"],
    ["export-hf", "toolgym/Nope-v0", "--out", "OUT/hf"],
])
def test_unknown_env_id_in_other_commands_is_one_line(tmp_path, capsys, argv):
    argv = [a.replace("OUT", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown env id 'toolgym/Nope-v0'" in err and "Traceback" not in err, err


def test_unknown_reward_in_a_train_config_is_one_line(tmp_path, capsys):
    assert main(["train", str(ROOT / "configs" / "quickstart.yaml"), "reward.name=no_such_reward",
                 f"run_dir={tmp_path / 'run'}", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown reward" in err and "no_such_reward" in err, err
    assert not (tmp_path / "run").exists()


# -- the index: one IndexConfig, checked once, which build_index passes through ----------------------
@pytest.mark.parametrize("kwargs, key", [
    ({"method": "sparse"}, "retrieval method"), ({"cache_size": -1}, "cache_size"),
    ({"encode_batch_size": 0}, "encode_batch_size"), ({"encode_threads": 1.5}, "encode_threads"),
    ({"identifiers": "camel"}, "identifiers"), ({"hybrid_fusion": "max"}, "hybrid_fusion"),
    ({"bm25_weight": 1.5}, "bm25_weight"), ({"bm25_weight": float("nan")}, "bm25_weight"),
])
def test_index_config_bad_values(kwargs, key):
    from toolgym.retrieval import IndexConfig, build_index
    from toolgym.retrieval.corpus import Tool, ToolCorpus

    corpus = ToolCorpus([Tool("a", "weather", "search the weather"), Tool("b", "flights", "book a flight")])
    _raises(lambda: IndexConfig(**kwargs), key)
    _raises(lambda: build_index(corpus, **kwargs), key)  # the keyword arguments users pass still work


def test_build_index_passes_one_index_config_through():
    from toolgym.retrieval import IndexConfig, ToolIndex, build_index
    from toolgym.retrieval.corpus import Tool, ToolCorpus

    corpus = ToolCorpus([Tool("a", "weather", "search the weather forecast"), Tool("b", "flights", "book a flight ticket")])
    by_keywords = build_index(corpus, "bm25", cache_size=0, identifiers="whole", parameters=False)
    by_config = build_index(corpus, config=IndexConfig(cache_size=0, identifiers="whole", parameters=False))
    direct = ToolIndex(corpus, "bm25", cache_size=0, identifiers="whole", parameters=False)
    assert by_keywords.config == by_config.config == direct.config
    assert by_keywords.config == IndexConfig(method="bm25", cache_size=0, identifiers="whole", parameters=False)
    assert (by_keywords.cache_size, by_keywords.identifiers, by_keywords.parameters) == (0, "whole", False)
    assert by_keywords.search("weather", k=2).ids == by_config.search("weather", k=2).ids
    assert by_keywords.search("weather", k=2).ids[0] == "a"
    # keyword arguments override a given config; an unknown one is a TypeError, as for any function
    assert build_index(corpus, config=IndexConfig(cache_size=5), cache_size=7).config.cache_size == 7
    with pytest.raises(TypeError, match="nope"):
        build_index(corpus, nope=1)
    assert build_index(corpus).config == IndexConfig()  # the defaults are IndexConfig's
