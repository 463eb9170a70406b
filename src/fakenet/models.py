"""A fake model provider: the wire formats coding agents speak, driven by a script.

    POST /v1/messages    Anthropic Messages (Claude Code): SSE when "stream" is true, else JSON
    POST /v1/responses   OpenAI Responses (Codex): always SSE
    POST /api/v1/chat/completions, /v1/chat/completions
                         OpenAI Chat Completions (OpenRouter's API, aider through litellm; the
                         gateway's own calls): SSE chunks when "stream" is true, else JSON
                         (the gateway's tools: their script, below)
    POST /v1beta/models/MODEL:streamGenerateContent (and :generateContent)
                         Google's Gemini API (Gemini CLI): SSE data lines with `alt=sse`, a
                         JSON array without; JSON for :generateContent

and what an interactive Claude Code asks at start: `GET /api/hello` (and, on its OAuth host,
`GET /v1/oauth/hello`) must answer 200 or it stops ("Unable to connect"); its managed settings
and policy limits (`/api/claude_code/settings`, `/policy_limits`) answer 404, as for an
account that has none.

The test writes the session as a list of steps (`FakeInternet.script_model`); the server reads
it at every request. A step is {"shell": "<command>"} (the model has the agent run a command
with the agent's own shell tool: `Bash` {command} for Claude Code, `bash` {command} for pi
(either API), `exec_command` {cmd} for Codex, `run_shell_command` {command} for Gemini CLI; on
Chat Completions, which aider speaks without tools, a reply holding the command in a ```bash
block, the way aider's edit formats ask a model to suggest one) or {"say": "<text>"} (a final
answer). Which step a request is at is counted from the request itself: the number of tool
results the agent has sent back so far (on Chat Completions without tools, the model's own
replies so far), so the server keeps no state and every request of the session gets the next
step. A request without the shell tool gets the first text from its step on: a side request (a
title), or a conversation at a terminal, as Codex's TUI has one with its default model, whose
tools are declared elsewhere in the request. Past the last step: the last text.

Everything the agents send is recorded like any other request (records.http), so a test can
check which key reached the provider and which bytes did not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from fakenet.httpparse import HttpRequest

ANTHROPIC_PATH = "/v1/messages"
OPENAI_PATH = "/v1/responses"
CHAT_PATHS = ("/api/v1/chat/completions", "/v1/chat/completions")  # OpenRouter's, OpenAI's
# The Messages API's shell tools, by the name each agent declares: Claude Code's, pi's,
# OpenClaw's (`exec` {command}). The call names the one the request declared.
ANTHROPIC_SHELLS = ("Bash", "bash", "exec")
# The Responses API's shell tools, by name, with the argument each takes its command in:
# Codex's, pi's, OpenClaw's.
OPENAI_SHELLS = {"exec_command": "cmd", "bash": "command", "exec": "command"}
_CALL_PREFIX = "call_fake"  # a Responses call's id: this, then the number of its step
# Google's Gemini API: a model's methods under /v1beta (the CLI's), /v1alpha or /v1
GEMINI_PATH = re.compile(r"/v1(?:beta|alpha)?/models/[^/:]+:(generateContent|"
                         r"streamGenerateContent)")
# Its shell tools, by the name each agent declares, with their command's argument: Gemini CLI's
GEMINI_SHELLS = {"run_shell_command": "command"}
HELLO_PATHS = ("/api/hello", "/v1/oauth/hello")  # 200: "the service answers"
NONE_PATHS = ("/api/claude_code/settings", "/api/claude_code/policy_limits")  # 404: none


def wants(request: HttpRequest) -> bool:
    path = request.target.split("?", 1)[0]
    if request.method == "GET" and path in (*HELLO_PATHS, *NONE_PATHS):
        return True
    return request.method == "POST" and (path in (ANTHROPIC_PATH, OPENAI_PATH, *CHAT_PATHS)
                                         or GEMINI_PATH.fullmatch(path) is not None)


# A request that declares one of the gateway's own tools (the policy API decider's `decide`,
# the watcher re-reader's `report`) is answered from their script (beside the session's:
# FakeInternet.script_decider), one behaviour for every call: {"decide": {...}} or
# {"report": {...}} (that tool's call, with that input), {"say": "..."} (a text answer, no
# tool call), {"status": 500}, {"raw": "..."} (a body that is not JSON), {"hang": seconds}.
GATEWAY_TOOLS = ("decide", "report")
DECIDER_SCRIPT = "decider-script.json"


def hang_seconds(request: HttpRequest, script_file: str | None) -> float | None:
    """How long to say nothing before closing, when the decider's script says to hang."""
    step = _decider_step(request, script_file)
    return float(step["hang"]) if step is not None and "hang" in step else None


