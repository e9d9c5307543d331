"""``precision`` of the ``toolgym fit-*`` commands: which dtype each value means, that bf16 autocast
reaches the matrix products inside its block and nothing outside it, that a bf16 training step stays close to float32,
and that a bad value is a one-line error before any data is read."""
import json

import pytest
import torch

import toolgym.agents.decoding as decoding
from toolgym.cli.main import main
from toolgym.fitting.common import FIT_PRECISIONS, fit_dtype, mixed_precision


def test_fit_dtype_of_each_precision(monkeypatch):
    assert fit_dtype("float32") is torch.float32 and fit_dtype("bfloat16") is torch.bfloat16
    monkeypatch.setattr(decoding, "cpu_has_bf16_matmul", lambda: True)
    assert fit_dtype("auto") is torch.bfloat16
    monkeypatch.setattr(decoding, "cpu_has_bf16_matmul", lambda: False)
    assert fit_dtype("auto") is torch.float32  # emulated bf16 is slower than float32: not chosen
    assert set(FIT_PRECISIONS) == {"float32", "bfloat16", "auto"}


@pytest.mark.parametrize("bad", ["bf16x", "fp16", "", "BFLOAT16", "float32 "])
def test_bad_precision_names_the_key(bad):
    with pytest.raises(ValueError, match="precision must be one of float32, bfloat16, auto"):
        fit_dtype(bad)


def test_mixed_precision_casts_matmuls_only_under_bf16():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    with mixed_precision("bfloat16"):
        assert (a @ b).dtype is torch.bfloat16
        assert torch.nn.functional.linear(a, b.T).dtype is torch.bfloat16
    with mixed_precision("float32"):
        assert (a @ b).dtype is torch.float32
    assert (a @ b).dtype is torch.float32  # nothing leaks out of the block


def test_bf16_training_step_keeps_float32_weights_and_tracks_float32():
    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    twin = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    twin.load_state_dict(layer.state_dict())
    x, y = torch.randn(16, 32), torch.randint(0, 2, (16, 1)).float()
    losses = []
    for model, precision in ((layer, "float32"), (twin, "bfloat16")):
        with mixed_precision(precision):
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        torch.optim.SGD(model.parameters(), lr=0.1).step()
        losses.append(float(loss))
        assert all(p.dtype is torch.float32 for p in model.parameters())
    assert losses[0] == pytest.approx(losses[1], abs=2e-2)  # bf16 has ~3 significant digits
    for p, q in zip(layer.parameters(), twin.parameters()):
        assert torch.allclose(p, q, atol=5e-3) and not torch.equal(p, q)


@pytest.mark.parametrize("command", ["fit-retriever", "fit-reranker", "fit-preference"])
def test_bad_precision_is_a_one_line_error_before_any_data(command, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    # The corpus path does not exist: a precision error must come first, so no data was read.
    cfg.write_text(f"corpus_path: {json.dumps(str(tmp_path / 'missing.jsonl'))}\n"
                   f"tasks_path: {json.dumps(str(tmp_path / 'missing_tasks.jsonl'))}\nprecision: half\n")
    assert main([command, str(cfg), "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "precision=" in err and "must be one of float32, bfloat16, auto" in err and "half" in err \
        and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # loads MiniLM and trains it for a few steps
def test_fit_reranker_trains_under_bf16(seal, tmp_path):
    from toolgym.retrieval.corpus import ToolCorpus

    tasks = [t for t in seal.tasks if len(t.gold) >= 2][:12]
    gold = {g for t in tasks for g in t.gold}
    tools = [seal.corpus[g] for g in sorted(gold)] + [t for t in seal.corpus.tools if t.id not in gold][:30]
    ToolCorpus(tools, name="tiny").save_jsonl(tmp_path / "corpus.jsonl")
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))
    cfg = tmp_path / "k.yaml"
    cfg.write_text(json.dumps({"corpus_path": str(tmp_path / "corpus.jsonl"), "tasks_path": str(tmp_path / "tasks.jsonl"),
                               "heldout_fraction": 0.25, "max_steps": 2, "candidates": 6, "point_batch_size": 8,
                               "stages": ["pointwise"], "max_length": 64, "progress": False, "precision": "bfloat16"}))
    out = tmp_path / "run"
    assert main(["fit-reranker", str(cfg), "--output-dir", str(out), "--budget-minutes", "0"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in rows if "loss" in r] and all(0 < r["loss"] < 10 for r in rows if "loss" in r)
    assert summary["config"]["precision"] == "bfloat16" and summary["stages"]["pointwise"]["steps"] == 2
    assert 0 <= summary["stages"]["pointwise"]["heldout"]["N@5"] <= 100


# -- the bf16 autocast switches of `toolgym sft` (train.bf16) and GRPO (grpo.autocast_bf16) -------------
@pytest.mark.parametrize("has_units", [True, False])
def test_bf16_auto_autocasts_only_where_the_cpu_has_bf16_matrix_units(monkeypatch, has_units):
    monkeypatch.setattr(decoding, "cpu_has_bf16_matmul", lambda: has_units)
    assert decoding.bf16_autocast("auto", "cpu") is has_units
    assert decoding.bf16_autocast(True, "cpu") is True and decoding.bf16_autocast(False, "cpu") is False


@pytest.mark.parametrize("bad", ["yes", "bf16", "", 1, 0.5])
def test_a_bf16_switch_other_than_true_false_auto_is_refused(bad):
    with pytest.raises(ValueError, match="grpo.autocast_bf16 must be true, false or auto"):
        decoding.bf16_autocast(bad, "cpu", "grpo.autocast_bf16")


def test_grpo_trainer_decides_auto_once_from_the_cpu(monkeypatch):
    from toolgym.trainers.grpo import GRPOTrainer

    model = torch.nn.Linear(2, 2)
    for has_units in (True, False):
        monkeypatch.setattr(decoding, "cpu_has_bf16_matmul", lambda: has_units)
        assert GRPOTrainer(model, {"autocast_bf16": "auto"}).autocast_bf16 is has_units


def test_the_configs_load_auto_and_refuse_a_typo(tmp_path):
    from toolgym.trainers.config import load_train_config
    from toolgym.trainers.sft import load_sft_config

    assert load_sft_config("configs/sft_toolsearch_multi.yaml").train.bf16 == "auto"
    assert load_train_config("configs/quickstart.yaml").grpo.autocast_bf16 == "auto"
    assert load_sft_config("configs/sft_quickstart.yaml", ["train.bf16=true"]).train.bf16 is True
    with pytest.raises(ValueError, match="train.bf16"):
        load_sft_config("configs/sft_quickstart.yaml", ["train.bf16=sometimes"])
    with pytest.raises(ValueError, match="grpo.autocast_bf16"):
        load_train_config("configs/quickstart.yaml", ["grpo.autocast_bf16=sometimes"])
