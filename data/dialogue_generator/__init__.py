"""MagicSelector's state-machine dialogue generator (MTDTool construction, §3.1 of the paper).

A dialogue is a stochastic process over the tools in context. Each tool carries one of 11
interaction states (:data:`STATES`); at turn 0 a tool's state is drawn from ``P_init(s | t)``,
at turn ``r >= 1`` in two stages, a user intent ``d ~ P_todo(d | s)`` then an outcome
``s' ~ P_task(s' | d)``, both restricted to the states the tool can take
(:func:`compatible_states`). A tool that reaches the null state leaves the context. Each turn
first decides inherit or switch (:func:`p_switch`), composes the new tasks (single tool,
multi-tool collaboration, multi-intent parallelism) from scene-guided or random tool samples,
then writes the user turn, the atomic subtasks (context -> tasks -> tools) and the assistant
reply. Every turn becomes one :class:`~toolgym.data.records.Task`; its scenario label (one of
the paper's Table 7, :data:`SCENARIO_LABELS`) is a function of the state trace
(:func:`scenario_label`).

Text comes from a writer: :class:`TemplateWriter` (default; built from the tools' own
descriptions and parameters, deterministic for a seed) or
:class:`toolgym.agents.dialogue_writer.ChatPolicyWriter`, which asks a chat model
(``act(messages) -> str``: ``HFChatPolicy``, ``OpenAICompatPolicy``) to rephrase the template
turn. This package imports no torch. See docs/datasets.md, "Generated dialogues".

The package, by concern: ``states`` (state space, intents, transition matrices), ``trace`` (turn
records, the scenario label), ``config`` (:class:`GeneratorConfig`), ``tool_text`` (requests and
slot values read off a tool record), ``plan`` (per-dialogue tool state), ``writers``
(:class:`TemplateWriter`), ``generator`` (:class:`DialogueGenerator`) and ``io`` (tool libraries,
output files, statistics). The names below are the public API.
"""
from toolgym.data.dialogue_generator.config import GeneratorConfig
from toolgym.data.dialogue_generator.generator import DialogueGenerator, GeneratedDialogue, split_categories
from toolgym.data.dialogue_generator.io import (dialogue_tasks, generate_dialogues, generation_stats, read_tool_corpus,
                                                tool_library, trace_records, write_generated)
from toolgym.data.dialogue_generator.plan import ActiveTool, TurnPlan
from toolgym.data.dialogue_generator.states import (COMPOSITION_MODES, INTENTS, MULTI_TURN_LABELS, NULL, P_INIT, P_TASK,
                                                    P_TODO, SAMPLING_MODES, SCENARIO_LABELS, SINGLE_TURN_LABELS, SPLITS,
                                                    STATE_GROUPS, STATES, action_tool, compatible_intents,
                                                    compatible_states, p_init, p_switch, p_task, p_todo, restrict)
from toolgym.data.dialogue_generator.tool_text import request_clause, scrub, tool_parameters
from toolgym.data.dialogue_generator.trace import ToolStep, TurnTrace, scenario_label
from toolgym.data.dialogue_generator.writers import TemplateWriter

__all__ = ["ActiveTool", "COMPOSITION_MODES", "DialogueGenerator", "GeneratedDialogue", "GeneratorConfig", "INTENTS",
           "MULTI_TURN_LABELS", "NULL", "P_INIT", "P_TASK", "P_TODO", "SAMPLING_MODES", "SCENARIO_LABELS",
           "SINGLE_TURN_LABELS", "SPLITS", "STATES", "STATE_GROUPS", "TemplateWriter", "ToolStep", "TurnPlan",
           "TurnTrace", "action_tool", "compatible_intents", "compatible_states", "dialogue_tasks",
           "generate_dialogues", "generation_stats", "p_init", "p_switch", "p_task", "p_todo", "read_tool_corpus",
           "request_clause", "restrict", "scenario_label", "scrub", "split_categories", "tool_library",
           "tool_parameters", "trace_records", "write_generated"]
