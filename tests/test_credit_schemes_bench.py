"""benchmarks/credit_schemes.py, the per-run files: pairwise math, resume, fingerprints, turn types, report."""
import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest

import benchmarks.credit_schemes as cs
from toolgym.data.records import SearchEvent, Task, Trajectory

ROOT = Path(__file__).resolve().parent.parent

FP = "sha256:" + "a" * 64


def _rows(f1s, srecall=None):
    return [{"task_id": f"t{i}", "f1": f, "srecall": (srecall or f1s)[i], "match": 0.0, "invalid_rate": 0.0,
             "search_turns": 1.0} for i, f in enumerate(f1s)]


def _mean(rows):
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k != "task_id"}


def _run_file(scheme, seed, warm, final, fingerprint=FP, settings=None):
    warm_rows, final_rows = _rows(warm), _rows(final)
    return {"format": 2, "env": "toolsearch_multi", "env_id": "toolgym/ToolSearch-v0", "scheme": scheme, "seed": seed,
            "settings": {**(settings or {"warm_start": "W", "steps": 3, "eval_every": 3, "eval_tasks": 3,
                                         "tasks_per_step": 4, "group_size": 8, "overrides": []}),
                         "scheme": scheme, "seed": seed},
            "warm_start_fingerprint": fingerprint, "task_set": None,
            "warm": {"mean": _mean(warm_rows), "rows": warm_rows},
            "points": [{"step": 0, "mean": _mean(warm_rows), "rows": warm_rows},
                       {"step": 3, "mean": _mean(final_rows), "rows": final_rows}],
            "train": [{"step": 0, "reward/esm/zero_var": 1.0}, {"step": 1, "reward/esm/zero_var": 0.0}],
            "credit_nonzero_share": {"esm": 0.5}}


def test_pairwise_difference_pools_seeds_per_task_and_keeps_the_seed_spread_apart():
    # A seeds 0, 1 over 3 tasks: [1, .5, 0], [0, .5, 1] -> per-task mean [.5, .5, .5]
    # B seeds 0, 1:            [0, 0, 0],  [0, .5, .5] -> per-task mean [0, .25, .25]
    # d = [.5, .25, .25]: mean 1/3, sd = sqrt(((1/6)^2 + 2 (1/12)^2) / 2) = sqrt(1/48), se = sd / sqrt(3) = 1/12
    # per seed: A−B = .5 − 0 = .5 and .5 − 1/3 = 1/6; their sd = (1/3) / sqrt(2)
    got = cs.paired_difference_over_seeds({0: [1, .5, 0], 1: [0, .5, 1]}, {0: [0, 0, 0], 1: [0, .5, .5], 2: [1, 1, 1]})
    assert got["seeds"] == [0, 1]  # seed 2 only B ran: left out
    assert got["diff"] == pytest.approx(1 / 3) and got["se"] == pytest.approx(1 / 12)
    assert got["per_seed"] == pytest.approx([0.5, 1 / 6]) and got["seed_sd"] == pytest.approx((1 / 3) / math.sqrt(2))
    assert got["exceeds_2se"]  # 1/3 > 2/12
    with pytest.raises(ValueError, match="no seed in common"):
        cs.paired_difference_over_seeds({0: [1.0]}, {1: [1.0]})


def test_pairwise_lists_each_scheme_against_the_warm_start_then_every_pair():
    runs = {"toolsearcher": [_run_file("toolsearcher", 0, [0, 0, 0], [1, 0, 0])],
            "grpo_f1": [_run_file("grpo_f1", 0, [0, 0, 0], [0, 0, 0])]}
    got = cs.pairwise(runs, ["f1"])
    assert [(p["a"], p["b"]) for p in got] == [("toolsearcher", "warm start"), ("grpo_f1", "warm start"),
                                               ("toolsearcher", "grpo_f1")]
    assert got[0]["f1"]["diff"] == pytest.approx(1 / 3) and got[2]["f1"]["diff"] == pytest.approx(1 / 3)
    runs["grpo_f1"][0]["points"][-1]["rows"] = runs["grpo_f1"][0]["points"][-1]["rows"][::-1]
    with pytest.raises(ValueError, match="other tasks"):
        cs.pairwise(runs, ["f1"])


def test_pairwise_leaves_out_pairs_no_seed_trained_and_names_them():
    # esm_only ran seed 0, +mean seed 1 (the others' runs missing): no pair to take, and the report says so
    runs = {"toolsearcher": [_run_file("toolsearcher", s, [0, 0, 0], [1, 0, 0]) for s in (0, 1)],
            "esm_only": [_run_file("esm_only", 0, [0, 0, 0], [0, 0, 0])],
            "toolsearcher+mean": [_run_file("toolsearcher+mean", 1, [0, 0, 0], [1, 1, 0])]}
    got = [(p["a"], p["b"]) for p in cs.pairwise(runs, ["f1"])]
    assert ("toolsearcher", "esm_only") in got and ("toolsearcher", "toolsearcher+mean") in got
    assert ("esm_only", "toolsearcher+mean") not in got
    assert cs.unpaired_pairs(runs) == [("esm_only", "toolsearcher+mean")]


def _args(tmp_path, **kw):
    base = dict(warm_start="W", steps=3, eval_every=3, eval_tasks=3, eval_batch=20, tasks_per_step=4, group_size=8,
                overrides=[], out=str(tmp_path / "runs"), no_progress=True, results_dir=str(tmp_path / "results"))
    return argparse.Namespace(**{**base, **kw})


