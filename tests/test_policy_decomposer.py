"""A trained decomposition policy as a retrieval step (evaluation/decomposer.py, eval retrieval --decompose policy:PATH)."""
from __future__ import annotations

import pytest

from toolgym.agents.policy import Generation, SamplingConfig
from toolgym.cli.main import main
from toolgym.envs.decomposition import INSTRUCTION, DecompositionEnv
from toolgym.evaluation.decomposer import PolicyDecomposer
from toolgym.evaluation.retrieval import evaluate_retrieval, rank_tasks
from toolgym.retrieval.decompose import split_into_clauses


class AnswerPolicy:
    """A ChatPolicy whose answer to the i-th prompt is ``answers[i]``; records prompts and temperature."""

    def __init__(self, answers):
        self.answers, self.sampling = list(answers), SamplingConfig(temperature=0.9)
        self.prompts, self.temperatures = [], []

    def encode_prompt(self, messages):
        self.prompts.append(messages)
        return [len(self.prompts)]

    def generate_batch(self, prompts, max_new_tokens=None):
        self.temperatures.append(self.sampling.temperature)
        return [Generation(self.answers[p[0] - 1], [1], "stop") for p in prompts]


def test_the_policy_sees_the_env_prompt_greedy_and_its_answer_is_parsed(seal):
    tasks = seal.tasks[:3]
    policy = AnswerPolicy(["1. find a hotel\n2. book a taxi", "", "x\n" * 40])
    out = PolicyDecomposer(policy, batch_size=2, max_subtasks=5)(tasks)
    assert out[0] == ["find a hotel", "book a taxi"]
    assert out[1] == [tasks[1].context_text()]  # no subtask written: the request stays whole
    assert out[2] == ["x"] * 5  # the cap
    assert policy.prompts == [DecompositionEnv.prompt_messages(INSTRUCTION, t) for t in tasks]
    assert policy.temperatures == [0.0, 0.0]  # two batches, both greedy
    assert policy.sampling.temperature == 0.9  # restored


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_sizes_are_refused(bad):
    with pytest.raises(ValueError, match="batch_size"):
        PolicyDecomposer(AnswerPolicy([]), batch_size=bad)


def test_a_decomposer_that_splits_like_the_clause_rule_ranks_like_it(seal, bm25):
    tasks = [t for t in seal.tasks if len(split_into_clauses(t.context_text())) > 1][:8]
    assert tasks
    by_rule = rank_tasks(bm25, tasks, 10, "clauses")
    by_callable = rank_tasks(bm25, tasks, 10, lambda ts: [split_into_clauses(t.context_text()) for t in ts])
    assert by_rule == by_callable
    assert by_rule != rank_tasks(bm25, tasks, 10, "none")


def test_a_decomposer_with_the_wrong_number_of_lists_or_an_unknown_mode_is_an_error(seal, bm25):
    with pytest.raises(ValueError, match="gave 1 lists of sub-queries for 2 tasks"):
        rank_tasks(bm25, seal.tasks[:2], 10, lambda ts: [["a"]])
    with pytest.raises(ValueError, match="decompose must be"):
        evaluate_retrieval(bm25, seal.tasks[:2], [5], decompose="paraphrase")


def test_eval_retrieval_with_a_trained_run_as_decomposer(trained_tiny_run, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["eval", "retrieval", "--dataset", "seal_tools", "--retriever", "bm25", "--limit", "4",
                 "--decompose", f"policy:{trained_tiny_run}", "--json", str(out)]) == 0
    import json

    result = json.loads(out.read_text())
    assert result["config"]["decompose"] == f"policy:{trained_tiny_run}"
    assert result["decompose_ms_per_request"] > 0
    assert "trained decomposer" in capsys.readouterr().out


@pytest.mark.parametrize("value, fragment", [("policy:/no/such/run", "policy:/no/such/run"),
                                             ("policy:", "policy:PATH"), ("llm", "policy:PATH")])
def test_a_bad_decompose_value_fails_before_any_index_is_built(value, fragment, capsys):
    assert main(["eval", "retrieval", "--dataset", "seal_tools", "--decompose", value]) == 2
    assert fragment in capsys.readouterr().err


def test_the_gated_decomposer_splits_by_rule_exactly_where_the_policy_splits(seal):
    """The policy's decision (more than one subtask) picks between the whole request and the request
    followed by its clauses; the policy's own words are not retrieved."""
    from toolgym.data.records import Task
    from toolgym.evaluation.decomposer import GatedClauseDecomposer
    from toolgym.retrieval.decompose import request_then_clauses

    multi = Task(id="m", query="Check the weather in Paris, and then book a table for two.", gold=["x"],
                 messages=({"role": "user", "content": "I am planning an evening out."},))
    single = Task(id="s", query="Check the weather in Paris.", gold=["x"])
    tasks = [multi, multi, single]
    policy = AnswerPolicy(["junk one\njunk two", "the whole thing", "a\nb"])
    gated = GatedClauseDecomposer(PolicyDecomposer(policy))
    out = gated(tasks)
    assert out[0] == [multi.context_text(), "Check the weather in Paris", "book a table for two."]
    assert out[0] == request_then_clauses(multi.context_text(), multi.query)
    assert out[1] == [multi.context_text()]  # one subtask written: left whole
    assert out[2] == [single.context_text()]  # a split of a one-clause request is the request
    assert gated.split == [True, False, True] and gated.seconds >= 0.0
