"""The ``openai`` runner: score eval sets against an OpenAI-compatible chat endpoint serving the version.

The suite either names a running ``endpoint`` or a ``serve`` command that the runner starts on the
verified model directory, waits for (``GET /v1/models`` answers 200), and always stops afterwards::

    {"runner": "openai", "settings": {
        "serve": ["vllm", "serve", "{model_dir}", "--port", "{port}", "--host", "127.0.0.1"],
        "concurrency": 8, "max_tokens": 256,
        "price_per_million": {"input": 0.2, "output": 0.6}}}

(For the ``tool_call`` cases vLLM also needs ``--enable-auto-tool-choice --tool-call-parser <parser>``.)

A suite runs on a release unit, and serves it as the unit says: with ``{serving_config}`` the server gets the
engine config written from the unit's serving profile (for vLLM the ``--config`` YAML that ``modelreg fetch``
writes as ``vllm-config.yaml``, naming the chat template the profile names), and ``{chat_template}`` is that
template (what fetch writes as ``modelreg-chat-template.jinja``); both are written into the work directory by
:func:`registry.node.unit.serving_files`, the one place that renders them. A unit without a serving profile,
or whose profile names no chat template, fails the run with the reason when the command asks for them::

    "serve": ["vllm", "serve", "{model_dir}", "--config", "{serving_config}", "--port", "{port}"]

A LoRA adapter (``ctx.adapter``) is served on its base, as the engines serve one: its serve command must start the
base (``{base_dir}``, the bound base's verified files) with the adapter (``{adapter_dir}``, the adapter's files, the
same as ``{model_dir}``) under its name (``{adapter_name}``, its model's name), and requests name the adapter::

    "serve": ["vllm", "serve", "{base_dir}", "--port", "{port}", "--enable-lora",
              "--lora-modules", "{adapter_name}={adapter_dir}"]

A command for an adapter that does not name ``{base_dir}`` and the adapter fails the run with the reason, and so
does one naming them for a version that is no adapter. With an ``endpoint``, requests name the adapter too unless
``model`` says otherwise.

Cases may name one of the unit's prompt templates instead of writing a message out (``registry.evals.cases``);
it is rendered here, in the registry's sandbox with its declared variables checked (:mod:`registry.evals.prompts`),
and a case whose template the unit lacks fails with the reason, unsent, counted in ``requests.failed``.

Settings (anything else is refused):

======================  ===================================================================================
``endpoint``            base URL of the API (``http://host:8000/v1``); or else
``serve``               argv list, no shell; ``{model_dir}``, ``{port}`` (a free port, required),
                        ``{python}`` (this interpreter), ``{serving_config}`` (the engine config written
                        from the unit's serving profile), ``{chat_template}`` (the chat template the
                        profile names) and, for an adapter, ``{base_dir}``, ``{adapter_dir}`` and
                        ``{adapter_name}`` are filled in; output goes to our stderr
``model``               the model name sent; default: an adapter's name, else the first id
                        ``GET /v1/models`` lists
``api_key_env``         name of an environment variable holding the bearer key (optional)
``concurrency``         requests in flight, 1-32 (default 4)
``request_timeout_s``   seconds a request may take (default 60)
``startup_timeout_s``   seconds the serve command has to answer ``/v1/models`` (default 300)
``max_tokens``          for cases that do not set their own (default 256)
``price_per_million``   ``{"input": usd, "output": usd}``: adds ``cost.usd``
``refusal_markers``     phrases that mark a refusal (default ``scoring.DEFAULT_REFUSAL_MARKERS``)
======================  ===================================================================================

Every request is what the official ``openai`` client sends for ``chat.completions.create(...,
stream=True, stream_options={"include_usage": True}, temperature=0, max_tokens=n)``, with ``tools`` and
``tool_choice="auto"`` when the case has tools. The server-sent events are parsed here: ``delta.content``
(and ``delta.refusal``) make the text, ``delta.tool_calls`` fragments are joined by index, the final
chunk with ``choices: []`` carries the usage. TTFT is the time from sending to the first text or
tool-call delta; TPOT is (last delta - first delta) / (completion tokens - 1).

A request is made once: an HTTP error, a timeout, a stream that breaks off (no ``[DONE]`` and no
finish reason), more than :data:`MAX_RESPONSE_BYTES`, or tool-call arguments that are not JSON fail the
case with the reason and count in ``requests.failed``. A request's reads wait at most its timeout
each, and it is cut at the first chunk past it. The run ends before ``ctx.deadline`` with time to stop
the server, or fails. The metrics are ``registry.evals.scoring``'s.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Iterator

import httpx

from registry.client.errors import BadManifestError
from registry.domain.components import SERVING_PROFILE, UNIT_CHAT_TEMPLATE_FILE
from registry.evals.cases import MAX_TOKENS_LIMIT, Case
from registry.evals.prompts import PromptCaseError, UnitPrompts
from registry.evals.runners import (
    RunContext,
    RunnerError,
    RunnerResult,
    RunnerTimeoutError,
    check_metrics,
    die_with_parent,
)
from registry.evals.scoring import (
    DEFAULT_REFUSAL_MARKERS,
    CaseOutcome,
    Price,
    Reply,
    ToolCall,
    aggregate,
    breakdown,
    judge,
    metric_group,
    unsent,
)
from registry.node.unit import serving_files

SETTINGS = ("endpoint", "serve", "model", "api_key_env", "concurrency", "request_timeout_s",
            "startup_timeout_s", "max_tokens", "price_per_million", "refusal_markers")
MAX_CONCURRENCY = 32
MAX_TIMEOUT_S = 24 * 3600
MAX_RESPONSE_BYTES = 4 << 20
"""Bytes one streamed response may hold; more fails the request."""
MAX_ERROR_BODY = 1000
STOP_GRACE_S = 5.0
"""Seconds the serve command has to exit after SIGTERM before its process group is killed."""
DEADLINE_MARGIN_S = STOP_GRACE_S + 5.0
"""Kept free before ``ctx.deadline`` to stop the server and hand back the result."""
OUTPUT_TAIL_LINES = 30
PLACEHOLDER = re.compile(r"\{(model_dir|port|python|serving_config|chat_template|base_dir|adapter_dir|adapter_name)\}")
UNIT_PLACEHOLDERS = ("serving_config", "chat_template")
"""Placeholders filled from the unit's serving profile (:func:`unit_serving_files`)."""
ADAPTER_PLACEHOLDERS = ("base_dir", "adapter_dir", "adapter_name")
"""Placeholders filled for a LoRA adapter (:func:`adapter_values`)."""
LORA_EXAMPLE = "vllm serve {base_dir} --enable-lora --lora-modules {adapter_name}={adapter_dir}"
UNIT_FILES_DIR = "unit"
"""Where in the work directory the unit's serving files are written for the serve command."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@dataclasses.dataclass(frozen=True, slots=True)
class OpenAISettings:
    endpoint: str | None
    serve: tuple[str, ...] | None
    model: str | None
    api_key_env: str | None
    concurrency: int = 4
    request_timeout_s: float = 60.0
    startup_timeout_s: float = 300.0
    max_tokens: int = 256
    price: Price | None = None
    refusal_markers: tuple[str, ...] = DEFAULT_REFUSAL_MARKERS


class StreamError(Exception):
    """A response that cannot be read as an OpenAI chat completion stream."""


class DeadlineReachedError(Exception):
    """The run's deadline came before a request could finish."""