def test_a_committed_run_file_is_resumed_without_training_and_another_warm_start_is_refused(tmp_path):
    args = _args(tmp_path)
    settings = {**cs.env_settings("toolsearch_multi", args), "scheme": "grpo_f1", "seed": 1}
    path = cs.run_file("toolsearch_multi", "grpo_f1", 1, Path(args.results_dir))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**_run_file("grpo_f1", 1, [0], [1]), "settings": settings, "marker": "committed"}))
    # a fresh machine: no run dir at all, only the committed file
    got = cs.run_scheme("toolsearch_multi", "grpo_f1", 1, args, warm={"fingerprint": FP})
    assert got["marker"] == "committed" and not (tmp_path / "runs").exists()
    with pytest.raises(SystemExit, match="another warm start"):
        cs.run_scheme("toolsearch_multi", "grpo_f1", 1, args, warm={"fingerprint": "sha256:" + "b" * 64})
    with pytest.raises(SystemExit, match=r"other settings \(differs in \['steps'\]\)"):
        cs.run_scheme("toolsearch_multi", "grpo_f1", 1, _args(tmp_path, steps=4), warm={"fingerprint": FP})


def test_a_trained_run_whose_committed_file_is_missing_gets_it_from_run_json_without_training(tmp_path):
    args = _args(tmp_path)
    settings = {**cs.env_settings("toolsearch_multi", args), "scheme": "grpo_f1", "seed": 0}
    stored = _run_file("grpo_f1", 0, [0, 0], [1, 0])
    run_dir = tmp_path / "runs" / "toolsearch_multi" / "grpo_f1_seed0"
    run_dir.mkdir(parents=True)
    result = {"env": "toolsearch_multi", "scheme": "grpo_f1", "seed": 0, "settings": settings,
              "points": stored["points"], "train_seconds": 12.0, "host": {"host": "elsewhere"}}
    (run_dir / "run.json").write_text(json.dumps(result))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 0, "reward": 0.5, "reward/esm/zero_var": 1.0}) + "\n")
    warm = {"fingerprint": FP, "mean": stored["warm"]["mean"], "rows": stored["warm"]["rows"], "task_set": None}
    cs.run_scheme("toolsearch_multi", "grpo_f1", 0, args, warm)  # no training: the run is finished
    written = json.loads(cs.run_file("toolsearch_multi", "grpo_f1", 0, Path(args.results_dir)).read_text())
    assert written["points"] == stored["points"] and written["host"] == {"host": "elsewhere"}
    assert written["train"] == [{"step": 0, "reward": 0.5, "reward/esm/zero_var": 1.0}]
    assert written["warm_start_fingerprint"] == FP and written["settings"] == settings


def test_report_refuses_to_pool_run_files_of_two_warm_starts(tmp_path):
    (tmp_path / "toolsearch_multi").mkdir()
    for scheme, fp in (("toolsearcher", FP), ("grpo_f1", "sha256:" + "b" * 64)):
        (tmp_path / "toolsearch_multi" / f"{scheme}_seed0.json").write_text(json.dumps(_run_file(scheme, 0, [0], [1], fp)))
    with pytest.raises(SystemExit, match="2 warm starts"):
        cs.load_run_files(tmp_path)


def test_the_fingerprint_hashes_tensors_not_the_file(tmp_path):
    import torch
    from safetensors.torch import save_file

    a, b = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), torch.ones(4)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "three").mkdir()
    save_file({"a": a, "b": b}, tmp_path / "one" / "model.safetensors", metadata={"format": "pt"})
    save_file({"b": b, "a": a}, tmp_path / "two" / "model.safetensors")  # other order, no metadata
    save_file({"a": a, "b": b + 1}, tmp_path / "three" / "model.safetensors")
    one = cs.weights_fingerprint(tmp_path / "one")
    assert one.startswith("sha256:") and len(one) == 7 + 64
    assert cs.weights_fingerprint(tmp_path / "two") == one
    assert cs.weights_fingerprint(tmp_path / "three") != one
    with pytest.raises(FileNotFoundError):
        cs.weights_fingerprint(tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "model.safetensors").write_bytes((2 ** 40).to_bytes(8, "little"))
    with pytest.raises(ValueError, match="header"):
        cs.weights_fingerprint(tmp_path / "bad")


def _traj(events, turns, submit=None, terminated="submit"):
    return Trajectory(task_id="t", events=[SearchEvent(turn=t, query=q, category=None, results=r) for t, q, r in events],
                      selection=submit, terminated_by=terminated, num_turns=turns)


def test_turn_types():
    gold = frozenset({"g1", "g2"})
    t = _traj([(0, "send fax", ["x", "g1"]), (1, "Send  FAX", ["g1"]), (2, "weather", ["y"]),
               (3, "ship", ["g1", "z"]), (5, "order", ["g2"])], 7, ["g1", "g2"])
    # turn 4: no event and not the last turn -> rejected; turn 6: the submit, every gold seen by then
    assert cs.classify_turns(t, gold) == ["first_discovery", "repeated_search", "search_nothing", "repeated_search",
                                          "rejected", "first_discovery", "submit_all_gold_seen"]
    assert cs.classify_turns(_traj([(0, "fax", ["g1"])], 2, ["g1"]), gold) == ["first_discovery", "submit_gold_missing"]
    # ran out of turns: the last turn is not a submit
    assert cs.classify_turns(_traj([(0, "fax", ["g1"])], 2, None, "max_turns"), gold) == ["first_discovery", "rejected"]


