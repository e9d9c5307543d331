"""A chat policy served by any OpenAI-compatible server (vLLM, SGLang, llama.cpp, OpenAI).

Standard library HTTP only, so it adds no dependency. It is a text policy: servers do not return
the token ids a trainer needs, so it serves evaluation and data collection, not local GRPO.
"""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from typing import Any, Sequence

from toolgym.agents.policy import TOOL_CALL_STOP


class OpenAICompatError(RuntimeError):
    """The server answered with an error or an unreadable body."""


class OpenAICompatPolicy:
    """``act(messages) -> str`` via ``POST {base_url}/chat/completions``.

    The server stops at ``</tool_call>`` and OpenAI-style servers drop the stop string from the
    text, so it is put back when the reply opened a tool call and stopped there.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, temperature: float = 0.0,
                 top_p: float = 1.0, max_tokens: int = 256, stop: Sequence[str] = (TOOL_CALL_STOP,),
                 timeout_s: float = 60.0, retries: int = 2, extra_body: dict[str, Any] | None = None):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.temperature, self.top_p, self.max_tokens = temperature, top_p, max_tokens
        self.stop = list(stop)
        self.timeout_s, self.retries = timeout_s, retries
        self.extra_body = dict(extra_body or {})

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read().decode("utf-8"))
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode("utf-8", "replace")[:500]
                if exc.code < 500:  # a client error will not fix itself
                    raise OpenAICompatError(f"{self.url}: HTTP {exc.code}: {detail}") from None
                last = OpenAICompatError(f"{self.url}: HTTP {exc.code}: {detail}")
            except (urllib.error.URLError, TimeoutError, json.JSONDecodeError) as exc:
                last = exc
            time.sleep(min(2.0, 0.2 * 2**attempt))
        raise OpenAICompatError(f"{self.url}: no usable answer after {self.retries + 1} tries ({last})")

    def complete(self, messages: Sequence[dict[str, str]]) -> tuple[str, str]:
        """Return ``(text, finish_reason)`` of one assistant turn."""
        body = {"model": self.model, "messages": list(messages), "temperature": self.temperature,
                "top_p": self.top_p, "max_tokens": self.max_tokens, **self.extra_body}
        if self.stop:
            body["stop"] = self.stop
        data = self._post(body)
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            reason = choice.get("finish_reason") or "stop"
        except (KeyError, IndexError, TypeError, AttributeError):
            raise OpenAICompatError(f"{self.url}: unexpected response shape: {str(data)[:300]}") from None
        if reason == "stop" and "<tool_call>" in text and TOOL_CALL_STOP not in text.split("<tool_call>")[-1]:
            text += TOOL_CALL_STOP
        return text, reason

    def act(self, messages: Sequence[dict[str, str]]) -> str:
        """The next assistant message as text."""
        return self.complete(messages)[0]
