"""One guarded, bounded request to an engine's control endpoint (a simulator Atlas runs
itself: redeploy a scenario, apply a fix, read its clock).

The URL comes from a row people typed, so it gets the probes' treatment (probes.net): the
host is resolved once, every answer is checked against ATLAS_PROBE_ALLOWED_NETWORKS and
the always-blocked ranges, and the request goes to the checked address. The answer is read
under a byte cap and an overall deadline. A control token, when configured, travels as a
bearer header; it is never part of the URL (URLs are shown on pages and logged).
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from probes.net import FetchPolicy, ProbeError, resolve_checked, validate_url

MAX_ANSWER_BYTES = 256 * 1024


class ControlError(Exception):
    """The control request failed; the message says why, for people. ``status`` is the
    HTTP status when the endpoint answered with an error, ``detail`` its error text."""

    def __init__(self, message: str, *, status: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


def call(
    method: str,
    base_url: str,
    path: str,
    policy: FetchPolicy,
    *,
    payload: dict[str, Any] | None = None,
    token: str = "",
    what: str = "the simulator",
) -> Any:
    """``method`` ``base_url`` + ``path`` and return the decoded JSON answer."""
    try:
        url = validate_url(base_url)
        if url.scheme != "http":
            raise ControlError(f"the {_noun(what)} URL must be http:// (enginesim serves no TLS)")
        address = resolve_checked(url.host, url.port or 80, policy)
    except ProbeError as exc:
        raise ControlError(f"refused to contact {what}: {exc.message}") from None
    target = url.copy_with(host=address, path=url.path.rstrip("/") + path)
    headers = {"Host": url.netloc.decode("ascii")}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    status, body = _send(method, target, headers, payload, policy, what)
    if status != 200:
        detail = _error(body)
        raise ControlError(
            f"{what} refused the request (HTTP {status}): {detail}", status=status, detail=detail
        )
    try:
        return json.loads(body)
    except ValueError:
        raise ControlError(f"{what} answered with something that is not JSON") from None


def _noun(what: str) -> str:
    return what.removeprefix("the ")


def _send(method, target, headers, payload, policy: FetchPolicy, what: str) -> tuple[int, bytes]:
    timeout = httpx.Timeout(policy.read_timeout, connect=policy.connect_timeout)
    deadline = time.monotonic() + policy.total_timeout
    chunks, size = [], 0
    try:
        with (
            httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client,
            client.stream(method, target, json=payload, headers=headers) as resp,
        ):
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise ControlError(f"{what}'s answer exceeds {MAX_ANSWER_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise ControlError(f"{what} did not answer within {policy.total_timeout:g} s")
                chunks.append(chunk)
            return resp.status_code, b"".join(chunks)
    except httpx.TimeoutException:
        raise ControlError(f"{what} did not answer within {policy.total_timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise ControlError(f"cannot reach {what}: {exc}") from None


def _error(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error", ""))[:300]
    except (ValueError, AttributeError):
        return body[:300].decode("utf-8", errors="replace")
