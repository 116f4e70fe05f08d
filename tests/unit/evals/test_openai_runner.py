"""The openai runner's own parts without a server: settings, argv templating, SSE and chunk parsing."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from registry.evals.cases import parse_case
from registry.evals.runners import LoadedEvalSet, RunContext, RunnerError
from registry.evals.runners.openai import (
    MAX_CONCURRENCY,
    OpenAISettings,
    StreamError,
    _StreamState,
    fill_placeholders,
    parse_settings,
    request_body,
    run,
    sse_data,
)
from registry.evals.scoring import DEFAULT_REFUSAL_MARKERS, Price

SERVE = ["vllm", "serve", "{model_dir}", "--port", "{port}"]


def test_defaults():
    s = parse_settings({"endpoint": "http://gpu-1:8000/v1/"})
    assert s == OpenAISettings(endpoint="http://gpu-1:8000/v1", serve=None, model=None, api_key_env=None,
                         concurrency=4, request_timeout_s=60.0, startup_timeout_s=300.0, max_tokens=256,
                         price=None, refusal_markers=DEFAULT_REFUSAL_MARKERS)
    s = parse_settings({"serve": SERVE, "model": "m", "api_key_env": "OPENAI_API_KEY", "concurrency": 32,
                        "request_timeout_s": 1.5, "startup_timeout_s": 10, "max_tokens": 8,
                        "price_per_million": {"input": 0.2, "output": 0}, "refusal_markers": ["nope"]})
    assert s.serve == tuple(SERVE) and s.price == Price(0.2, 0.0) and s.refusal_markers == ("nope",)


@pytest.mark.parametrize("settings, message", [
    ([], "settings are an object"),
    ({}, "exactly one of endpoint"),
    ({"endpoint": "http://h/v1", "serve": SERVE}, "exactly one of endpoint"),
    ({"endpoint": "http://h/v1", "concurency": 2}, "unknown setting 'concurency'"),
    ({"endpoint": "ftp://h/v1"}, "not an http(s) base URL"),
    ({"endpoint": "http://h/v1?x=1"}, "without query"),
    ({"endpoint": 8000}, "endpoint is a URL"),
    ({"serve": "vllm serve {model_dir} --port {port}"}, "serve is a command as a list"),
    ({"serve": []}, "serve is a command as a list"),
    ({"serve": ["vllm", ""]}, "serve is a command as a list"),
    ({"serve": ["vllm", "serve", "{model_dir}"]}, "must listen on {port}"),
    ({"endpoint": "http://h/v1", "model": ""}, "model is a non-empty string"),
    ({"endpoint": "http://h/v1", "api_key_env": "MY KEY"}, "api_key_env is the name"),
    ({"endpoint": "http://h/v1", "concurrency": 0}, "concurrency is an integer from 1 to 32"),
    ({"endpoint": "http://h/v1", "concurrency": MAX_CONCURRENCY + 1}, "concurrency is an integer"),
    ({"endpoint": "http://h/v1", "concurrency": 2.0}, "concurrency is an integer"),
    ({"endpoint": "http://h/v1", "request_timeout_s": 0}, "request_timeout_s is a number of seconds"),
    ({"endpoint": "http://h/v1", "startup_timeout_s": True}, "startup_timeout_s is a number"),
    ({"endpoint": "http://h/v1", "max_tokens": 5000}, "max_tokens is an integer from 1 to 4096"),
    ({"endpoint": "http://h/v1", "price_per_million": {"input": 1}}, "price_per_million is {input"),
    ({"endpoint": "http://h/v1", "price_per_million": {"input": 1, "output": -1}}, "non-negative"),
    ({"endpoint": "http://h/v1", "refusal_markers": []}, "refusal_markers is a list"),
    ({"endpoint": "http://h/v1", "refusal_markers": ["ok", " "]}, "refusal_markers is a list"),
])
def test_bad_settings_are_refused_with_a_reason(settings, message):
    with pytest.raises(RunnerError) as e:
        parse_settings(settings)
    assert message in str(e.value)


def test_an_api_key_env_that_is_not_set_fails_before_any_request(tmp_path, monkeypatch):
    monkeypatch.delenv("EVAL_TEST_MISSING_KEY", raising=False)
    c = parse_case({"id": "a", "category": "factual", "language": "en",
                    "messages": [{"role": "user", "content": "q"}], "expect": {"exact": "a"}})
    ctx = RunContext(model_dir=tmp_path, settings={"endpoint": "http://127.0.0.1:9/v1",
                                                    "api_key_env": "EVAL_TEST_MISSING_KEY"},
                     evalsets=(LoadedEvalSet("s", "sha256:0", (c,)),), work_dir=tmp_path, facts=None,
                     trust_remote_code=False, deadline=time.monotonic() + 60)
    with pytest.raises(RunnerError, match="EVAL_TEST_MISSING_KEY, which is not set"):
        run(ctx)


def test_a_reserved_category_fails_before_any_request(tmp_path):
    c = parse_case({"id": "a", "category": "requests", "language": "en",
                    "messages": [{"role": "user", "content": "q"}], "expect": {"exact": "a"}})
    ctx = RunContext(model_dir=tmp_path, settings={"serve": ["/no/such/server", "{port}"]},
                     evalsets=(LoadedEvalSet("s", "sha256:0", (c,)),), work_dir=tmp_path, facts=None,
                     trust_remote_code=False, deadline=time.monotonic() + 60)
    with pytest.raises(RunnerError, match="reserved metric group 'requests'"):
        run(ctx)


def test_placeholders_are_filled_and_nothing_else():
    args = [fill_placeholders(a, model_dir=Path("/models/x y"), port=8123)
            for a in ["{python}", "{model_dir}", "--port={port}", "{other}", '{"a": 1}', "{{port}}"]]
    assert args[1:] == ["/models/x y", "--port=8123", "{other}", '{"a": 1}', "{8123}"]
    assert Path(args[0]).name.startswith("python")


def test_sse_data():
    raw = [b"data: {\"a\"", b": 1}\r\n\r\n: keep-alive\n\nevent: x\nid: 7\ndata: one\ndata: two\n\n",
           b"data:[DONE]\n\n"]
    assert list(sse_data(iter(raw), 1000)) == ['{"a": 1}', "one\ntwo", "[DONE]"]
    # a last event without its blank line still counts; a line cut off in the middle does not
    assert list(sse_data(iter([b"data: [DONE]\n"]), 1000)) == ["[DONE]"]
    assert list(sse_data(iter([b"data: {\"cut"]), 1000)) == []
    with pytest.raises(StreamError, match="larger than 10 bytes"):
        list(sse_data(iter([b"data: 123456\n\n"]), 10))
    with pytest.raises(StreamError, match="not UTF-8"):
        list(sse_data(iter([b"data: \xff\n\n"]), 100))


def case(**extra):
    doc = {"id": "a", "category": "tool_call", "language": "en",
           "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
           "expect": {"exact": "x"}, **extra}
    return parse_case(doc)


def test_request_body():
    assert request_body("m", case(), 32) == {
        "model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
        "max_tokens": 32, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    body = request_body("m", case(tools=[tool], max_tokens=5), 32)
    assert body["tools"] == [tool] and body["tool_choice"] == "auto" and body["max_tokens"] == 5


def chunk(delta=None, finish=None, usage=None, choices=True):
    doc = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else []}
    if usage is not None:
        doc["usage"] = usage
    return doc


def test_stream_state_joins_tool_call_fragments_by_index_and_times_tokens():
    s = _StreamState()
    s.add(chunk({"role": "assistant", "content": ""}), now=10.0)
    s.add(chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                 "function": {"name": "get_", "arguments": ""}}]}), now=10.1)
    s.add(chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                 "function": {"name": "book", "arguments": "{}"}}]}), now=10.2)
    s.add(chunk({"tool_calls": [{"index": 0, "function": {"name": "weather", "arguments": '{"city": "Be'}}]}),
          now=10.3)
    s.add(chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'rlin"}'}}]}), now=10.5)
    s.add(chunk(finish="tool_calls"), now=10.6)
    s.add(chunk(usage={"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}, choices=False), now=10.7)
    reply = s.reply(sent_at=9.9)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("get_weather", {"city": "Berlin"}),
                                                                 ("book", {})]
    assert (reply.input_tokens, reply.output_tokens, reply.text) == (12, 5, "")
    assert reply.ttft_ms == pytest.approx(200.0)  # the empty role delta is no token
    assert reply.tpot_ms == pytest.approx(400.0 / 4)


def test_stream_state_text_refusal_and_missing_usage():
    s = _StreamState()
    s.add(chunk({"content": "I can"}), now=1.0)
    s.add(chunk({"refusal": "'t."}), now=1.5)
    reply = s.reply(sent_at=0.5)
    assert reply.text == "I can't." and reply.ttft_ms == pytest.approx(500.0)
    assert reply.tpot_ms is None and reply.input_tokens is None


@pytest.mark.parametrize("chunks, message", [
    ([chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": '{"a": '}}]})],
     "tool call 0 (f): arguments are not JSON"),
    ([chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})], "names no function"),
    ([chunk({"tool_calls": [{"function": {"name": "f"}}]})], "no integer index"),
    ([{"error": {"message": "overloaded"}}], "reported an error mid-stream: overloaded"),
    ([[1, 2]], "not a JSON object"),
])
def test_stream_state_failures(chunks, message):
    s = _StreamState()
    with pytest.raises(StreamError, match=re.escape(message)):
        for c in chunks:
            s.add(c, now=1.0)
        s.reply(sent_at=0.0)


def test_empty_tool_arguments_are_no_arguments():
    s = _StreamState()
    s.add(chunk({"tool_calls": [{"index": 0, "function": {"name": "now", "arguments": ""}}]}), now=1.0)
    assert s.reply(sent_at=0.0).tool_calls[0].arguments == {}