def test_credit_by_turn_type_scores_the_same_rollouts_under_each_scheme():
    task = Task(id="t", query="q", gold=frozenset({"g1"}))
    good = _traj([(0, "fax", ["g1"])], 2, ["g1"])  # finds and submits the gold: F1 1
    bad = _traj([(0, "weather", ["y"])], 2, ["y"])  # finds nothing, submits a wrong tool: F1 0
    got = cs.credit_by_turn_type([(task, [good, bad])], ["grpo_f1", "esm_only"])
    assert got["turns"]["first_discovery"] == 1 and got["turns"]["search_nothing"] == 1
    f1 = got["schemes"]["grpo_f1"]["by_type"]
    # outcome GRPO: the same signed advantage on every turn of a rollout
    assert f1["first_discovery"]["mean"] > 0 and f1["submit_all_gold_seen"]["mean"] == f1["first_discovery"]["mean"]
    assert f1["search_nothing"]["mean"] < 0 and f1["submit_gold_missing"]["negative"] == 1.0
    esm = got["schemes"]["esm_only"]["by_type"]
    assert esm["first_discovery"]["mean"] > 0 and esm["search_nothing"]["zero"] == 1.0  # ESM never pushes down


def test_report_rebuilds_the_tables_from_the_files_alone(tmp_path):
    (tmp_path / "toolsearch_multi").mkdir()
    finals = {("toolsearcher", 0): [1, 1, 0], ("toolsearcher", 1): [1, 0, 0], ("grpo_f1", 0): [0, 0, 0],
              ("grpo_f1", 1): [0, 1, 0]}
    for (scheme, seed), final in finals.items():
        (tmp_path / "toolsearch_multi" / f"{scheme}_seed{seed}.json").write_text(
            json.dumps(_run_file(scheme, seed, [0, 0, 0], final)))
    body = cs.report(tmp_path, write=False, png_dir=tmp_path)
    row = next(line for line in body.splitlines() if line.startswith("| `toolsearcher` − `grpo_f1`"))
    # per task: toolsearcher [1, .5, 0], grpo_f1 [0, .5, 0] -> d [1, 0, 0]: 1/3 ± (1/sqrt(3))/sqrt(3) = 1/3
    # per seed 2/3 and 0: mean 1/3 ± seed se (2/3)/√2/√2 = 1/3, t 1, df 1 (no ✔); the task-paired se beside it
    assert "+0.333 ± 0.333 (t 1.00, df 1) | 0.333 |" in row and "+0.667 / +0.000" in row and "✔" not in row
    # the last cell: seeds that detect the paper's 0.119 at this pair's seed sd √2/3 (seeds_to_detect: 126)
    assert "seeds for 0.119 |" in body and row.endswith("| 126 |")
    scheme_row = next(line for line in body.splitlines() if line.startswith("| `toolsearcher` | 0, 1"))
    assert "0.000 → 0.500" in scheme_row and "esm 0.50" in scheme_row
    assert (tmp_path / "toolsearch_multi.png").exists()


def test_a_run_folder_of_other_settings_is_refused(tmp_path):
    args = _args(tmp_path)
    run_dir = Path(args.out) / "toolsearch" / "grpo_f1_seed0"
    run_dir.mkdir(parents=True)
    settings = {**cs.env_settings("toolsearch", args), "scheme": "grpo_f1", "seed": 0}
    (run_dir / "run.json").write_text(json.dumps({"settings": settings, "points": [], "marker": "cached"}))
    assert cs.run_scheme("toolsearch", "grpo_f1", 0, args, warm={})["marker"] == "cached"
    with pytest.raises(SystemExit, match="other settings"):  # same dir, one more step: not silently mixed
        cs.run_scheme("toolsearch", "grpo_f1", 0, _args(tmp_path, steps=4), warm={})


def test_only_the_terms_a_scheme_weights_are_reported():
    shares = {"esm": 0.75, "tca": 0.1, "monitors": 1.0, "outcome": 0.5}
    assert cs.weighted_terms("tca_only", shares) == {"tca": 0.1, "outcome": 0.5}  # ESM is logged at weight 0
    assert cs.weighted_terms("toolsearcher", shares) == {"esm": 0.75, "tca": 0.1, "outcome": 0.5}


def test_nonzero_credit_shares_read_a_one_module_rewards_plain_zero_var():
    """1 − mean zero_var over the steps, per term; a one-module reward logs ``reward/zero_var`` (term ""),
    which was once read as always non-zero (1.0) and is now recomputed from a run file's rows."""
    one = [{"reward/zero_var": 0.5}, {"reward/zero_var": 1.0}]
    assert cs.credit_nonzero_share(one) == {"": 0.25}
    two = [{"reward/esm/zero_var": 0.25, "reward/tca/zero_var": 1.0}, {"reward/esm/zero_var": 0.75, "reward/tca/zero_var": 0.5}]
    assert cs.credit_nonzero_share(two) == {"esm": 0.5, "tca": 0.25}
    assert cs.run_nonzero_share({"train": one, "credit_nonzero_share": {"": 1.0}}) == {"": 0.25}
    assert cs.run_nonzero_share({"train": two, "credit_nonzero_share": {"esm": 0.1}}) == {"esm": 0.1}  # as stored
    assert cs.run_nonzero_share({"credit_nonzero_share": {"": 0.8}}) == {"": 0.8}  # no rows: as stored


