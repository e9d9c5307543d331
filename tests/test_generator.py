"""The MagicSelector dialogue generator: probabilities, labels, seeds, annotations, errors, CLI, envs."""
import json
import math
import re
from pathlib import Path

import pytest

from toolgym.data import load_corpus_and_tasks
from toolgym.agents.dialogue_writer import ChatPolicyWriter, clean_policy_text
from toolgym.data.dialogue_generator import (
    INTENTS,
    P_INIT,
    P_TASK,
    P_TODO,
    SCENARIO_LABELS,
    STATES,
    DialogueGenerator,
    GeneratorConfig,
    TemplateWriter,
    ToolStep,
    TurnTrace,
    compatible_states,
    dialogue_tasks,
    generate_dialogues,
    generation_stats,
    p_init,
    p_switch,
    p_task,
    p_todo,
    read_tool_corpus,
    request_clause,
    restrict,
    scenario_label,
    trace_records,
)
from toolgym.retrieval.corpus import Tool, ToolCorpus
from toolgym.data.readers import DatasetFormatError

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
SMALL = {"seed": 0, "dialogues": {"train": 40, "test": 10, "ood": 10}}


@pytest.fixture(scope="module")
def dialogues(seal):
    return generate_dialogues(seal.corpus, SMALL)


# -- probabilities ------------------------------------------------------------------------
@pytest.mark.parametrize("turn, expected", [
    (1, 0.10),                 # p0 * 0.85^0
    (2, 0.085),                # 0.10 * 0.85
    (3, 0.07225),              # 0.10 * 0.7225
    (15, 0.0102769),           # 0.10 * 0.85^14 = 0.0102769..., still above p_min
    (16, 0.01),                # 0.10 * 0.85^15 = 0.00873... -> p_min
    (40, 0.01),
])
def test_p_switch_hand_computed(turn, expected):
    assert p_switch(turn) == pytest.approx(expected, abs=1e-7)


def test_p_switch_custom_parameters_and_domain():
    assert p_switch(3, p0=0.5, alpha=0.5, p_min=0.2) == pytest.approx(0.2)  # 0.125 -> floor 0.2
    assert p_switch(2, p0=0.5, alpha=0.5, p_min=0.0) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="r >= 1"):
        p_switch(0)


def _assert_stochastic(row):
    assert all(p >= 0 for p in row.values())
    assert math.isclose(sum(row.values()), 1.0, abs_tol=1e-9)


def test_transition_matrices_are_stochastic():
    assert len(STATES) == 11
    _assert_stochastic(P_INIT)
    assert set(P_TODO) == set(STATES)
    assert set(P_TASK) == set(INTENTS)
    for row in P_TODO.values():
        assert set(row) <= set(INTENTS)
        _assert_stochastic(row)
    for row in P_TASK.values():
        assert set(row) <= set(STATES)
        _assert_stochastic(row)
    # A first request cannot be modified, cancelled or gone; a dropped tool leaves via null.
    assert all(P_INIT.get(s, 0) == 0 for s in ("modified", "cancelled", "null"))
    assert P_TASK["drop"] == {"null": 1.0}


def test_restrict_renormalises_by_hand():
    assert restrict({"a": 0.2, "b": 0.3, "c": 0.5}, {"a", "b"}, "z") == pytest.approx({"a": 0.4, "b": 0.6})
    assert restrict({"a": 0.2}, {"b"}, "z") == {"z": 1.0}


def test_compatible_states_follow_the_tool_record():
    bare = Tool("getNews", "getNews", "Retrieve the latest news headlines")
    action = Tool("sendEmail", "sendEmail", "Send an email to a contact",
                  parameters={"type": "object", "properties": {"to": {"type": "str"}}, "required": ["to"]})
    assert compatible_states(action) == frozenset(STATES)
    assert compatible_states(bare) == frozenset(STATES) - {"ask_detail", "select", "modified", "confirm"}
    # P_init for the bare tool: 0.35 + 0.10 + 0.05 + 0.05 + 0.10 = 0.65 of mass kept.
    assert p_init(bare)["success"] == pytest.approx(0.35 / 0.65)


def test_restricted_rows_are_stochastic_for_every_tool(seal):
    for tool in list(seal.corpus)[::7]:
        allowed = compatible_states(tool)
        row = p_init(tool)
        _assert_stochastic(row)
        assert set(row) <= allowed
        for state in STATES:
            _assert_stochastic(p_todo(tool, state))
        for intent in INTENTS:
            out = p_task(tool, intent)
            _assert_stochastic(out)
            assert set(out) <= allowed


