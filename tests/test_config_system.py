"""One config system for every command that takes a config: typed schema, one loader with the size
caps, positional ``key=value`` overrides and ``--print-config``."""
import ast
from pathlib import Path

import pytest
import yaml

from toolgym.cli.main import main
from toolgym.data.readers import MAX_CONFIG_BYTES

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
# command -> (a shipped config, an override and the merged key it must show)
COMMANDS = {
    "train": ("quickstart.yaml", "train.steps=3", ("train", "steps"), 3),
    "sft": ("sft_toolsearch.yaml", "train.lr=0.5", ("train", "lr"), 0.5),
    "generate": ("generate_seal_tools.yaml", "out_dir=/tmp/elsewhere", ("out_dir",), "/tmp/elsewhere"),
    "fit-retriever": ("fit_retriever.yaml", "batch_size=7", ("batch_size",), 7),
    "fit-reranker": ("fit_reranker.yaml", "candidates=11", ("candidates",), 11),
    "fit-preference": ("fit_preference.yaml", "max_length=99", ("max_length",), 99),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_print_config_shows_the_overridden_merge(command, capsys):
    config, override, key, value = COMMANDS[command]
    assert main([command, str(CONFIGS / config), override, "--print-config"]) == 0
    merged = yaml.safe_load(capsys.readouterr().out)
    for part in key:
        merged = merged[part]
    assert merged == value


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_unknown_keys_bad_overrides_and_huge_files_are_one_line(command, tmp_path, capsys):
    config = str(CONFIGS / COMMANDS[command][0])
    for argv, message in (([config, "no_such_key=1", "--print-config"], "no_such_key"),
                          ([config, "justaword=", "--print-config"], "justaword"),
                          ([str(tmp_path / "missing.yaml")], "not found")):
        assert main([command, *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, (argv, err)
    huge = tmp_path / "huge.yaml"
    huge.write_text("# " + "x" * MAX_CONFIG_BYTES + "\n")
    assert main([command, str(huge)]) == 2
    assert "larger than" in capsys.readouterr().err


def test_no_module_level_defaults_dicts_or_to_plain_round_trips():
    """Defaults live in the schemas' dataclasses only."""
    bad = []
    for path in sorted(ROOT.glob("*/**/*.py")):
        if ".venv" in path.parts or "tests" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
            if any(isinstance(t, ast.Name) and t.id.endswith("DEFAULTS") for t in targets) and \
                    isinstance(getattr(node, "value", None), ast.Dict):
                bad.append(f"{path.relative_to(ROOT)}: {targets[0].id}")
        if "to_plain(" in path.read_text(encoding="utf-8") and "trainers" in path.parts:
            bad.append(f"{path.relative_to(ROOT)}: to_plain")
    assert not bad, bad


def test_commands_are_quiet_unless_verbose(tmp_path, capfd):
    """A command's console output holds no library bars or dict prints; --verbose restores them."""
    import os

    from toolgym.trainers.console import QUIET_ENV, VERBOSE_ENV

    saved = {k: os.environ.get(k) for k in (*QUIET_ENV, VERBOSE_ENV)}
    assert main(["eval", "--dataset", "api_bank", "--retriever", "bm25", "--limit", "5"]) == 0
    quiet = capfd.readouterr()
    assert "C@" in quiet.out or "N@" in quiet.out
    assert "it/s]" not in quiet.err and "Split strings" not in quiet.err and "Tokenize" not in quiet.err
    assert main(["eval", "--dataset", "api_bank", "--retriever", "bm25", "--limit", "5", "--verbose"]) == 0
    loud = capfd.readouterr()
    assert "it/s]" in loud.err or "Tokenize" in loud.err or "Split strings" in loud.err  # bm25s's bars are back
    assert {k: os.environ.get(k) for k in saved} == saved  # the command leaves the environment as it was


@pytest.mark.slow  # loads the packaged SmolLM2 GGUF in a fresh process
def test_a_fresh_process_loads_the_gguf_model_without_library_bars():
    import subprocess
    import sys

    code = ("from toolgym.trainers.console import quiet_libraries\n"
            "with quiet_libraries():\n"
            "    from toolgym.agents.hf_policy import HFChatPolicy\n"
            "    HFChatPolicy.from_pretrained('smollm2', sampling={'max_new_tokens': 2})\n"
            "    from tqdm import tqdm\n"
            "    list(tqdm(range(3), desc='ours', disable=False))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "de-quantizing" not in run.stderr and "Loading weights" not in run.stderr
    assert "ours" in run.stderr  # a bar that passes disable= itself still shows