def test_a_decomposition_env_is_reported_on_its_own_metrics_without_turn_types(tmp_path):
    (tmp_path / "decompose").mkdir()
    for scheme, final in (("counterfactual", [0.5, 0.0]), ("grpo_match", [0.0, 0.0])):
        run = _run_file(scheme, 0, [0, 0], [0, 0])
        run["env"], run["env_id"] = "decompose", "toolgym/Decompose-Dialogue-v0"
        for point, values in zip(run["points"], ([0.0, 0.0], final)):
            point["rows"] = [{"task_id": f"t{i}", "reward": v, "c10": v, "ndcg5": v, "invalid_rate": 0.0, "subtasks": 2.0}
                             for i, v in enumerate(values)]
            point["mean"] = _mean(point["rows"])
        run["warm"] = {"rows": run["points"][0]["rows"], "mean": run["points"][0]["mean"]}
        run["credit_nonzero_share"] = {"": 0.8}  # a one-module reward logs plain reward/zero_var
        run["train"] = [{"step": 0, "reward/zero_var": 0.2}]  # the share is read from these rows: 1 − 0.2
        (tmp_path / "decompose" / f"{scheme}_seed0.json").write_text(json.dumps(run))
    (tmp_path / "decompose" / "replay_rollouts.jsonl").write_text("")  # turn types are tool-search only: not read
    body = cs.report(tmp_path, write=False, png_dir=tmp_path)
    row = next(line for line in body.splitlines() if line.startswith("| `counterfactual` − `grpo_match`"))
    assert "| +0.250 (1 seed) | 0.250 |" in row  # R_cf per task [.5, 0] - [0, 0]: one seed, task-paired se .25
    scheme_row = next(line for line in body.splitlines() if line.startswith("| `counterfactual` | 0"))
    assert scheme_row.rstrip(" |").endswith("counterfactual 0.80")  # the term is named after the reward
    assert "R_cf" in body and "per turn type" not in body
    assert "seeds for 0.119" not in body  # the paper's effect is a ToolSearch F1 effect
    assert "Largest R_cf gain over the warm start: `counterfactual`, +0.250 (1 seed) over seeds [0]" in body


def test_no_best_scheme_is_named_when_no_gain_is_positive(tmp_path):
    (tmp_path / "toolsearch_multi").mkdir()
    for scheme, final in (("tca_only", [0, 0, 0]), ("grpo_f1", [0, 0, 0])):
        (tmp_path / "toolsearch_multi" / f"{scheme}_seed0.json").write_text(
            json.dumps(_run_file(scheme, 0, [0, 0, 0], final)))
    body = cs.report(tmp_path, write=False, png_dir=tmp_path)
    assert "Largest" not in body and "No scheme's F1 gain over the warm start is positive" in body


def test_a_variant_run_trains_its_base_scheme_with_the_curriculum_on_the_training_env_only():
    from benchmarks.learning import grpo_config

    assert cs.split_run_name("toolsearcher+curriculum") == ("toolsearcher", "curriculum")
    assert cs.split_run_name("grpo_f1") == ("grpo_f1", None)
    with pytest.raises(ValueError, match="unknown run variant 'warmup'"):
        cs.split_run_name("toolsearcher+warmup")
    cfg = grpo_config("toolsearch_multi", {"name": "toolsearcher", "options": {}}, "W", Path("r"), budget_s=None)
    before_eval = dict(cfg.env.eval_kwargs)
    cs.apply_variant(cfg, "curriculum", "toolsearch_multi")
    assert cfg.env.train_kwargs.split == "train"  # merged into, not replaced
    assert cfg.env.train_kwargs.curriculum.constrained_mode == "required"
    assert cfg.env.train_kwargs.curriculum.required_fraction == 0.3
    assert dict(cfg.env.eval_kwargs) == before_eval  # evaluation searches globally, as for every scheme
    assert cfg.env.train_kwargs.curriculum.after_mode == "off"  # then the env's own search: no category
    assert cs.variant_options("curriculum", "toolsearch_multi") == cs.VARIANTS["curriculum"]  # older run files still pair
    # where the env's search takes an optional category (a warm start that names categories), the
    # constrained phase gives way to that optional search, the schema the evaluation shows
    cat = grpo_config("toolsearch_multi_cat", {"name": "toolsearcher", "options": {}}, "W", Path("r"), budget_s=None)
    assert cat.env.kwargs.category_mode == "optional"  # train and evaluation envs alike
    cs.apply_variant(cat, "curriculum", "toolsearch_multi_cat")
    assert cat.env.train_kwargs.curriculum.after_mode == "optional"


def test_a_variant_pairs_with_its_base_scheme_and_a_changed_variant_is_refused(tmp_path):
    (tmp_path / "toolsearch_multi").mkdir()
    for scheme, final in (("toolsearcher", [1, 0, 0]), ("toolsearcher+curriculum", [1, 1, 0])):
        run = _run_file(scheme, 0, [0, 0, 0], final)
        if "+" in scheme:
            run["settings"]["variant"] = cs.VARIANTS["curriculum"]  # differs from its base in this key only
        (tmp_path / "toolsearch_multi" / f"{scheme}_seed0.json").write_text(json.dumps(run))
    body = cs.report(tmp_path, write=False, png_dir=tmp_path)
    row = next(line for line in body.splitlines() if line.startswith("| `toolsearcher` − `toolsearcher+curriculum`"))
    assert "| -0.333 (1 seed) | 0.333 |" in row  # per task [1, 0, 0] - [1, 1, 0]
    # a committed curriculum run of another schedule is not resumed as this one
    args = _args(tmp_path, results_dir=str(tmp_path))
    path = cs.run_file("toolsearch_multi", "toolsearcher+curriculum", 0, tmp_path)
    stored = json.loads(path.read_text())
    stored["settings"] = {**cs.env_settings("toolsearch_multi", args), "scheme": "toolsearcher+curriculum", "seed": 0,
                          "variant": {"train_kwargs": {"curriculum": {"required_fraction": 0.5}}}}
    path.write_text(json.dumps(stored))
    with pytest.raises(SystemExit, match=r"differs in \['variant'\]"):
        cs.run_scheme("toolsearch_multi", "toolsearcher+curriculum", 0, args, warm={"fingerprint": FP})