# -- scenario labels ----------------------------------------------------------------------
def _turn(turn, context, *steps):
    return TurnTrace(turn, context, None, None, tuple(ToolStep(*s) for s in steps))


T0_ONE = _turn(0, "init", ("a", "X", "new", "success"))
T0_SAME = _turn(0, "init", ("a", "X", "new", "ask_detail"), ("b", "X", "new", "success"))
T0_CROSS = _turn(0, "init", ("a", "X", "new", "select"), ("b", "Y", "new", "failure"))


@pytest.mark.parametrize("trace, label", [
    ([T0_ONE], "Single Tool"),
    ([T0_SAME], "Same-category Multi-tool"),
    ([T0_CROSS], "Cross-category Multi-tool"),
    ([T0_ONE, _turn(1, "switch", ("a", "X", "drop", "null", "success"), ("c", "Z", "new", "success"))], "Domain Switch"),
    ([T0_SAME, _turn(1, "inherit", ("a", "X", "supplement", "success", "ask_detail"),
                     ("b", "X", "drop", "null", "success"))], "Multi-turn Continuation"),
    ([T0_CROSS, _turn(1, "inherit", ("a", "X", "choose", "success", "select"))], "Intent Selection"),
    ([T0_ONE, _turn(1, "inherit", ("a", "X", "drop", "null", "success"), ("c", "X", "new", "success"))],
     "User Adds New Task"),
    ([T0_ONE, _turn(1, "inherit", ("a", "X", "follow_up", "success", "executing"))], "Unfinished Task Continuation"),
    ([T0_CROSS, _turn(1, "inherit", ("a", "X", "drop", "null", "select"), ("b", "Y", "retry", "success", "failure"))],
     "Abnormal Scenario"),
    ([T0_CROSS, _turn(1, "inherit", ("a", "X", "choose", "success", "select"), ("b", "Y", "retry", "success", "failure"))],
     "State Hybrid"),
])
def test_scenario_label_is_a_function_of_the_trace(trace, label):
    assert scenario_label(trace) == label


def test_every_label_is_a_table7_label_and_matches_its_stored_trace(dialogues):
    records = trace_records(dialogues)
    assert len(records) == len(dialogue_tasks(dialogues))
    for rec in records:
        trace = [TurnTrace.from_dict(t) for t in json.loads(json.dumps(rec["trace"]))]
        assert rec["label"] in SCENARIO_LABELS
        assert scenario_label(trace) == rec["label"]
    assert len({r["label"] for r in records}) >= 8  # 60 dialogues cover most of Table 7


# -- seeds ----------------------------------------------------------------------------------
def test_same_seed_same_dialogues_different_seed_different(seal, dialogues):
    again = generate_dialogues(seal.corpus, SMALL)
    assert [t.to_dict() for t in dialogue_tasks(again)] == [t.to_dict() for t in dialogue_tasks(dialogues)]
    assert trace_records(again) == trace_records(dialogues)
    other = generate_dialogues(seal.corpus, {**SMALL, "seed": 1})
    assert [t.query for t in dialogue_tasks(other)] != [t.query for t in dialogue_tasks(dialogues)]


def test_a_dialogue_depends_only_on_seed_split_and_index(seal):
    big = DialogueGenerator(seal.corpus, {**SMALL, "dialogues": {"train": 12}})
    small = DialogueGenerator(seal.corpus, {**SMALL, "dialogues": {"train": 3}})
    assert big.dialogue("train", 2).tasks == small.dialogue("train", 2).tasks


# -- annotations ------------------------------------------------------------------------------
def test_gold_subtasks_and_history_are_consistent(seal, dialogues):
    for d in dialogues:
        for turn, task in enumerate(d.tasks):
            assert task.gold and all(g in seal.corpus for g in task.gold)
            requested = [s.tool for s in d.traces[turn].steps if s.requested]
            assert task.gold == frozenset(requested)
            assert len(task.subtasks) == len(requested)  # one atomic subtask per requested tool
            assert list(task.messages) == d.messages[: 2 * turn]
            assert task.query == d.messages[2 * turn]["content"] and d.messages[2 * turn]["role"] == "user"
            assert task.split == d.split and task.id == f"{d.id}#{turn}"