def _decider_step(request: HttpRequest, script_file: str | None) -> dict[str, Any] | None:
    if not script_file or request.method != "POST":
        return None
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return None
    tools = body.get("tools") or [] if isinstance(body, dict) else []
    if not any(_tool_name(t) in GATEWAY_TOOLS for t in tools):
        return None
    steps = _read_script(str(Path(script_file).with_name(DECIDER_SCRIPT)))
    return steps[0] if steps else {"say": "no decider script"}


def _tool_name(tool: Any) -> Any:
    """A declared tool's name: at its top (Messages, Responses) or under "function" (Chat
    Completions)."""
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else tool.get("name")


def _decider_answer(request: HttpRequest, step: dict[str, Any]) -> bytes:
    if "status" in step:
        return _http(int(step["status"]), "application/json", b'{"error": "scripted"}')
    if "raw" in step:
        return _http(200, "application/json", str(step["raw"]).encode())
    path = request.target.split("?", 1)[0]
    anthropic = path == ANTHROPIC_PATH
    tool = next((name for name in GATEWAY_TOOLS if name in step), None)
    if path in CHAT_PATHS:
        doc = _chat_completion(tool, step[tool] if tool else None, str(step.get("say", "")))
    elif tool is not None:
        if anthropic:
            content = [{"type": "tool_use", "id": f"toolu_{tool}", "name": tool,
                        "input": step[tool]}]
            doc = {"id": f"msg_{tool}", "type": "message", "role": "assistant",
                   "model": "fake-model", "content": content, "stop_reason": "tool_use"}
        else:
            doc = {"id": f"resp_{tool}", "object": "response", "status": "completed",
                   "output": [{"type": "function_call", "id": f"fc_{tool}",
                               "call_id": f"call_{tool}", "name": tool,
                               "arguments": json.dumps(step[tool])}]}
    elif anthropic:
        doc = {"id": "msg_decide", "type": "message", "role": "assistant",
               "content": [{"type": "text", "text": str(step.get("say", ""))}],
               "stop_reason": "end_turn"}
    else:
        doc = {"id": "resp_decide", "object": "response", "status": "completed",
               "output": [{"type": "message", "role": "assistant", "content": [
                   {"type": "output_text", "text": str(step.get("say", ""))}]}]}
    return _http(200, "application/json", json.dumps(doc).encode())


def respond(request: HttpRequest, script_file: str | None) -> bytes:
    """The whole HTTP response to one model request."""
    decider = _decider_step(request, script_file)
    if decider is not None:
        return _decider_answer(request, decider)
    path, _, query = request.target.partition("?")
    if request.method == "GET":
        if path in HELLO_PATHS:
            return _http(200, "application/json", b'{"message": "hello"}')
        return _http(404, "application/json",
                     json.dumps({"type": "error", "error": {"type": "not_found_error",
                                                            "message": "none"}}).encode())
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return _http(400, "application/json", json.dumps({"error": "body is not JSON"}).encode())
    steps = _read_script(script_file)
    if path in CHAT_PATHS:
        return _chat_answer(body, steps)
    gemini = GEMINI_PATH.fullmatch(path)
    if gemini is not None:
        return _gemini_answer(body, steps, streaming=gemini.group(1) != "generateContent",
                              sse="alt=sse" in query.split("&"))
    if path == ANTHROPIC_PATH:
        done = _anthropic_results(body)
        shell = next((name for name in ANTHROPIC_SHELLS if _has_tool(body, name)), None)
        step = _step(steps, done, shell is not None)
        if body.get("stream"):
            return _http(200, "text/event-stream",
                         _sse(_anthropic_events(step, done, shell or ANTHROPIC_SHELLS[0])))
        return _http(200, "application/json", json.dumps(
            _anthropic_message(step, done, shell or ANTHROPIC_SHELLS[0])).encode())
    done = _openai_results(body)
    shell = next((name for name in OPENAI_SHELLS if _has_tool(body, name)), None)
    step = _step(steps, done, shell is not None)
    return _http(200, "text/event-stream",
                 _sse(_openai_events(step, done, shell or next(iter(OPENAI_SHELLS)))))