def test_the_learning_doc_blocks_are_what_report_writes_from_the_committed_run_files(tmp_path):
    """Each committed results folder's block of docs/learning.md, regenerated from its run files alone
    (figure paths aside: here the figures go to a temporary folder)."""
    import re

    doc = cs.LEARNING_DOC.read_text()
    folders = [d for d in sorted(cs.RESULTS.glob("credit_schemes*")) if d.is_dir() and list(d.glob("*/*_seed*.json"))]
    assert cs.RUN_FILES in folders

    def without_figures(text):
        return [line for line in text.strip().splitlines() if not line.startswith("![")]

    for folder in folders:
        section = cs.doc_section(folder)
        block = re.search(rf"<!-- {section}:start -->\n_[^\n]*_\n\n(.*?)\n<!-- {section}:end -->", doc, re.S)
        assert block, f"docs/learning.md has no {section} block for {folder}"
        body = cs.report(folder, write=False, png_dir=tmp_path / folder.name)
        assert without_figures(body) == without_figures(block.group(1)), folder
    # the pooled block: its folders are the ones its JSON names, in that order
    pooled = json.loads((cs.RESULTS / f"{cs.POOLED_SECTION}.json").read_text())
    block = re.search(rf"<!-- {cs.POOLED_SECTION}:start -->\n_[^\n]*_\n\n(.*?)\n<!-- {cs.POOLED_SECTION}:end -->", doc, re.S)
    assert block and len(pooled["warm_starts"]) >= 2
    body = cs.pooled_report([cs.RESULTS.parent.parent / w["folder"] for w in pooled["warm_starts"].values()], write=False)
    assert body.strip() == block.group(1).strip()


def test_another_results_folder_writes_its_own_doc_block(tmp_path):
    assert cs.doc_section(cs.RUN_FILES) == "credit_schemes_runs"
    assert cs.doc_section(tmp_path / "credit_schemes_10steps") == "credit_schemes_runs_credit_schemes_10steps"
    doc = tmp_path / "learning.md"
    doc.write_text("# x\n\n<!-- credit_schemes_runs:start -->\nkept\n<!-- credit_schemes_runs:end -->\n")
    cs.write_doc_section("new body", doc, section="credit_schemes_runs_b", command="--report --results-dir b")
    cs.write_doc_section("newer body", doc, section="credit_schemes_runs_b", command="--report --results-dir b")
    text = doc.read_text()
    assert "kept" in text and "new body" not in text and text.count("newer body") == 1
    assert "`python -m benchmarks.credit_schemes --report --results-dir b`" in text


def test_seed_level_difference_on_hand_numbers():
    # per-seed differences .1, .05, .12: mean .09, sd = sqrt((.01² + .04² + .03²) / 2) = sqrt(.0013) = .036056
    got = cs.seed_level([0.1, 0.05, 0.12])
    assert got["mean"] == pytest.approx(0.09) and got["sd"] == pytest.approx(math.sqrt(0.0013))
    assert got["se"] == pytest.approx(math.sqrt(0.0013) / math.sqrt(3)) and got["df"] == 2
    assert got["t"] == pytest.approx(0.09 / got["se"]) and got["clears"]  # .09 > 2 × .0208
    # detectable with 80 % power at df 2: (t_.975 + t_.80) · se = (4.3027 + 1.0607) · .020817
    assert got["mde"] == pytest.approx((4.302653 + 1.060660) * got["se"], rel=1e-4)
    one = cs.seed_level([0.2])
    assert one["se"] is None and not one["clears"] and one["mde"] is None
    flat = cs.seed_level([0.1, -0.1])  # mean 0: never clears
    assert flat["mean"] == 0 and not flat["clears"]
    alike = cs.seed_level([-0.033, -0.033, -0.033])  # three seeds that ended alike: one model, no seed spread
    assert alike["se"] == 0 and alike["t"] is None and not alike["clears"]
    assert cs._seed_pm(alike) == "-0.033 on every seed (no seed spread: the seeds ended alike)"


def test_seeds_to_detect_grows_with_the_seed_spread():
    # sd .1 against .119: n = 7 gives (2.447 + .906) · .1 / √7 = .1267 > .119; n = 8 gives (2.365 + .896) · .1 / √8 = .1153
    assert cs.seeds_to_detect(0.119, 0.1) == 8
    assert cs.seeds_to_detect(0.119, 0.0) == 2
    assert cs.seeds_to_detect(0.001, 1.0, most=50) is None
    assert cs.seeds_to_detect(0.119, 0.2) > cs.seeds_to_detect(0.119, 0.1)


def test_pairwise_carries_the_seed_level_figure():
    got = cs.paired_difference_over_seeds({0: [1, .5, 0], 1: [0, .5, 1]}, {0: [0, 0, 0], 1: [0, .5, .5]})
    sl = got["seed_level"]
    assert sl["n"] == 2 and sl["mean"] == pytest.approx(1 / 3)  # per seed .5 and 1/6
    assert sl["se"] == pytest.approx((1 / 3) / math.sqrt(2) / math.sqrt(2))
    assert not sl["clears"]  # 1/3 < 2 × 1/6: the task-paired se (1/12) would have cleared it
    assert got["exceeds_2se"]