def run(ctx: RunContext) -> RunnerResult:
    """Every case of every eval set, sent once, scored and aggregated.

    Raises:
        RunnerError: bad settings, a serve command that does not come up, no model to name, or the
            run's deadline reached before every case was answered.
    """
    settings = parse_settings(ctx.settings)
    headers = _auth_headers(settings.api_key_env)
    pairs = [(evalset.name, case) for evalset in ctx.evalsets for case in evalset.cases]
    for _, case in pairs:
        metric_group(case.category)  # a reserved name fails now, not after the whole run
    # Each prompt template is rendered before the server starts: a case that cannot be sent fails with why.
    prompts = UnitPrompts(ctx.model_dir)
    ready = [_rendered(prompts, case) for _, case in pairs]
    to_send = [c for c in ready if isinstance(c, Case)]
    stop_at = ctx.deadline - DEADLINE_MARGIN_S
    with _api_base(settings, ctx, headers, stop_at) as base:
        limits = httpx.Limits(max_connections=settings.concurrency,
                              max_keepalive_connections=settings.concurrency)
        # In the sandbox a named endpoint is reached only through the worker's relay socket; the URL (and
        # so the Host header and TLS name) stays the endpoint's.
        relayed = settings.serve is None and ctx.endpoint_socket is not None
        transport = httpx.HTTPTransport(uds=str(ctx.endpoint_socket), limits=limits) if relayed else None
        with httpx.Client(headers=headers, trust_env=settings.serve is None, follow_redirects=False,
                          limits=limits, transport=transport) as client:
            budget = min(settings.request_timeout_s, stop_at - time.monotonic())
            model = settings.model or (ctx.adapter.name if ctx.adapter else None) or _first_model(client, base, budget)
            replies = iter(_complete_all(client, base, model, to_send, settings, stop_at))
    outcomes = [c if isinstance(c, CaseOutcome) else judge(c, next(replies), settings.refusal_markers)
                for c in ready]
    return RunnerResult(metrics=check_metrics(aggregate(outcomes, settings.price)),
                        cases=[o.as_dict(name) for (name, _), o in zip(pairs, outcomes)],
                        breakdown=breakdown(outcomes, settings.price))