def test_no_text_leaks_a_tool_id(seal, dialogues):
    identifier = re.compile(r"[a-z][A-Za-z]*[A-Z]|_")  # camelCase or snake_case ids can't be English words
    idents = {i for i in seal.corpus.ids if identifier.search(i)}
    assert len(idents) > 3000

    def words(text):
        return set(re.findall(r"\w+", text))

    for d in dialogues:
        for task in d.tasks:
            for text in (*task.subtasks, task.query):
                assert not words(text) & idents, text
                assert not {w.lower() for w in words(text)} & {g.lower() for g in task.gold}, text
        for m in d.messages:
            assert not words(m["content"]) & idents


def test_ood_split_holds_out_whole_categories(seal, dialogues):
    gen = DialogueGenerator(seal.corpus, SMALL)
    ood = gen.ood_categories
    assert len(ood) == round(0.2 * len(seal.corpus.categories))
    for task in dialogue_tasks(dialogues):
        cats = {seal.corpus[g].category for g in task.gold}
        assert (cats <= ood) if task.split == "ood" else not (cats & ood)


def test_statistics_count_what_was_generated(dialogues):
    stats = generation_stats(dialogues)
    tasks = dialogue_tasks(dialogues)
    assert stats["dialogues"] == {"train": 40, "test": 10, "ood": 10}
    assert sum(stats["labels"].values()) == len(tasks) == sum(stats["tasks"].values())
    assert stats["contexts"]["init"] == len(dialogues)
    assert 1 <= stats["turns_per_dialogue"]["max"] <= 4
    assert stats["tools_per_turn"]["max"] <= 4  # max_active_tools


def test_random_sampling_and_custom_scenes(seal):
    ids = [t.id for t in seal.corpus if t.category == "Sports"][:6]
    cfg = {"seed": 2, "dialogues": {"train": 15}, "scenes": {"sports": ids}, "p0": 0.0, "p_min": 0.0}
    for task in dialogue_tasks(generate_dialogues(seal.corpus, cfg)):
        assert task.gold <= set(ids)
    rnd = generate_dialogues(seal.corpus, {"seed": 2, "dialogues": {"train": 15}, "sampling": "random"})
    assert all(t.gold for t in dialogue_tasks(rnd))


# -- bad config ------------------------------------------------------------------------------
@pytest.mark.parametrize("change, key", [
    ({"dialogues": {"train": -1}}, "dialogues.train"),
    ({"dialogues": {"validation": 3}}, "dialogues"),
    ({"min_turns": 0}, "min_turns"),
    ({"min_turns": 3, "max_turns": 2}, "max_turns"),
    ({"p0": 1.5}, "p0"),
    ({"alpha": "high"}, "alpha"),
    ({"composition": {"single": 0.5, "parallel": 0.4}}, "composition"),
    ({"composition": {"solo": 1.0}}, "composition"),
    ({"sampling": "scenic"}, "sampling"),
    ({"max_tools_per_turn": 1}, "max_tools_per_turn"),
    ({"p_init": {"success": 0.5, "cancelled": 0.5}}, "p_init"),
    ({"p_todo": {"success": {"drop": 0.5, "modify": -0.1, "cancel": 0.6}}}, "p_todo.success"),
    ({"p_task": {"drop": {"success": 1.0}}}, "p_task.drop"),
    ({"ood_fraction": 0.0}, "ood_fraction"),
    ({"scenes": {"x": []}}, "scenes.x"),
    ({"colour": "red"}, "unknown key"),
])
def test_bad_config_values_raise_one_clear_error(change, key):
    with pytest.raises(ValueError, match=re.escape(key)):
        GeneratorConfig.from_dict({**SMALL, **change})


def test_a_one_tool_scene_still_asks_for_a_tool_every_turn(seal):
    cfg = {"seed": 1, "dialogues": {"train": 20}, "min_turns": 4, "max_turns": 4, "ood_fraction": 0.0,
           "scenes": {"one": ["getTeamStats"]}, "p_inject": 0.0}
    tasks = dialogue_tasks(generate_dialogues(seal.corpus, cfg))
    assert len(tasks) == 80 and all(t.gold == {"getTeamStats"} for t in tasks)


def test_scene_with_unknown_tool_and_uncategorised_corpus_are_errors(seal):
    with pytest.raises(ValueError, match="not in corpus"):
        DialogueGenerator(seal.corpus, {**SMALL, "scenes": {"x": ["noSuchTool"]}})
    flat = ToolCorpus([Tool(f"t{i}", f"t{i}", "Get the weather") for i in range(5)], name="flat")
    with pytest.raises(ValueError, match="at least 2"):
        DialogueGenerator(flat, SMALL)
    assert dialogue_tasks(generate_dialogues(flat, {"dialogues": {"train": 3}, "ood_fraction": 0.0}))