def test_degenerate_arms_are_named_with_their_cause():
    base = {"toolsearcher": [_run_file("toolsearcher", s, [0, 0, 0], [1, 0, 0]) for s in (0, 1)],
            "esm_only": [_run_file("esm_only", s, [0, 0, 0], [1, 0, 0]) for s in (0, 1)],
            "tca_only": [_run_file("tca_only", s, [0, 0, 0], [0, 0, 0]) for s in (0, 1)],
            "grpo_f1": [_run_file("grpo_f1", s, [0, 0, 0], [0, 1, 0]) for s in (0, 1)]}
    for r in base["toolsearcher"] + base["esm_only"]:
        r["credit_nonzero_share"] = {"esm": 0.5, "tca": 0.0}
    for r in base["tca_only"]:
        r["credit_nonzero_share"] = {"esm": 0.5, "tca": 0.0}
    got = {(d["a"], d["b"]): d["cause"] for d in cs.degenerate_arms(base, ["f1", "srecall"])}
    assert ("esm_only", "toolsearcher") in got and "tca" in got[("esm_only", "toolsearcher")]
    assert ("tca_only", "the warm start") in got and "no weighted credit term" in got[("tca_only", "the warm start")]
    assert not any("grpo_f1" in key for key in got)  # it differs from every other arm
    base["grpo_f1"][1]["points"][-1]["rows"] = _rows([1, 0, 0])  # equal to toolsearcher on one seed only
    assert not any("grpo_f1" in key for d in [cs.degenerate_arms(base, ["f1"])] for key in [(x["a"], x["b"]) for x in d])


def test_run_plan_is_seed_major_with_per_scheme_seed_counts():
    plan = cs.run_plan({"toolsearch_multi": ["toolsearcher", "esm_only"]}, [0, 1, 2], cs.seed_counts(["esm_only=2"]))
    assert plan == [("toolsearch_multi", "toolsearcher", 0), ("toolsearch_multi", "esm_only", 0),
                    ("toolsearch_multi", "toolsearcher", 1), ("toolsearch_multi", "esm_only", 1),
                    ("toolsearch_multi", "toolsearcher", 2)]
    for bad in (["esm_only"], ["esm_only=0"], ["=3"], ["esm_only=x"]):
        with pytest.raises(ValueError, match="SCHEME=N"):
            cs.seed_counts(bad)


def test_mean_variant_sets_the_esm_aggregate_and_nothing_else():
    from benchmarks import learning

    cfg = learning.grpo_config("toolsearch_multi",
                               {"name": "toolsearcher", "options": {}}, "W", Path("r"), None)
    before = cfg.env.train_kwargs
    cs.apply_variant(cfg, cs.split_run_name("toolsearcher+mean")[1], "toolsearch_multi")
    assert dict(cfg.reward.options) == {"aggregate": "mean"} and cfg.reward.name == "toolsearcher"
    assert cfg.env.train_kwargs == before


def test_commit_file_commits_one_file_and_leaves_others(tmp_path):
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True)  # noqa: E731
    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (repo / "run.json").write_text("{}")
    (repo / "other.txt").write_text("not mine")
    assert cs.commit_file(repo / "run.json", "credit_schemes: a run", root=repo)
    assert git("log", "--format=%s").stdout.strip() == "credit_schemes: a run"
    assert git("status", "--porcelain").stdout.strip() == "?? other.txt"
    assert not cs.commit_file(repo / "missing.json", "nothing", root=repo, attempts=2)  # git refuses: a warning


def test_a_mean_aggregate_arm_equal_to_its_max_arm_names_the_multi_tool_discoveries():
    base = {"toolsearcher": [_run_file("toolsearcher", 0, [0, 0, 0], [1, 0, 0])],
            "toolsearcher+mean": [_run_file("toolsearcher+mean", 0, [0, 0, 0], [1, 0, 0])]}
    for r in base["toolsearcher"] + base["toolsearcher+mean"]:
        r["train"] = [{"step": 0, "reward/esm/multi_tool_discovery_share": 0.1},
                      {"step": 1, "reward/esm/multi_tool_discovery_share": 0.3}]
    (got,) = cs.degenerate_arms(base, ["f1"])
    assert "first finds ≥ 2 gold tools: 20.0% of the training discovery events" in got["cause"]
    kept = cs.train_rows([{"step": 0, "reward/esm/multi_tool_discovery_share": 0.25, "reward/esm/other": 1.0}])
    assert kept == [{"step": 0, "reward/esm/multi_tool_discovery_share": 0.25}]


def test_the_mixture_decompose_env_trains_on_training_parts_and_retrieves_with_the_given_model(tmp_path, monkeypatch):
    """``--decompose-env mixture --decompose-retriever MODEL``: training and evaluation read one entry."""
    from benchmarks.learning import grpo_config

    monkeypatch.setitem(cs.ENVS, "mixture", dict(cs.ENVS["mixture"]))  # restored after the test
    model = tmp_path / "model"
    model.mkdir()
    args = argparse.Namespace(decompose_env="mixture", decompose_eval_split=None, decompose_retriever=str(model))
    assert cs.set_decompose_env(args) == "mixture"
    kwargs = cs.ENVS["mixture"]["kwargs"]
    assert kwargs == {"k": 10, "retriever": "hybrid", "retriever_options": {"model": str(model)}}
    cfg = grpo_config("mixture", {"name": "counterfactual", "options": {}}, "W", Path("r"), budget_s=None)
    assert cfg.env.id == "toolgym/Decompose-Mixture-v0" and cfg.env.kwargs.retriever_options.model == str(model)
    assert cfg.env.train_kwargs["split"] == "train" and cs.ENVS["mixture"]["eval_split"] == "heldout"
    settings = cs.env_settings("mixture", argparse.Namespace(**{k: None for k in cs.SETTING_KEYS}))
    assert settings["env_kwargs"]["retriever_options"]["model"] == str(model)  # a run of another model is refused
    with pytest.raises(ValueError, match="no such model folder"):
        cs.set_decompose_env(argparse.Namespace(decompose_env="mixture", decompose_eval_split=None,
                                                decompose_retriever=str(tmp_path / "missing")))