def _read_script(script_file: str | None) -> list[dict[str, Any]]:
    if not script_file:
        return []
    try:
        steps = json.loads(Path(script_file).read_text())
    except (OSError, ValueError):
        return []
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


def _step(steps: list[dict[str, str]], done: int, with_tool: bool) -> dict[str, str]:
    if not steps:
        return {"say": "ok"}
    if not with_tool:
        return next((s for s in steps[done:] if "say" in s), {"say": "ok"})
    return steps[done] if done < len(steps) else next(
        (s for s in reversed(steps) if "say" in s), {"say": "done"})


def _has_tool(body: dict[str, Any], name: str) -> bool:
    return any(isinstance(t, dict) and t.get("name") == name for t in body.get("tools") or [])


def _anthropic_results(body: dict[str, Any]) -> int:
    count = 0
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            count += sum(1 for b in content
                         if isinstance(b, dict) and b.get("type") == "tool_result")
    return count


def _openai_results(body: dict[str, Any]) -> int:
    items = body.get("input")
    if not isinstance(items, list):
        return 0
    outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
    return max(len(outputs), _openai_answered_steps(outputs))


def _openai_answered_steps(outputs: list[dict[str, Any]]) -> int:
    """The steps answered, read from the step numbers of the calls the outputs answer. A
    client that keeps its conversation on the server (OpenClaw: `store` and
    `previous_response_id`) sends only the newest output, so counting them is not enough."""
    steps = [int(call[len(_CALL_PREFIX):]) + 1 for call in (o.get("call_id") for o in outputs)
             if isinstance(call, str) and call.startswith(_CALL_PREFIX)
             and call[len(_CALL_PREFIX):].isdigit()]
    return max(steps, default=0)


# ---- Anthropic Messages --------------------------------------------------------------------

# Ids are numbered by step: an agent keeps the calls of a session apart by them.

def _anthropic_block(step: dict[str, str], index: int, shell: str) -> dict[str, Any]:
    if "shell" in step:
        return {"type": "tool_use", "id": f"toolu_fake{index:04d}", "name": shell,
                "input": {"command": step["shell"]}}
    return {"type": "text", "text": step.get("say", "")}


def _anthropic_message(step: dict[str, str], index: int, shell: str) -> dict[str, Any]:
    block = _anthropic_block(step, index, shell)
    return {"id": f"msg_fake{index:04d}", "type": "message", "role": "assistant",
            "model": "fake-model",
            "content": [block], "stop_reason": "tool_use" if "shell" in step else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 10}}


def _anthropic_events(step: dict[str, str], index: int,
                      shell: str) -> Iterator[tuple[str, dict[str, Any]]]:
    message = {**_anthropic_message(step, index, shell), "content": [], "stop_reason": None}
    yield "message_start", {"type": "message_start", "message": message}
    block = _anthropic_block(step, index, shell)
    if block["type"] == "tool_use":
        start = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    else:
        start = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": block["text"]}
    yield "content_block_start", {"type": "content_block_start", "index": 0,
                                  "content_block": start}
    yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": "tool_use" if "shell" in step
                                      else "end_turn", "stop_sequence": None},
                            "usage": {"output_tokens": 10}}
    yield "message_stop", {"type": "message_stop"}


# ---- OpenAI Responses ----------------------------------------------------------------------

def _openai_item(step: dict[str, str], index: int, shell: str) -> dict[str, Any]:
    if "shell" in step:
        return {"type": "function_call", "id": f"fc_fake{index:04d}",
                "call_id": f"{_CALL_PREFIX}{index:04d}", "name": shell,
                "arguments": json.dumps({OPENAI_SHELLS[shell]: step["shell"]}),
                "status": "completed"}
    return {"type": "message", "id": f"msg_fake{index:04d}", "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": step.get("say", ""),
                         "annotations": []}]}


def _openai_events(step: dict[str, str], index: int,
                   shell: str) -> Iterator[tuple[str, dict[str, Any]]]:
    response = {"id": f"resp_fake{index:04d}", "object": "response", "model": "fake-model",
                "status": "in_progress", "output": []}
    yield "response.created", {"type": "response.created", "response": response}
    item = _openai_item(step, index, shell)
    yield "response.output_item.added", {"type": "response.output_item.added",
                                         "output_index": 0, "item": item}
    yield "response.output_item.done", {"type": "response.output_item.done",
                                        "output_index": 0, "item": item}
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 20}
    yield "response.completed", {"type": "response.completed",
                                 "response": {**response, "status": "completed",
                                              "output": [item], "usage": usage}}