def _rendered(prompts: UnitPrompts, case: Case) -> Case | CaseOutcome:
    """The case with its prompt template rendered, or its failed outcome when that cannot be done."""
    try:
        return prompts.render_case(case)
    except PromptCaseError as e:
        return unsent(case, str(e))


# --- settings -------------------------------------------------------------------------------


def parse_settings(raw: Any) -> OpenAISettings:
    """The runner's settings, every one checked.

    Raises:
        RunnerError: an unknown key, a missing or malformed value.
    """
    if not isinstance(raw, dict):
        raise RunnerError("openai runner settings are an object")
    unknown = sorted(set(raw) - set(SETTINGS))
    if unknown:
        raise RunnerError(f"openai runner: unknown setting {unknown[0]!r} (known: {', '.join(SETTINGS)})")
    if ("endpoint" in raw) == ("serve" in raw):
        raise RunnerError("openai runner: set exactly one of endpoint (a running server) "
                          "and serve (a command)")
    defaults = OpenAISettings(None, None, None, None)
    return OpenAISettings(
        endpoint=_endpoint(raw["endpoint"]) if "endpoint" in raw else None,
        serve=_serve(raw["serve"]) if "serve" in raw else None,
        model=_text(raw, "model", 256) if "model" in raw else None,
        api_key_env=_env_name(raw["api_key_env"]) if "api_key_env" in raw else None,
        concurrency=_integer(raw, "concurrency", defaults.concurrency, 1, MAX_CONCURRENCY),
        request_timeout_s=_seconds(raw, "request_timeout_s", defaults.request_timeout_s),
        startup_timeout_s=_seconds(raw, "startup_timeout_s", defaults.startup_timeout_s),
        max_tokens=_integer(raw, "max_tokens", defaults.max_tokens, 1, MAX_TOKENS_LIMIT),
        price=_price(raw["price_per_million"]) if "price_per_million" in raw else None,
        refusal_markers=(_markers(raw["refusal_markers"]) if "refusal_markers" in raw
                         else DEFAULT_REFUSAL_MARKERS),
    )