def test_decompose_unseen_only_trains_where_the_retriever_never_trained(tmp_path, monkeypatch):
    monkeypatch.setitem(cs.ENVS, "mixture", dict(cs.ENVS["mixture"]))
    monkeypatch.setitem(cs.ENVS, "decompose", dict(cs.ENVS["decompose"]))
    model = tmp_path / "model"
    model.mkdir()
    args = argparse.Namespace(decompose_env="mixture", decompose_eval_split=None, decompose_retriever=str(model),
                              decompose_unseen_only=True)
    assert cs.set_decompose_env(args) == "mixture"
    assert cs.ENVS["mixture"]["kwargs"]["unseen_by_retriever"] is True  # recorded in every run's settings
    args.decompose_split_rule = "request_clauses"  # the policy-gated reward, recorded beside it
    cs.set_decompose_env(args)
    assert cs.ENVS["mixture"]["kwargs"]["split_rule"] == "request_clauses"
    for env, retriever in (("mixture", None), (None, str(model))):
        with pytest.raises(ValueError, match="needs --decompose-env mixture and --decompose-retriever"):
            cs.set_decompose_env(argparse.Namespace(decompose_env=env, decompose_eval_split=None,
                                                    decompose_retriever=retriever, decompose_unseen_only=True))


def _write_folder(root, name, fingerprint, runs, settings=None):
    folder = root / name / "toolsearch_multi"
    folder.mkdir(parents=True)
    for scheme, seed, warm, final in runs:
        (folder / f"{scheme}_seed{seed}.json").write_text(
            json.dumps(_run_file(scheme, seed, warm, final, fingerprint=fingerprint, settings=settings)))
    return root / name


def test_pooling_warm_starts_pairs_runs_of_the_same_warm_start_and_seed(tmp_path, monkeypatch):
    monkeypatch.setattr(cs, "RESULTS", tmp_path)  # the summary file lands here, not in the repo
    a = _write_folder(tmp_path, "a", "sha256:" + "a" * 64, [
        ("toolsearcher", 0, [0, 0, 0], [1, 1, 1]), ("toolsearcher", 1, [0, 0, 0], [1, 0, 0]),
        ("grpo_f1", 0, [0, 0, 0], [0, 0, 0]), ("grpo_f1", 1, [0, 0, 0], [0, 0, 0])])
    b = _write_folder(tmp_path, "b", "sha256:" + "b" * 64, [
        ("toolsearcher", 0, [0, 0, 0], [1, 1, 0]), ("grpo_f1", 0, [0, 0, 0], [0, 0, 0]),
        ("grpo_f1", 1, [0, 0, 0], [1, 1, 1])])  # W2 seed 1: no toolsearcher run to pair with
    body = cs.pooled_report([a, b], write=False)
    row = next(line for line in body.splitlines() if line.startswith("| `toolsearcher` − `grpo_f1`"))
    # units W1s0 1, W1s1 1/3, W2s0 2/3: mean 2/3, sd 1/3, se 1/(3√3) = .192, t 3.46, df 2; both warm starts +2/3
    assert "| 3 (W1: 2, W2: 1) |" in row and "W1s0 +1.000 / W1s1 +0.333 / W2s0 +0.667" in row
    assert "+0.667 ± 0.192 (t 3.46, df 2) ✔" in row and "W1 +0.667, W2 +0.667" in row
    assert "| W1 | `" in body and "`sha256:aaaaaaaaaaaa…`" in body and "units for 0.119" in body
    doc = tmp_path / "learning.md"
    doc.write_text("# Learning\n")
    summary = cs.pooled_report([a, b], doc=doc)  # the summary under RESULTS, the block into doc
    got = json.loads((tmp_path / "credit_schemes_pooled.json").read_text())
    pair = next(p for p in got["envs"]["toolsearch_multi"] if p["b"] == "grpo_f1")
    assert pair["units"] == [["W1", 0], ["W1", 1], ["W2", 0]] and pair["clears"]
    assert summary.strip() in doc.read_text() and "--report --pool" in doc.read_text()


def test_pooled_mark_needs_every_warm_start_to_agree_in_sign(tmp_path):
    a = _write_folder(tmp_path, "a", "sha256:" + "a" * 64,
                      [("tca_only", s, [0, 0, 0], [1, 1, 1]) for s in (0, 1, 2)])
    b = _write_folder(tmp_path, "b", "sha256:" + "b" * 64, [("tca_only", 0, [.01, .01, .01], [0, 0, 0])])
    body = cs.pooled_report([a, b], write=False)
    row = next(line for line in body.splitlines() if line.startswith("| `tca_only` − warm start"))
    # units +1, +1, +1, -.01: mean .7475, sd .505, se .2525 -> clears 2 se, but W2's own mean is negative
    assert "+0.748 ± 0.253 (t 2.96, df 3)" in row and "W1 +1.000, W2 -0.010" in row and "✔" not in row