# ---- OpenAI Chat Completions ---------------------------------------------------------------

def _chat_completion(tool: str | None, arguments: Any, text: str) -> dict[str, Any]:
    """A non-streaming answer: one call of `tool` with `arguments` (a JSON string, as the API
    sends them), or `text` when `tool` is None."""
    if tool is not None:
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{tool}", "type": "function",
             "function": {"name": tool, "arguments": json.dumps(arguments)}}]}
    else:
        message = {"role": "assistant", "content": text}
    return {"id": "chatcmpl-fake", "object": "chat.completion", "model": "fake-model",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if tool else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}


_CHAT_SHELL_INTRO = "Run this shell command:"  # how a suggestion of this server's opens


def _chat_answer(body: dict[str, Any], steps: list[dict[str, Any]]) -> bytes:
    """A session step for a client without tools: a shell step is a reply suggesting the
    command in a ```bash block (aider runs what its user confirms). The steps done are this
    server's suggestions in the conversation: a client's own examples (aider's few-shot
    replies) are assistant messages too, so only replies that open as ours count."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        messages = []
    done = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant"
               and str(m.get("content") or "").startswith(_CHAT_SHELL_INTRO))
    step = _step(steps, done, True)
    text = (f"{_CHAT_SHELL_INTRO}\n\n```bash\n{step['shell']}\n```\n" if "shell" in step
            else str(step.get("say", "")))
    doc = _chat_completion(None, None, text)
    if not body.get("stream"):
        return _http(200, "application/json", json.dumps(doc).encode())
    base = {k: doc[k] for k in ("id", "model")} | {"object": "chat.completion.chunk"}
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                              "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
         "usage": doc["usage"]},
    ]
    return _http(200, "text/event-stream", _sse_data(chunks) + b"data: [DONE]\n\n")


# ---- Google Gemini -------------------------------------------------------------------------

def _gemini_results(body: dict[str, Any]) -> int:
    count = 0
    for content in body.get("contents") or []:
        parts = content.get("parts") if isinstance(content, dict) else None
        if isinstance(parts, list):
            count += sum(1 for p in parts if isinstance(p, dict) and "functionResponse" in p)
    return count


def _gemini_shell(body: dict[str, Any]) -> str | None:
    declared = {d.get("name") for tool in body.get("tools") or [] if isinstance(tool, dict)
                for d in tool.get("functionDeclarations") or [] if isinstance(d, dict)}
    return next((name for name in GEMINI_SHELLS if name in declared), None)


def _gemini_answer(body: dict[str, Any], steps: list[dict[str, Any]], streaming: bool,
                   sse: bool) -> bytes:
    done = _gemini_results(body)
    shell = _gemini_shell(body)
    step = _step(steps, done, shell is not None)
    if "shell" in step and shell is not None:
        part: dict[str, Any] = {"functionCall": {
            "name": shell, "args": {GEMINI_SHELLS[shell]: step["shell"]}}}
    else:
        part = {"text": str(step.get("say", ""))}
    doc = {"candidates": [{"content": {"role": "model", "parts": [part]},
                           "finishReason": "STOP", "index": 0}],
           "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 10,
                             "totalTokenCount": 20},
           "modelVersion": "fake-model", "responseId": f"fake{done:04d}"}
    if streaming and sse:
        return _http(200, "text/event-stream", _sse_data([doc]))
    return _http(200, "application/json", json.dumps([doc] if streaming else doc).encode())


# ---- HTTP ----------------------------------------------------------------------------------

def _sse(events: Iterator[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                    for name, data in events)


def _sse_data(docs: Iterable[dict[str, Any]]) -> bytes:
    """Server-sent events of data lines alone (Chat Completions', Gemini's)."""
    return b"".join(f"data: {json.dumps(doc)}\n\n".encode() for doc in docs)


def _http(status: int, content_type: str, payload: bytes) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found",
              500: "Internal Server Error"}.get(status, "Status")
    head = (f"HTTP/1.1 {status} {reason}\r\nServer: fakenet\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: keep-alive\r\n\r\n")
    return head.encode() + payload