def _endpoint(value: Any) -> str:
    if not isinstance(value, str) or len(value) > 2048:
        raise RunnerError("openai runner: endpoint is a URL string such as http://host:8000/v1")
    url = urllib.parse.urlsplit(value)
    if url.scheme not in ("http", "https") or not url.hostname or url.query or url.fragment:
        raise RunnerError(f"openai runner: endpoint {value[:80]!r} is not an http(s) base URL "
                          "without query or fragment (http://host:8000/v1)")
    return value.rstrip("/")


def _serve(value: Any) -> tuple[str, ...]:
    if (not isinstance(value, list) or not 1 <= len(value) <= 256
            or not all(isinstance(a, str) and a and len(a) <= 4096 for a in value)):
        raise RunnerError("openai runner: serve is a command as a list of 1 to 256 non-empty strings "
                          '(["vllm", "serve", "{model_dir}", "--port", "{port}"])')
    if not any("{port}" in a for a in value):
        raise RunnerError("openai runner: the serve command must listen on {port} (the runner picks it)")
    return tuple(value)


def _text(raw: dict[str, Any], key: str, limit: int) -> str:
    value = raw[key]
    if not isinstance(value, str) or not value or len(value) > limit:
        raise RunnerError(f"openai runner: {key} is a non-empty string of at most {limit} characters")
    return value


def _env_name(value: Any) -> str:
    if not isinstance(value, str) or not _ENV_NAME.fullmatch(value):
        raise RunnerError("openai runner: api_key_env is the name of an environment variable "
                          "(OPENAI_API_KEY)")
    return value


def _integer(raw: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = raw.get(key, default)
    if type(value) is not int or not low <= value <= high:
        raise RunnerError(f"openai runner: {key} is an integer from {low} to {high}")
    return value


def _seconds(raw: dict[str, Any], key: str, default: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_TIMEOUT_S:
        raise RunnerError(f"openai runner: {key} is a number of seconds above 0, at most {MAX_TIMEOUT_S}")
    return float(value)


def _price(value: Any) -> Price:
    if (not isinstance(value, dict) or set(value) != {"input", "output"}
            or not all(not isinstance(v, bool) and isinstance(v, (int, float)) and 0 <= v < 1e6
                       for v in value.values())):
        raise RunnerError("openai runner: price_per_million is {input: usd, output: usd}, "
                          "non-negative numbers (US dollars per million tokens)")
    return Price(float(value["input"]), float(value["output"]))


def _markers(value: Any) -> tuple[str, ...]:
    if (not isinstance(value, list) or not 1 <= len(value) <= 500
            or not all(isinstance(m, str) and m.strip() and len(m) <= 200 for m in value)):
        raise RunnerError("openai runner: refusal_markers is a list of 1 to 500 non-empty phrases")
    return tuple(value)


def _auth_headers(env_name: str | None) -> dict[str, str]:
    if env_name is None:
        return {}
    key = os.environ.get(env_name)
    if not key:
        raise RunnerError(f"openai runner: api_key_env names {env_name}, which is not set")
    return {"Authorization": f"Bearer {key}"}


# --- the server -----------------------------------------------------------------------------


@contextlib.contextmanager
def _api_base(settings: OpenAISettings, ctx: RunContext, headers: dict[str, str], stop_at: float) -> Iterator[str]:
    if settings.serve is None:
        yield settings.endpoint
        return
    port = _free_port()
    named = placeholders_in(settings.serve)
    adapter = adapter_values(ctx, named)
    unit = unit_serving_files(ctx.model_dir, ctx.work_dir, named)
    argv = [fill_placeholders(a, model_dir=ctx.model_dir, port=port, unit={**unit, **adapter})
            for a in settings.serve]
    die_with_us = die_with_parent()
    try:
        proc = subprocess.Popen(argv, cwd=ctx.work_dir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=die_with_us)
    except OSError as e:
        raise RunnerError(f"openai runner: the serve command {argv[0]!r} cannot be started: "
                          f"{e.strerror or e}") from None
    output = _OutputTail(proc)
    try:
        base = f"http://127.0.0.1:{port}/v1"
        _wait_ready(proc, base, headers, settings.startup_timeout_s, stop_at, output)
        yield base
    finally:
        stop_process_group(proc)
        output.join()


def fill_placeholders(arg: str, *, model_dir: Path, port: int, unit: dict[str, str] | None = None) -> str:
    """One serve argument with ``{model_dir}``, ``{port}``, ``{python}`` and the unit's and adapter's placeholders
    filled in; other braces stay.

    Args:
        unit: ``serving_config`` and ``chat_template`` -> their paths (:func:`unit_serving_files`), and an
            adapter's ``base_dir``, ``adapter_dir`` and ``adapter_name`` (:func:`adapter_values`), when the
            command names them.

    Example:
        >>> fill_placeholders("--port={port}", model_dir=Path("/m"), port=8000)
        '--port=8000'
        >>> fill_placeholders('{"temperature": 0}', model_dir=Path("/m"), port=8000)
        '{"temperature": 0}'
    """
    values = {"model_dir": str(model_dir), "port": str(port), "python": sys.executable, **(unit or {})}
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], arg)