def test_pooling_refuses_one_warm_start_twice_or_two_settings(tmp_path):
    runs = [("grpo_f1", 0, [0, 0, 0], [1, 0, 0])]
    a = _write_folder(tmp_path, "a", "sha256:" + "a" * 64, runs)
    same = _write_folder(tmp_path, "same", "sha256:" + "a" * 64, runs)
    with pytest.raises(SystemExit, match="the same warm start"):
        cs.pooled_report([a, same], write=False)
    other = _write_folder(tmp_path, "other", "sha256:" + "c" * 64, runs,
                          settings={"warm_start": "W", "steps": 4, "eval_every": 4, "eval_tasks": 3,
                                    "tasks_per_step": 4, "group_size": 8, "overrides": []})
    with pytest.raises(SystemExit, match="other settings"):
        cs.pooled_report([a, other], write=False)
    with pytest.raises(SystemExit):
        cs.main(["--pool", str(a), str(other)])  # --pool goes with --report
    with pytest.raises(SystemExit):
        cs.main(["--report", "--pool", str(tmp_path / "nowhere")])


def test_training_runs_fix_the_mmap_threshold_before_anything_trains(monkeypatch):
    import toolgym.trainers.allocator as allocator

    calls = []
    monkeypatch.setattr(allocator, "fix_mmap_threshold", lambda n: calls.append(n) or True)
    with pytest.raises(SystemExit):  # an unknown scheme stops it after the threshold is set, before any run
        cs.main(["--warm-start", "W", "--toolsearch-schemes", "no_such_scheme", "--decompose-schemes"])
    assert calls == [1 << 20] == [cs.MMAP_THRESHOLD]
    calls.clear()
    with pytest.raises(SystemExit):  # a report trains nothing: the allocator is left alone
        cs.main(["--report", "--pool", "/nonexistent"])
    assert calls == []


def test_the_same_warm_start_evaluated_with_another_split_rule_is_listed_and_labelled(tmp_path, monkeypatch):
    monkeypatch.setattr(cs, "RESULTS", tmp_path)
    base = {"warm_start": "W", "steps": 3, "eval_every": 3, "eval_tasks": 3, "tasks_per_step": 4, "group_size": 8,
            "overrides": [], "env_kwargs": {"k": 10, "unseen_by_retriever": True}}
    gated = {**base, "env_kwargs": {"k": 10, "split_rule": "request_clauses"}}
    here = _write_folder(tmp_path, "credit_schemes_here", FP, [("toolsearcher", 0, [0, 0, 0], [1, 0, 0])], base)
    _write_folder(tmp_path, "credit_schemes_gated", FP, [("toolsearcher", 0, [1, 1, 0], [1, 1, 1])], gated)
    _write_folder(tmp_path, "credit_schemes_twin", FP, [("toolsearcher", 0, [0, 1, 0], [0, 0, 0])],
                  {**base, "env_kwargs": {"k": 10}})  # differs only in a training-only kwarg: the same warm start
    runs = [json.loads(p.read_text()) for p in sorted((here / "toolsearch_multi").glob("*.json"))]
    others = cs.warm_starts_elsewhere("toolsearch_multi", runs, here)
    assert list(others) == ["credit_schemes_gated"]
    assert cs.eval_kwargs_differences(others["credit_schemes_gated"], runs[0]) == {"split_rule": "request_clauses"}
    table = cs.warm_start_table("toolsearch_multi", runs, others)
    assert "evaluated with `split_rule='request_clauses'`, first 3 | 3 | 0.667" in table
    assert "this folder's, first" not in table  # the shared tasks are all of this folder's: no second row


def test_lanes_share_a_plan_run_by_run_through_their_claims(tmp_path):
    """`--jobs 2` once split the plan by index, so the lane whose runs earlier sittings had
    finished sat idle while the other trained its share one run after another."""
    plan = [("env", "a", 0), ("env", "b", 0), ("env", "a", 1), ("env", "b", 1)]
    lane_a, lane_b = cs.claimed_runs(plan, tmp_path), cs.claimed_runs(plan, tmp_path)
    assert next(lane_a) == ("env", "a", 0)  # held while lane A trains it
    assert next(lane_b) == ("env", "b", 0)  # so lane B takes the next one
    assert next(lane_a) == ("env", "a", 1)  # A is done with a0; b0 is B's
    assert next(lane_b) == ("env", "b", 1)
    assert next(lane_a, None) is None  # b1 is held: nothing is left for A
    assert next(lane_b, None) is None


def test_a_run_held_elsewhere_is_skipped_and_a_released_one_is_taken(tmp_path):
    from toolgym.trainers.run_lock import run_dir_lock

    plan = [("env", "a", 0), ("env", "a", 1)]
    with run_dir_lock(tmp_path / "env" / "a_seed0", "other lane", lock_file=cs.CLAIM_LOCK):
        assert list(cs.claimed_runs(plan, tmp_path)) == [("env", "a", 1)]
    assert list(cs.claimed_runs(plan, tmp_path)) == plan  # the holder let go
    # a claim that found the run finished (nothing written) leaves no empty folder behind
    assert not (tmp_path / "env" / "a_seed1").exists()
    kept = tmp_path / "env" / "b_seed0"
    for _ in cs.claimed_runs([("env", "b", 0)], tmp_path):
        (kept / "settings.json").write_text("{}")  # a run that started trains on in its folder
    assert sorted(p.name for p in kept.iterdir()) == [cs.CLAIM_LOCK, "settings.json"]


def test_a_lock_file_that_is_not_a_file_stops_the_lane_instead_of_skipping_its_run(tmp_path):
    (tmp_path / "env" / "a_seed0" / cs.CLAIM_LOCK).mkdir(parents=True)
    with pytest.raises(ValueError, match="not a regular file"):
        list(cs.claimed_runs([("env", "a", 0), ("env", "a", 1)], tmp_path))
