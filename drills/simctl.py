"""Telling a drill range's simulator which incident to run: one guarded, bounded POST.

The simulator URL is typed in by people, so it gets the probes' treatment: the host is
resolved once, every answer is checked against ATLAS_PROBE_ALLOWED_NETWORKS and the
always-blocked ranges (probes.net), and the request goes to the checked address. The
answer is read under a byte cap and an overall deadline.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from probes.net import FetchPolicy, ProbeError, resolve_checked, validate_url

MAX_ANSWER_BYTES = 256 * 1024


class SimulatorError(Exception):
    """The range's simulator could not be switched; the message says why, for people."""


def switch_scenario(base_url: str, scenario: str, seed: int, policy: FetchPolicy) -> dict[str, Any]:
    """POST /control/scenario and return the simulator's ground truth for the new run."""
    try:
        url = validate_url(base_url)
        if url.scheme != "http":
            raise SimulatorError("the simulator URL must be http:// (enginesim serves no TLS)")
        address = resolve_checked(url.host, url.port or 80, policy)
    except ProbeError as exc:
        raise SimulatorError(f"refused to contact the simulator: {exc.message}") from None
    target = url.copy_with(host=address, path=url.path.rstrip("/") + "/control/scenario")
    body = _post(target, url.netloc.decode("ascii"), {"scenario": scenario, "seed": seed}, policy)
    try:
        truth = json.loads(body)
    except ValueError:
        raise SimulatorError("the simulator answered with something that is not JSON") from None
    if not isinstance(truth, dict):
        raise SimulatorError("the simulator's answer is not a JSON object")
    causes = truth.get("causes")
    if truth.get("scenario") != scenario or not (
        isinstance(causes, list) and all(isinstance(c, str) and len(c) <= 64 for c in causes)
    ):
        raise SimulatorError("the simulator did not confirm the scenario switch")
    return truth


def _post(target: httpx.URL, host_header: str, payload: dict, policy: FetchPolicy) -> bytes:
    timeout = httpx.Timeout(policy.read_timeout, connect=policy.connect_timeout)
    deadline = time.monotonic() + policy.total_timeout
    chunks, size = [], 0
    try:
        with (
            httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client,
            client.stream("POST", target, json=payload, headers={"Host": host_header}) as resp,
        ):
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise SimulatorError(f"the simulator's answer exceeds {MAX_ANSWER_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise SimulatorError(
                        f"the simulator did not answer within {policy.total_timeout:g} s"
                    )
                chunks.append(chunk)
            status = resp.status_code
    except httpx.TimeoutException:
        raise SimulatorError(
            f"the simulator did not answer within {policy.total_timeout:g} s"
        ) from None
    except httpx.HTTPError as exc:
        raise SimulatorError(f"cannot reach the simulator: {exc}") from None
    body = b"".join(chunks)
    if status != 200:
        raise SimulatorError(f"the simulator refused the switch (HTTP {status}): {_error(body)}")
    return body


def _error(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error", ""))[:300]
    except (ValueError, AttributeError):
        return body[:300].decode("utf-8", errors="replace")