def placeholders_in(argv: tuple[str, ...]) -> set[str]:
    """The placeholders an argv names.

    Example:
        >>> sorted(placeholders_in(("vllm", "serve", "{model_dir}", "--config={serving_config}")))
        ['model_dir', 'serving_config']
    """
    return {m.group(1) for a in argv for m in PLACEHOLDER.finditer(a)}


def adapter_values(ctx: RunContext, named: set[str]) -> dict[str, str]:
    """An adapter's placeholders for a serve command that names ``named``: the base's directory, the adapter's
    and its name.

    Raises:
        RunnerError: the version is an adapter and the command does not start its base with it, or the command
            names an adapter's placeholders and the version is no adapter.

    Example:
        >>> from registry.evals.runners import AdapterOnBase
        >>> ctx = RunContext(Path("/a"), {}, (), Path("/w"), None, False, 0.0,
        ...                  adapter=AdapterOnBase("support", "acme/llm@1", Path("/b")))
        >>> adapter_values(ctx, {"base_dir", "adapter_dir", "adapter_name", "port"})
        {'base_dir': '/b', 'adapter_dir': '/a', 'adapter_name': 'support'}
    """
    asked = sorted(named & set(ADAPTER_PLACEHOLDERS))
    if ctx.adapter is None:
        if asked:
            raise RunnerError(f"openai runner: the serve command names {', '.join('{' + n + '}' for n in asked)}, "
                              "but the version is no adapter (these name an adapter's base and the adapter)")
        return {}
    if "base_dir" not in named or not named & {"adapter_dir", "model_dir"} or ctx.adapter.base_dir is None:
        raise RunnerError(f"openai runner: the version is an adapter of {ctx.adapter.base_ref}: the serve command "
                          "must start the base ({base_dir}) with the adapter ({adapter_dir}, named {adapter_name}), "
                          f"as in: {LORA_EXAMPLE}")
    return {"base_dir": str(ctx.adapter.base_dir), "adapter_dir": str(ctx.model_dir),
            "adapter_name": ctx.adapter.name}


