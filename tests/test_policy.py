"""HFChatPolicy (tiny random Llama with the SmolLM2 tokenizer) and OpenAICompatPolicy (loopback server)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import torch

from toolgym.agents.hf_policy import HFChatPolicy, load_tokenizer, tiny_causal_lm
from toolgym.agents.openai_policy import OpenAICompatError, OpenAICompatPolicy


@pytest.fixture(scope="module")
def policy(tokenizer):
    return HFChatPolicy(tiny_causal_lm(tokenizer, seed=0), tokenizer, {"max_new_tokens": 12, "temperature": 0.0})


MESSAGES = [{"role": "system", "content": "You find tools."}, {"role": "user", "content": "Book a flight to Oslo"}]


def test_greedy_generation_returns_the_models_own_token_ids(policy):
    prompt = policy.encode_prompt(MESSAGES)
    gen = policy.generate_batch([prompt])[0]
    ids = list(prompt)
    with torch.no_grad():  # replay greedy decoding by hand: each id must be the argmax given the prefix
        for tid in gen.token_ids:
            logits = policy.model(torch.tensor([ids])).logits[0, -1]
            assert int(logits.argmax()) == tid
            ids.append(tid)
    assert gen.finish_reason in {"stop", "length"}
    assert len(gen.token_ids) <= 12


def test_batched_left_padding_matches_single_generation(policy):
    a = policy.encode_prompt(MESSAGES)
    b = policy.encode_prompt([MESSAGES[0], {"role": "user", "content": "x"}])
    both = policy.generate_batch([a, b])
    assert both[0].token_ids == policy.generate_batch([a])[0].token_ids
    assert both[1].token_ids == policy.generate_batch([b])[0].token_ids


def _sharp_tiny(tokenizer, seed):
    """A tiny random Llama with weights scaled up: its greedy tokens depend on every position (the
    default init emits one token whatever the context, which would hide a wrong position or mask)."""
    model = tiny_causal_lm(tokenizer, seed=seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.mul_(20.0)
    return model


def test_turn_cache_feeds_only_new_tokens_and_generates_what_a_fresh_encoding_would(tokenizer):
    from toolgym.agents.hf_policy import TurnCache

    policy = HFChatPolicy(_sharp_tiny(tokenizer, seed=1), tokenizer, {"max_new_tokens": 6, "temperature": 0.0, "engine": "generate"})
    a = policy.encode_prompt(MESSAGES)
    b = policy.encode_prompt([MESSAGES[0], {"role": "user", "content": "x"}])
    # Make row 2 end early (a greedy token of its own ends the turn), so the cache holds masked pads after it.
    probe = policy.generate_batch([b])[0].token_ids
    stop_at = next(j for j in range(1, len(probe) - 1) if probe[j] not in probe[:j])
    policy.end_ids = sorted(set(policy.end_ids) | {probe[stop_at]})
    cache = TurnCache()
    prompts = [a, a, b]  # a GRPO group's first turn repeats its prompt
    first = policy.generate_batch(prompts, turn_cache=cache)
    assert [g.token_ids for g in first] == [g.token_ids for g in policy.generate_batch(prompts)]
    assert len(first[2].token_ids) == stop_at + 1 < len(first[0].token_ids) and first[2].finish_reason == "stop"
    assert cache.reused_tokens == len(a)  # the repeated prompt was encoded once
    prompts = [p + g.token_ids + policy.encode_tool_turn("result " * (3 * i + 1), g.finish_reason == "stop")
               for i, (p, g) in enumerate(zip(prompts, first))]
    second = policy.generate_batch(prompts, turn_cache=cache)
    fresh = [policy.generate_batch([p])[0].token_ids for p in prompts]
    assert [g.token_ids for g in second] == fresh
    assert cache.reused_tokens == len(a) + sum(len(p) + len(g.token_ids) for p, g in zip([a, a, b], first))
    # The batch shrinks and reorders as episodes end: rows are found by their tokens.
    prompts = [prompts[i] + second[i].token_ids + policy.encode_tool_turn("more", False) for i in (2, 0)]
    third = policy.generate_batch(prompts, turn_cache=cache)
    assert [g.token_ids for g in third] == [policy.generate_batch([p])[0].token_ids for p in prompts]
    # A prompt that extends no cached row is encoded afresh, not matched to a wrong row.
    other = policy.encode_prompt([MESSAGES[0], {"role": "user", "content": "Find a hotel"}])
    fed = cache.fed_tokens
    assert policy.generate_batch([other], turn_cache=cache)[0].token_ids == policy.generate_batch([other])[0].token_ids
    assert cache.fed_tokens == fed + len(other)


def test_turn_cache_samples_what_a_fresh_encoding_samples(tokenizer):
    from toolgym.agents.hf_policy import TurnCache

    policy = HFChatPolicy(_sharp_tiny(tokenizer, seed=2), tokenizer, {"max_new_tokens": 5, "temperature": 1.0, "engine": "generate"})
    prompt = policy.encode_prompt(MESSAGES)
    cache = TurnCache()
    torch.manual_seed(0)
    first = policy.generate_batch([prompt] * 4, turn_cache=cache)
    torch.manual_seed(0)
    assert [g.token_ids for g in policy.generate_batch([prompt] * 4)] == [g.token_ids for g in first]
    assert len({tuple(g.token_ids) for g in first}) > 1  # the group's samples differ
    prompts = [prompt + g.token_ids + policy.encode_tool_turn("ok " * (i + 1), False) for i, g in enumerate(first)]
    torch.manual_seed(1)
    second = policy.generate_batch(prompts, turn_cache=cache)
    torch.manual_seed(1)
    assert [g.token_ids for g in policy.generate_batch(prompts)] == [g.token_ids for g in second]


def test_cut_stops_after_tool_call_and_end_token(policy, tokenizer):
    call = '<tool_call>{"name": "search", "arguments": {"query": "flights"}}</tool_call>'
    ids = tokenizer.encode(call + " trailing words", add_special_tokens=False)
    cut, reason = policy._cut(ids)
    assert reason == "stop" and tokenizer.decode(cut).startswith(call) and "trailing" not in tokenizer.decode(cut)
    end = policy.end_ids[0]
    cut, reason = policy._cut([100, 200, end, 300])
    assert cut == [100, 200, end] and reason == "stop"
    assert policy._cut([100, 200])[1] == "length"


def test_tool_turn_glue_reproduces_the_chat_template(policy, tokenizer):
    reply = '<tool_call>{"name": "search", "arguments": {"query": "weather"}}</tool_call>'
    tool = "1. weather_api (Weather): current weather"
    ids = policy.encode_prompt(MESSAGES) + tokenizer.encode(reply, add_special_tokens=False)
    ids += policy.encode_tool_turn(tool, generated_end=False)
    expected = tokenizer.apply_chat_template(
        MESSAGES + [{"role": "assistant", "content": reply}, {"role": "tool", "content": tool}],
        tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(ids) == expected
    # when the model already emitted <|im_end|>, the glue must not repeat it
    with_end = policy.encode_tool_turn(tool, generated_end=True)
    assert tokenizer.decode(with_end).startswith("\n<|im_start|>tool\n")


class _ScriptedHandler(BaseHTTPRequestHandler):
    replies: list[dict] = []
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        status, payload = type(self).replies.pop(0)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    httpd = HTTPServer(("127.0.0.1", 0), _ScriptedHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _ScriptedHandler.replies, _ScriptedHandler.seen = [], []
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", _ScriptedHandler
    httpd.shutdown()


def _choice(text, reason="stop"):
    return 200, {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": reason}]}


def test_openai_policy_restores_stop_string_and_sends_settings(server):
    url, handler = server
    handler.replies = [_choice('<tool_call>{"name": "search", "arguments": {"query": "q"}}'), _choice("plain answer")]
    pol = OpenAICompatPolicy(url, "served-model", api_key="k", temperature=0.7, max_tokens=64)
    assert pol.act(MESSAGES).endswith("}</tool_call>")
    assert pol.act(MESSAGES) == "plain answer"
    sent = handler.seen[0]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer k"
    assert sent["body"]["model"] == "served-model" and sent["body"]["temperature"] == 0.7
    assert sent["body"]["stop"] == ["</tool_call>"] and sent["body"]["messages"] == MESSAGES


def test_openai_policy_retries_server_errors_and_reports_client_errors(server):
    url, handler = server
    handler.replies = [(503, {"error": "busy"}), _choice("ok")]
    assert OpenAICompatPolicy(url, "m", retries=1).act(MESSAGES) == "ok"
    handler.replies = [(400, {"error": "bad model"})]
    with pytest.raises(OpenAICompatError, match="HTTP 400"):
        OpenAICompatPolicy(url, "m").act(MESSAGES)
    handler.replies = [(200, {"unexpected": True})]
    with pytest.raises(OpenAICompatError, match="unexpected response"):
        OpenAICompatPolicy(url, "m").act(MESSAGES)


def test_a_dequantized_gguf_model_is_not_left_marked_quantized(tokenizer, tmp_path):
    # transformers 5.17 leaves these marks on a GGUF-loaded model whose weights are already float: the
    # HF Trainer then refused full fine-tuning ("purely quantized models") on the H200 run of the
    # multi-search warm start, and save_pretrained would write the quantization config into it.
    from transformers.trainer_utils import validate_quantization_for_training

    from toolgym.agents.hf_policy import _unmark_dequantized

    class Quantizer:
        is_trainable = is_qat_trainable = False

        def remove_quantization_config(self, model):
            del model.hf_quantizer

    model = tiny_causal_lm(tokenizer, seed=0)
    model.hf_quantizer, model.is_quantized = Quantizer(), True
    model.config._is_quantized, model.config.quantization_config = True, {"quant_method": "gguf"}
    with pytest.raises(ValueError, match="quantized"):
        validate_quantization_for_training(model)
    _unmark_dequantized(model)
    validate_quantization_for_training(model)
    assert getattr(model, "hf_quantizer", None) is None and not model.is_quantized
    model.save_pretrained(tmp_path)
    assert "quantization_config" not in json.loads((tmp_path / "config.json").read_text())


def test_the_generate_engine_draws_with_the_shared_sampler(tokenizer):
    # sampling.engine=generate (the fallback for models the lean decoder does not run) picks each token
    # with toolgym.agents.sampling.sample_tokens, draw for draw: replayed here by a plain forward loop.
    from toolgym.agents.sampling import sample_tokens

    model = tiny_causal_lm(tokenizer, seed=1)
    settings = {"engine": "generate", "max_new_tokens": 8, "temperature": 0.9, "top_k": 40, "top_p": 0.95}
    policy = HFChatPolicy(model, tokenizer, settings)
    prompts = [tokenizer.encode("Find a tool that books flights"), tokenizer.encode("Weather in Oslo")]
    width = max(len(p) for p in prompts)
    torch.manual_seed(7)
    gens = policy.generate_batch(prompts)
    torch.manual_seed(7)
    ids = torch.tensor([[policy.pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    drawn = []
    with torch.no_grad():
        for _ in range(8):
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1, :]
            picks, _ = sample_tokens(logits.float(), 0.9, 40, 0.95)
            drawn.append(picks)
            ids, mask = torch.cat([ids, picks[:, None]], 1), torch.cat([mask, torch.ones_like(picks)[:, None]], 1)
    drawn = torch.stack(drawn, 1).tolist()
    assert any(len(g.token_ids) > 1 for g in gens)
    for gen, row in zip(gens, drawn):
        assert gen.token_ids == row[:len(gen.token_ids)]
