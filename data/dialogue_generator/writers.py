"""Who writes the text of a turn: :class:`TemplateWriter` (the default, from the tools' own
descriptions). A chat model rephrases it with :class:`toolgym.agents.dialogue_writer.ChatPolicyWriter`."""
from __future__ import annotations

import random
from typing import Any, Mapping, Sequence

from toolgym.data.dialogue_generator.plan import ActiveTool, TurnPlan
from toolgym.data.dialogue_generator.tool_text import _words
from toolgym.data.dialogue_generator.trace import ToolStep


_OPENERS = ("Can you {x}?", "Please {x}.", "I need you to {x}.", "Could you {x}?", "Help me {x}.")
_JOIN_PARALLEL = ("Also, ", "Oh, and ", "By the way, ", "And ")
_JOIN_COLLAB = ("Then ", "After that, ", "Once that's done, ")
_ORDINALS = ("first", "second", "third", "fourth")


class TemplateWriter:
    """User turns, subtasks and assistant replies from templates over the tools' own texts."""

    name = "templates"

    def user(self, plan: TurnPlan, history: Sequence[dict[str, str]], rng: random.Random) -> str:
        pieces = []
        several = len(plan.tools) > 1
        mode = plan.trace.mode
        new_seen = 0
        for step, active in plan.tools:
            detail = plan.detail.get(step.tool, {})
            if step.intent == "new":
                demand = rng.choice(_OPENERS).format(x=self._new_request(active)).replace("Help me help with", "Help me with")
                if new_seen:
                    joiner = rng.choice(_JOIN_COLLAB if mode == "collaboration" else _JOIN_PARALLEL)
                    demand = joiner + (demand if demand.startswith("I ") else demand[:1].lower() + demand[1:])
                new_seen += 1
            else:
                demand = self._follow_up(step.intent, active, detail, several, rng)
            pieces.append(demand[:1].upper() + demand[1:])
        return " ".join(pieces)

    @staticmethod
    def _new_request(active: ActiveTool) -> str:
        request = active.request()
        return request[:1].lower() + request[1:]

    @staticmethod
    def _follow_up(intent: str, active: ActiveTool, detail: Mapping[str, Any], several: bool, rng: random.Random) -> str:
        about = f" for the {active.topic}" if several or rng.random() < 0.5 else ""
        if intent == "supplement":
            value = detail["value"]
            return rng.choice([f"{value}.", f"The {_words(detail['slot'])} is {value}.", f"Use {value}{about}."])
        if intent == "choose":
            index = detail["index"]
            return rng.choice([f"The {_ORDINALS[index]} one{about}.", f"{detail['value']}, please."])
        if intent == "confirm":
            return rng.choice([f"Yes, go ahead{about}.", f"Sure, do it{about}."])
        if intent == "follow_up":
            return rng.choice([f"Is the {active.topic} done yet?", f"Any update on the {active.topic}?"])
        if intent == "retry":
            return rng.choice([f"Please try the {active.topic} again.", f"Give the {active.topic} another try."])
        if intent == "modify":
            return f"Actually, make the {_words(detail['slot'])} {detail['value']} instead{about}."
        if intent == "cancel":
            return rng.choice([f"Forget about the {active.topic}.", f"Cancel the {active.topic}, please."])
        raise ValueError(f"no user template for intent {intent!r}")

    def subtask(self, step: ToolStep, active: ActiveTool) -> str:
        if step.intent == "cancel":
            request = active.request()
            return "Cancel the request to " + request[:1].lower() + request[1:]
        return active.request()

    def assistant(self, plan: TurnPlan, history: Sequence[dict[str, str]], user_text: str, rng: random.Random) -> str:
        parts = [self._reply(step.state, active) for step, active in plan.tools]
        text = " ".join(p for p in parts if p)
        return text or "Noted."  # every tool silent: one neutral word, no summary

    @staticmethod
    def _reply(state: str, active: ActiveTool) -> str:
        topic = active.topic
        if state == "success":
            return f"Done: I took care of the {topic}."
        if state == "executing":
            return f"I'm working on the {topic}; it may take a moment."
        if state == "failure":
            return f"Sorry, something went wrong with the {topic}."
        if state == "ask_detail":
            return f"Which {_words(active.missing or 'detail')} should I use for the {topic}?"
        if state == "select":
            opts = ", ".join(active.options[:-1]) + " or " + active.options[-1]
            return f"For the {topic} I found several {_words(active.option_slot or 'option')} options: {opts}. Which one?"
        if state == "confirm":
            return f"Before I {active.clause}, shall I go ahead?"
        if state == "modified":
            return f"Updated: the {topic} now uses the new value."
        if state == "cancelled":
            return f"Okay, I cancelled the {topic}."
        if state == "deferred":
            return f"I'll get to the {topic} once the rest is done."
        return ""  # silent (and null, never rendered)
