"""Send a plan to ``/v1/completions`` open-loop and time the streamed responses.

Each request leaves at its planned time whether or not earlier ones have finished (an
in-flight cap only protects the client itself; requests it refuses are reported as
``skipped``, never silently delayed). The run is bounded: every request has a timeout,
and the run a deadline after which whatever is still streaming is cancelled and
reported as ``cancelled``. By default only loopback targets are allowed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from loadgen.plan import PlannedRequest, prompt_ids
from loadgen.report import Outcome

MAX_LINE = 1 << 20
MAX_IN_FLIGHT = 1024


class TargetRefused(ValueError):
    """The target is not a loopback address and remote targets were not allowed."""


@dataclass
class RunResult:
    outcomes: list[Outcome]
    wall_s: float


def check_target(url: str, *, allow_remote: bool = False) -> str:
    """The completions URL for ``url`` (a base URL or one ending in /v1/completions)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetRefused(f"{url}: expected an http(s) URL")
    if not allow_remote:
        host = parts.hostname
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            raise TargetRefused(f"{url}: not a loopback address (pass allow_remote to send there)")
    path = parts.path.rstrip("/")
    if not path.endswith("/v1/completions"):
        path = f"{path}/v1/completions"
    return f"{parts.scheme}://{parts.netloc}{path}"


def _body(r: PlannedRequest, model: str, seed: int, vocab: int, ignore_eos: bool) -> dict:
    body = {
        "model": model,
        "prompt": prompt_ids(seed, r.seq, r.prompt_tokens, vocab),
        "max_tokens": r.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
        "ignore_eos": ignore_eos,
        "temperature": 0.0,
    }
    if r.priority:
        body["priority"] = r.priority  # vLLM refuses non-zero priority under FCFS
    return body


def _events(buffer: bytearray):
    """Complete ``data:`` payloads in ``buffer`` (consumed); bounded line length."""
    while True:
        end = buffer.find(b"\n")
        if end < 0:
            if len(buffer) > MAX_LINE:
                raise ValueError("response line too long")
            return
        line = bytes(buffer[:end]).strip()
        del buffer[: end + 1]
        if line.startswith(b"data:"):
            yield line[5:].strip()


async def _one(
    client: httpx.AsyncClient, url: str, body: dict, outcome: Outcome, t0: float
) -> None:
    sent = time.monotonic()
    outcome.sent_at_s = sent - t0
    last: float | None = None
    usage_tokens = None
    async with client.stream("POST", url, json=body) as response:
        outcome.http_status = response.status_code
        if response.status_code != 200:
            text = (await response.aread())[:300].decode(errors="replace")
            outcome.status, outcome.error = "error", f"HTTP {response.status_code}: {text}"
            return
        buffer = bytearray()
        async for data in response.aiter_bytes():
            buffer += data
            now = time.monotonic()
            for payload in _events(buffer):
                if payload == b"[DONE]":
                    continue
                chunk = json.loads(payload)
                usage = chunk.get("usage") or {}
                if usage.get("completion_tokens") is not None:
                    usage_tokens = int(usage["completion_tokens"])
                for choice in chunk.get("choices") or []:
                    ids = choice.get("token_ids")
                    tokens = len(ids) if isinstance(ids, list) else (1 if choice.get("text") else 0)
                    if choice.get("finish_reason"):
                        outcome.finish_reason = choice["finish_reason"]
                    if tokens <= 0:
                        continue
                    if last is None:
                        # Tokens that came with the first one arrived with no gap at all.
                        outcome.ttft_s = now - sent
                        outcome.itl_s.extend([0.0] * (tokens - 1))
                    else:
                        outcome.itl_s.extend([(now - last) / tokens] * tokens)
                    last = now
                    outcome.output_tokens += tokens
    outcome.e2e_s = time.monotonic() - sent
    if usage_tokens is not None:
        outcome.output_tokens = usage_tokens
    outcome.status = "ok"


async def _guarded(client, url, body, outcome, t0, timeout_s) -> None:
    try:
        await asyncio.wait_for(_one(client, url, body, outcome, t0), timeout_s)
    except TimeoutError:
        outcome.status, outcome.error = "error", f"timed out after {timeout_s:g} s"
    except asyncio.CancelledError:
        outcome.status, outcome.error = "cancelled", "run deadline"
        raise
    except (httpx.HTTPError, ValueError, OSError) as exc:
        outcome.status, outcome.error = "error", f"{type(exc).__name__}: {exc}"[:300]


async def run_plan_async(
    plan: Sequence[PlannedRequest],
    url: str,
    *,
    model: str,
    seed: int = 0,
    vocab: int = 4096,
    max_in_flight: int = 256,
    request_timeout_s: float = 120.0,
    deadline_s: float | None = None,
    ignore_eos: bool = True,
    allow_remote: bool = False,
) -> RunResult:
    target = check_target(url, allow_remote=allow_remote)
    if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
        raise ValueError(f"max_in_flight must be between 1 and {MAX_IN_FLIGHT}")
    last_at = max((r.at_s for r in plan), default=0.0)
    # By default the deadline only catches what the request timeout somehow did not.
    deadline_s = last_at + request_timeout_s + 5.0 if deadline_s is None else deadline_s
    outcomes = [Outcome(r.seq, r.prompt_tokens, r.max_tokens, r.priority, r.at_s) for r in plan]
    # One connection per stream, none kept alive: vLLM's server closes a connection idle
    # for 5 s (uvicorn's keep-alive) and httpx kept one for 5 s, so a request sent on an
    # idle connection as the server closed it ended in a ReadError (1 stream in ~240 on a
    # busy machine), and a POST cannot be retried (the engine may already be generating
    # it). A loopback connect costs far less than a request.
    limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=0)
    timeout = httpx.Timeout(request_timeout_s, connect=10.0)
    tasks: set[asyncio.Task] = set()
    t0 = time.monotonic()
    async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
        for r, outcome in zip(plan, outcomes, strict=True):
            if r.at_s > deadline_s:
                outcome.status, outcome.error = "skipped", "after the run deadline"
                continue
            delay = t0 + r.at_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks = {t for t in tasks if not t.done()}
            if len(tasks) >= max_in_flight:
                outcome.status, outcome.error = "skipped", "client in-flight cap"
                continue
            body = _body(r, model, seed, vocab, ignore_eos)
            tasks.add(asyncio.create_task(
                _guarded(client, target, body, outcome, t0, request_timeout_s)
            ))  # fmt: skip
        remaining = t0 + deadline_s - time.monotonic()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=max(0.0, remaining))
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    return RunResult(outcomes, time.monotonic() - t0)


def run_plan(plan: Sequence[PlannedRequest], url: str, **kwargs) -> RunResult:
    """Synchronous wrapper (one event loop for the run)."""
    return asyncio.run(run_plan_async(plan, url, **kwargs))