# -- hostile input -----------------------------------------------------------------------------
def test_huge_and_unclosed_tool_texts_stay_bounded():
    params = {"type": "object", "required": ["q"],
              "properties": {"q": {"type": "str", "description": "(e.g., " * 100_000}}}
    tools = [Tool(f"tool_{i}", f"tool_{i}", ("Retrieve " + "very " * 200_000) if i % 2 else "(" * 300_000,
                  category=f"C{i % 2}", parameters=params) for i in range(4)]
    corpus = ToolCorpus(tools, name="hostile")
    tasks = dialogue_tasks(generate_dialogues(corpus, {"dialogues": {"train": 5}, "ood_fraction": 0.0}))
    assert tasks and max(len(t.query) for t in tasks) < 3000
    assert len(request_clause(tools[1])) <= 140


def test_user_corpus_file_errors_name_the_line(tmp_path):
    good = tmp_path / "tools.jsonl"
    good.write_text("\n".join(json.dumps(Tool(f"t{i}", f"t{i}", "Send a message", "C").to_dict()) for i in range(3)))
    assert len(read_tool_corpus(good)) == 3
    for body, what in (('{"id": "a"}\n{"name": "b"}\n', ":2: a tool record needs an 'id'"),
                       ('{"id": "a"}\n{"id": "a"}\n', ":2: duplicate tool id"),
                       ('{"id": "a", "parameters": [1]}\n', ":1: field 'parameters'"),
                       ('{"id": "a"\n', ":1: malformed JSON"),
                       ("", "no tools")):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(body)
        with pytest.raises(DatasetFormatError, match=re.escape(what)):
            read_tool_corpus(bad)


def test_clean_policy_text_is_bounded_and_strips_labels():
    assert clean_policy_text('User: "Play some jazz."\n\nExplanation: ...') == "Play some jazz."
    assert clean_policy_text(None) == ""
    assert len(clean_policy_text("word " * 1_000_000, max_chars=50)) <= 50
    assert clean_policy_text("\n\n" * 100_000 + "x") == ""


# -- chat policy backend -------------------------------------------------------------------------
class EchoPolicy:
    """A chat policy that answers with the draft it was given, upper-cased (or a fixed reply)."""

    def __init__(self, reply=None):
        self.reply, self.prompts = reply, []

    def act(self, messages):
        self.prompts.append(messages)
        if self.reply is not None:
            return self.reply
        draft = messages[-1]["content"].split("Draft: ", 1)[1].rsplit("\n\n", 1)[0]
        return draft.upper()


def test_policy_backend_writes_the_turns_and_keeps_the_annotation(seal):
    cfg = {"seed": 4, "dialogues": {"train": 6}}
    plain = generate_dialogues(seal.corpus, cfg)
    policy = EchoPolicy()
    writer = ChatPolicyWriter(policy)
    rephrased = DialogueGenerator(seal.corpus, cfg, writer).generate()
    for a, b in zip(dialogue_tasks(plain), dialogue_tasks(rephrased)):
        assert b.query == a.query.upper() and b.gold == a.gold and b.subtasks == a.subtasks and b.group == a.group
    assert writer.calls == len(policy.prompts) == 2 * len(dialogue_tasks(plain)) and writer.fallbacks == 0
    assert policy.prompts[0][0]["role"] == "system"


@pytest.mark.parametrize("reply", ["", "   ", None, "Sure, calling getWeatherForecast now."])
def test_policy_replies_that_are_empty_or_name_a_tool_fall_back_to_the_draft(reply):
    tool = Tool("getWeatherForecast", "getWeatherForecast", "Retrieve the weather forecast", "Weather",
                {"type": "object", "properties": {"city": {"type": "str"}}, "required": ["city"]})
    corpus = ToolCorpus([tool, Tool("x_y", "x_y", "Send a note", "Other")], name="two")
    cfg = {"dialogues": {"train": 2}, "ood_fraction": 0.0, "composition": {"single": 1.0}, "max_turns": 1,
           "scenes": {"w": ["getWeatherForecast"]}}
    writer = ChatPolicyWriter(EchoPolicy(reply=reply if reply is not None else 42))
    tasks = dialogue_tasks(DialogueGenerator(corpus, cfg, writer).generate())
    template = dialogue_tasks(DialogueGenerator(corpus, cfg, TemplateWriter()).generate())
    assert [t.query for t in tasks] == [t.query for t in template]
    assert writer.fallbacks == writer.calls > 0


def test_policy_without_act_is_rejected():
    with pytest.raises(ValueError, match="act"):
        ChatPolicyWriter(object())


