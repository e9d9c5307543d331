"""A chat model as the writer of generated dialogues: :class:`ChatPolicyWriter` asks anything that
answers a chat (``act(messages) -> str``: :class:`~toolgym.agents.hf_policy.HFChatPolicy`,
:class:`~toolgym.agents.openai_policy.OpenAICompatPolicy`) to rephrase the
:class:`~toolgym.data.dialogue_generator.TemplateWriter` turn, which stays the fallback."""
from __future__ import annotations

import random
import re
from typing import Any, Sequence

from toolgym.agents.policy import ChatModel
from toolgym.data.dialogue_generator.plan import TurnPlan
from toolgym.data.dialogue_generator.tool_text import scrub
from toolgym.data.dialogue_generator.writers import TemplateWriter


_MAX_REPLY = 2000  # characters kept of a policy's reply before cleaning


class ChatPolicyWriter(TemplateWriter):
    """User turns and assistant replies rephrased by a chat policy (``act(messages) -> str``).

    The template turn is the draft, with the state guidance of the paper's prompts (keep every
    value, one request per tool, leave silent tools out, never name a tool). Subtasks stay the
    state machine's own, so the annotation does not depend on the model. A reply that is empty
    or names a tool falls back to the draft (counted in ``fallbacks``).
    """

    name = "policy"

    def __init__(self, policy: ChatModel, max_chars: int = 600):
        if not callable(getattr(policy, "act", None)):
            raise ValueError(f"a chat policy needs an act(messages) -> str method, got {type(policy).__name__}")
        self.policy = policy
        self.max_chars = max_chars
        self.fallbacks = 0
        self.calls = 0

    def user(self, plan: TurnPlan, history: Sequence[dict[str, str]], rng: random.Random) -> str:
        draft = super().user(plan, history, rng)
        guidance = [f"- {active.topic}: {step.intent.replace('_', ' ')}" for step, active in plan.tools]
        system = ("You are a real person talking to a phone voice assistant. Rewrite the draft as one natural "
                  "spoken turn. Keep every value and every request, one request per item, in the same order; "
                  "do not add requests; never name an app, API or tool; no greetings or thanks. "
                  "Answer with the turn only.")
        prompt = ("Conversation so far:\n" + _render(history) + "\n\nWhat this turn does:\n" + "\n".join(guidance)
                  + f"\n\nDraft: {draft}\n\nYour turn:")
        return self._ask(system, prompt, draft, plan)

    def assistant(self, plan: TurnPlan, history: Sequence[dict[str, str]], user_text: str, rng: random.Random) -> str:
        draft = super().assistant(plan, history, user_text, rng)
        states = [f"- {active.topic}: {step.state}" for step, active in plan.tools]
        system = ("You are a phone voice assistant. Rewrite the draft reply as one fluent reply driven by the "
                  "backend states: success confirms, executing says it is in progress, failure explains, "
                  "ask_detail asks for the missing detail, select lists the options, silent is never mentioned. "
                  "Never name an app, API or tool. Answer with the reply only.")
        prompt = (f"User: {user_text}\n\nBackend states:\n" + "\n".join(states) + f"\n\nDraft: {draft}\n\nReply:")
        return self._ask(system, prompt, draft, plan)

    def _ask(self, system: str, prompt: str, draft: str, plan: TurnPlan) -> str:
        self.calls += 1
        raw = self.policy.act([{"role": "system", "content": system}, {"role": "user", "content": prompt}])
        text = clean_policy_text(raw, self.max_chars)
        names = {a.tool.id for _, a in plan.tools} | {a.tool.name for _, a in plan.tools}
        if not text or scrub(text, names) != text:
            self.fallbacks += 1
            return draft
        return text


def clean_policy_text(raw: Any, max_chars: int = 600) -> str:
    """A model's reply as one utterance: capped first (bounded work on hostile output), then the
    first paragraph, label prefixes and wrapping quotes removed, whitespace collapsed."""
    if not isinstance(raw, str):
        return ""
    text = raw[:_MAX_REPLY].strip()
    text = text.split("\n\n", 1)[0]
    text = re.sub(r"^(?:user|assistant|reply|your turn|turn)\s*:\s*", "", text, flags=re.IGNORECASE)
    text = " ".join(text.split()).strip("\"'“” ")
    if len(text) > max_chars:
        text = text[:max_chars].rsplit(" ", 1)[0]
    return text


def _render(history: Sequence[dict[str, str]]) -> str:
    return "\n".join(f"{m['role']}: {m['content']}" for m in history) or "(none)"