def unit_serving_files(model_dir: Path, work_dir: Path, needed: set[str]) -> dict[str, str]:
    """Write the unit's serving files a serve command names into ``work_dir/unit``; their paths by placeholder.

    The engine config is what ``modelreg fetch`` writes for the same unit (:func:`registry.node.unit.serving_files`),
    naming the chat template written beside it and the unit's ``generation_config.json`` in ``model_dir``.

    Args:
        needed: The placeholders the command names; only :data:`UNIT_PLACEHOLDERS` among them are looked at.

    Raises:
        RunnerError: the command names one, and the unit has no serving profile, a profile that is not valid,
            or (for ``{chat_template}``) a profile that names no chat template.
    """
    needed = needed & set(UNIT_PLACEHOLDERS)
    if not needed:
        return {}
    named = ", ".join("{" + n + "}" for n in sorted(needed))
    if not (model_dir / SERVING_PROFILE).is_file():
        raise RunnerError(f"openai runner: the serve command names {named}, but the unit has no serving profile "
                          f"({SERVING_PROFILE}); derive one with --serving-profile")
    listed = {p.relative_to(model_dir).as_posix() for p in model_dir.rglob("*") if p.is_file()}
    out_dir = work_dir / UNIT_FILES_DIR
    try:
        engine_file, files = serving_files(model_dir, listed, model_dir=model_dir, written_to=out_dir)
    except BadManifestError as e:
        raise RunnerError(f"openai runner: {e.message}") from None
    if "chat_template" in needed and UNIT_CHAT_TEMPLATE_FILE not in files:
        raise RunnerError("openai runner: the serve command names {chat_template}, but the unit's serving profile "
                          "names no chat template (settings.chat_template; without one the engine uses the "
                          "tokenizer's own)")
    out_dir.mkdir(exist_ok=True)
    for name, data in files.items():
        (out_dir / name).write_bytes(data)
    return {"serving_config": str(out_dir / engine_file), "chat_template": str(out_dir / UNIT_CHAT_TEMPLATE_FILE)}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(proc: subprocess.Popen, base: str, headers: dict[str, str], timeout_s: float,
                stop_at: float, output: "_OutputTail") -> None:
    until = time.monotonic() + timeout_s
    with httpx.Client(headers=headers, trust_env=False) as client:
        while True:
            status = exit_status(proc)
            if status is not None:
                output.join(timeout_s=1.0)  # let the readers catch its last words
                raise RunnerError(f"openai runner: the serve command exited with status {status} before "
                                  f"answering GET /v1/models; its last output:\n{output.tail()}")
            try:
                if client.get(f"{base}/models", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() >= until:
                raise RunnerError(f"openai runner: the serve command did not answer GET /v1/models with 200 "
                                  f"within {timeout_s:g} s; its last output:\n{output.tail()}")
            if time.monotonic() >= stop_at:
                raise RunnerTimeoutError("openai runner: the run's deadline came while the serve command was "
                                  f"starting; its last output:\n{output.tail()}")
            time.sleep(0.2)


def exit_status(proc: subprocess.Popen) -> int | None:
    """The process's exit status once it has exited, else None; it is not reaped, so its pid still
    names its process group for :func:`stop_process_group`."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return proc.wait()
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def stop_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process's group, SIGKILL after :data:`STOP_GRACE_S`, and SIGKILL to whatever of
    the group outlives its leader; then reap the leader."""
    if exit_status(proc) is None:
        _signal_group(proc, signal.SIGTERM)
        give_up = time.monotonic() + STOP_GRACE_S
        while exit_status(proc) is None and time.monotonic() < give_up:
            time.sleep(0.05)
    # The leader is not reaped yet, so its pid cannot have been reused: the group is still ours.
    _signal_group(proc, signal.SIGKILL)
    proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class _OutputTail:
    """Forwards the serve command's stdout and stderr to our stderr, line by line, keeping the last lines."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._pump, args=(stream,), daemon=True)
                         for stream in (proc.stdout, proc.stderr)]
        for t in self._threads:
            t.start()

    def _pump(self, stream) -> None:
        with stream:
            for raw in stream:
                line = raw.decode("utf-8", "replace").rstrip("\n")[:500]
                with self._lock:
                    self._lines.append(line)
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.write(f"[serve] {line}\n")
                    sys.stderr.flush()

    def tail(self) -> str:
        with self._lock:
            return "\n".join(self._lines) or "(no output)"

    def join(self, timeout_s: float = 5.0) -> None:
        for t in self._threads:
            t.join(timeout=timeout_s)


def _first_model(client: httpx.Client, base: str, timeout_s: float) -> str:
    if timeout_s <= 0:
        raise RunnerTimeoutError("openai runner: the run's deadline came before the model could be named")
    try:
        response = client.get(f"{base}/models", timeout=timeout_s)
        response.raise_for_status()
        model = response.json()["data"][0]["id"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as e:
        raise RunnerError(f"openai runner: GET {base}/models names no model ({type(e).__name__}: "
                          f"{str(e)[:200]}); set the model setting") from None
    if not isinstance(model, str) or not model:
        raise RunnerError(f"openai runner: GET {base}/models names no model; set the model setting")
    return model


# --- requests -------------------------------------------------------------------------------


def _complete_all(client: httpx.Client, base: str, model: str, cases: list[Case], settings: OpenAISettings,
                  stop_at: float) -> list[Reply]:
    def one(case: Case) -> Reply | None:
        try:
            return complete(client, base, request_body(model, case, settings.max_tokens),
                            settings.request_timeout_s, stop_at)
        except DeadlineReachedError:
            return None

    with concurrent.futures.ThreadPoolExecutor(max_workers=settings.concurrency) as pool:
        replies = list(pool.map(one, cases))
    missing = sum(r is None for r in replies)
    if missing:
        raise RunnerTimeoutError(f"openai runner: the run's deadline came before {missing} of {len(cases)} cases "
                          "were answered")
    return replies


def request_body(model: str, case: Case, default_max_tokens: int) -> dict[str, Any]:
    """The JSON body for one case, as the official client writes it for the same call."""
    body: dict[str, Any] = {
        "messages": list(case.messages), "model": model,
        "max_tokens": case.max_tokens or default_max_tokens,
        "stream": True, "stream_options": {"include_usage": True}, "temperature": 0,
    }
    if case.tools:
        body["tools"] = list(case.tools)
        body["tool_choice"] = "auto"
    return body


def complete(client: httpx.Client, base: str, body: dict[str, Any], timeout_s: float,
             stop_at: float) -> Reply:
    """Send one streaming chat completion and read its reply; a failure is the reply's ``error``.

    Raises:
        DeadlineReachedError: ``stop_at`` came before the request was sent or finished.
    """
    sent_at = time.monotonic()
    cut_at = min(sent_at + timeout_s, stop_at)
    if cut_at <= sent_at:
        raise DeadlineReachedError
    try:
        with client.stream("POST", f"{base}/chat/completions", json=body,
                           headers={"Accept": "text/event-stream"},
                           timeout=httpx.Timeout(cut_at - sent_at)) as response:
            if response.status_code != 200:
                return Reply(error=f"HTTP {response.status_code}: {_error_text(response)}")
            content_type = response.headers.get("content-type", "")
            if "text/event-stream" not in content_type:
                return Reply(error=f"the answer is {content_type or 'untyped'}, not an event stream "
                                   "(the server ignored stream: true)")
            return _read_stream(response, sent_at, cut_at, stop_at)
    except httpx.TimeoutException:
        if time.monotonic() >= stop_at:
            raise DeadlineReachedError from None
        return Reply(error=f"timed out after {timeout_s:g} s")
    except httpx.HTTPError as e:
        return Reply(error=f"{type(e).__name__}: {str(e)[:200] or 'connection failed'}")
    except StreamError as e:
        return Reply(error=str(e))


def _read_stream(response: httpx.Response, sent_at: float, cut_at: float, stop_at: float) -> Reply:
    state = _StreamState()
    done = False
    for data in sse_data(response.iter_bytes(), MAX_RESPONSE_BYTES):
        if time.monotonic() > cut_at:
            if cut_at >= stop_at:
                raise DeadlineReachedError
            raise httpx.ReadTimeout("the response took longer than the request timeout")
        if data.strip() == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise StreamError(f"a stream event is not JSON: {data[:80]!r}") from None
        state.add(chunk, time.monotonic())
    if not done and state.finish_reason is None:
        raise StreamError("the stream broke off: no finish_reason and no [DONE]")
    return state.reply(sent_at)


def sse_data(chunks: Iterator[bytes], limit: int) -> Iterator[str]:
    """The ``data`` of each server-sent event in a byte stream (``event``, ``id`` and comments ignored).

    Raises:
        StreamError: more than ``limit`` bytes, or data that is not UTF-8.

    Example:
        >>> list(sse_data(iter([b'data: {"a":', b' 1}\\n\\n: ping\\n\\ndata: [DONE]\\n\\n']), 1000))
        ['{"a": 1}', '[DONE]']
    """
    buffer = bytearray()
    lines: list[str] = []
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise StreamError(f"the response is larger than {limit} bytes")
        buffer += chunk
        while (end := buffer.find(b"\n")) >= 0:
            line = bytes(buffer[:end]).rstrip(b"\r")
            del buffer[:end + 1]
            if not line:
                if lines:
                    yield "\n".join(lines)
                    lines = []
                continue
            field, _, value = line.partition(b":")
            if field == b"data":
                try:
                    lines.append(value.removeprefix(b" ").decode("utf-8"))
                except UnicodeDecodeError:
                    raise StreamError("the stream is not UTF-8") from None
    if lines:
        yield "\n".join(lines)


class _StreamState:
    """A streamed chat completion put together chunk by chunk (choice 0 only)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None

    def add(self, chunk: Any, now: float) -> None:
        if not isinstance(chunk, dict):
            raise StreamError("a stream chunk is not a JSON object")
        if chunk.get("error"):
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise StreamError(f"the server reported an error mid-stream: {str(message)[:200]}")
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise StreamError("a stream chunk's choices is not a list")
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._add_choice(choice, now)

    def _add_choice(self, choice: dict[str, Any], now: float) -> None:
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise StreamError("a choice's delta is not an object")
        got = False
        for key in ("content", "refusal"):
            if isinstance(delta.get(key), str) and delta[key]:
                self.text.append(delta[key])
                got = True
        for fragment in delta.get("tool_calls") or []:
            index = fragment.get("index") if isinstance(fragment, dict) else None
            if type(index) is not int:
                raise StreamError("a tool_calls delta has no integer index")
            function = fragment.get("function") or {}
            call = self.calls.setdefault(index, {"name": "", "arguments": ""})
            for key in ("name", "arguments"):
                if isinstance(function.get(key), str):
                    call[key] += function[key]
            got = True
        if got:
            self.first_at = self.first_at if self.first_at is not None else now
            self.last_at = now
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])

    def reply(self, sent_at: float) -> Reply:
        tool_calls = []
        for index in sorted(self.calls):
            call = self.calls[index]
            if not call["name"]:
                raise StreamError(f"tool call {index} names no function")
            try:
                # An empty arguments string is a call without arguments (some servers send "" for {}).
                arguments = json.loads(call["arguments"]) if call["arguments"].strip() else {}
            except json.JSONDecodeError as e:
                raise StreamError(f"tool call {index} ({call['name']}): arguments are not JSON ({e.msg}): "
                                  f"{call['arguments'][:80]!r}") from None
            tool_calls.append(ToolCall(call["name"], arguments))
        tokens_in, tokens_out = _usage(self.usage)
        ttft = None if self.first_at is None else (self.first_at - sent_at) * 1000
        tpot = None
        if self.first_at is not None and tokens_out is not None and tokens_out >= 2:
            tpot = (self.last_at - self.first_at) * 1000 / (tokens_out - 1)
        return Reply(text="".join(self.text), tool_calls=tuple(tool_calls), ttft_ms=ttft, tpot_ms=tpot,
                     input_tokens=tokens_in, output_tokens=tokens_out)


def _usage(usage: dict[str, Any] | None) -> tuple[int | None, int | None]:
    if usage is None:
        return None, None
    counts = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
    return tuple(c if type(c) is int and c >= 0 else None for c in counts)  # type: ignore[return-value]


def _error_text(response: httpx.Response) -> str:
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) >= MAX_ERROR_BODY:
            break
    text = bytes(body[:MAX_ERROR_BODY]).decode("utf-8", "replace").strip()
    try:
        message = json.loads(text)["error"]["message"]
        return str(message)[:300]
    except (ValueError, KeyError, TypeError):
        return text[:300] or response.reason_phrase