@pytest.mark.slow
def test_hf_chat_policy_backend_runs_a_real_model(seal):
    from toolgym.agents.hf_policy import HFChatPolicy

    policy = HFChatPolicy.from_pretrained("smollm2", sampling={"max_new_tokens": 24, "temperature": 0.0,
                                                               "stop_strings": []}, device="cpu")
    writer = ChatPolicyWriter(policy)
    cfg = {"seed": 0, "dialogues": {"train": 1}, "max_turns": 1}
    tasks = dialogue_tasks(DialogueGenerator(seal.corpus, cfg, writer).generate())
    assert writer.calls == 2 * len(tasks)
    assert all(t.query and t.gold and len(t.subtasks) == len(t.gold) for t in tasks)


# -- CLI and environments -----------------------------------------------------------------------
def test_generate_cli_writes_readable_files(tmp_path, capsys):
    from toolgym.cli.main import main

    cfg = tmp_path / "gen.yaml"
    cfg.write_text("library: {dataset: api_bank}\ngenerator: {seed: 3, dialogues: {train: 8, ood: 2}}\n")
    assert main(["generate", str(cfg), f"out_dir={tmp_path / 'out'}", "generator.max_turns=2"]) == 0
    out = capsys.readouterr().out
    assert "scenario labels:" in out and "tools per turn" in out
    data = load_corpus_and_tasks(tmp_path / "out" / "corpus.jsonl", tmp_path / "out" / "tasks.jsonl")
    corpus, tasks = data.corpus, data.tasks
    traces = [json.loads(line) for line in (tmp_path / "out" / "traces.jsonl").read_text().splitlines()]
    assert len(corpus) == 101 and len(tasks) == len(traces) and {t.split for t in tasks} == {"train", "ood"}
    assert [t.id for t in tasks] == [r["task_id"] for r in traces]
    assert all(len(r["trace"]) <= 2 for r in traces)


@pytest.mark.parametrize("text, setting, message", [
    ("generator: {dialogues: {train: -2}}\n", [], "dialogues.train"),
    ("backend: {name: gpt}\n", [], "backend.name"),
    ("backend: {name: openai, model: m}\n", [], "base_url"),
    ("colour: red\n", [], "unknown key colour"),
    ("generator: {}\n", ["generator.p0"], "key=value"),
    ("library: {dataset: seal_tools, corpus: x.jsonl}\n", [], "exactly one"),
])
def test_generate_cli_bad_config_is_one_line(tmp_path, capsys, text, setting, message):
    from toolgym.cli.main import main

    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    assert main(["generate", str(cfg), f"out_dir={tmp_path / 'o'}", *setting]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and err.startswith("toolgym generate: error:")
    assert not (tmp_path / "o").exists()


def test_registered_envs_use_the_shipped_config():
    from omegaconf import OmegaConf

    from toolgym.envs.dialogue import DIALOGUE_CONFIG, DIALOGUE_LIBRARY
    from toolgym.cli.generate import load_generate_config

    shipped = load_generate_config(CONFIGS / "generate_seal_tools.yaml")
    assert shipped.library.dataset == DIALOGUE_LIBRARY and shipped.library.corpus is None
    assert GeneratorConfig.from_dict(shipped.generator) == GeneratorConfig.from_dict(DIALOGUE_CONFIG)
    assert OmegaConf.load(CONFIGS / "generate_stabletoolbench_llm.yaml").backend.name == "hf"


def test_dialogue_envs_are_registered_and_serve_the_generated_tasks():
    import gymnasium

    from toolgym.envs import registered_ids

    assert {"toolgym/ToolSearch-Dialogue-v0", "toolgym/Decompose-Dialogue-v0"} <= set(registered_ids())
    env = gymnasium.make("toolgym/Decompose-Dialogue-v0", split="ood")
    tasks = env.unwrapped.tasks
    assert tasks and all(t.split == "ood" for t in tasks)
    assert any(t.messages for t in tasks)
    obs, info = env.reset(seed=0)
    assert isinstance(obs, str) and info["task_id"] in {t.id for t in tasks}
    search = gymnasium.make("toolgym/ToolSearch-Dialogue-v0", split="test")
    assert {t.id for t in search.unwrapped.tasks} == {t.id for t in tasks_of_split("test")}


def tasks_of_split(split):
    from toolgym.data import load_dataset

    corpus = load_dataset("seal_tools").corpus
    return [t for t in dialogue_tasks(generate_dialogues(corpus, {"seed": 0})) if t.split == split]
