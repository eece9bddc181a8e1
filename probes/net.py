"""The only way probes reach the network: an SSRF-guarded, bounded HTTP client.

Probe targets are typed in by people and arrive in alert payloads, so every URL is
treated as hostile. The guard sits in the connection layer, not in URL parsing:
the host name is resolved once, every resolved address is checked against the
allow-list and the always-blocked ranges, and the socket connects to the address
that was checked. A DNS answer that changes between check and connect therefore
cannot redirect the probe, and decimal, octal or IPv6-mapped spellings of an
address are judged by the address they resolve to. Redirects are followed only
within the same origin. Every response is read with a byte cap and an overall
deadline, so a hung, slow, lying or huge endpoint costs one bounded error.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

import httpx

from probes import aio, http11

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]

# Never reachable, whatever the allow-list says: link-local (which holds the cloud
# metadata service on 169.254.169.254), other providers' metadata endpoints, and
# addresses that are not a single host.
ALWAYS_BLOCKED: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(net)
    for net in (
        "0.0.0.0/8",
        "169.254.0.0/16",
        "100.100.100.200/32",  # Alibaba Cloud metadata
        "168.63.129.16/32",  # Azure wire server
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/128",
        "fe80::/10",
        "fd00:ec2::254/128",  # AWS metadata over IPv6
        "ff00::/8",
    )
)
DEFAULT_ALLOWED: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("::1/128"),
)
ALLOWED_SCHEMES = ("http", "https")
# Response headers a probe may use; everything else is dropped with the response.
KEPT_HEADERS = ("content-type", "x-log-next-offset", "x-log-start-offset")


class ProbeError(Exception):
    """A probe failed in a way the console shows on the target's health strip.

    ``transient`` errors (timeouts, refused connections, 5xx) are worth retrying
    on the next cycle; permanent ones (blocked address, bad URL, oversize body)
    will fail the same way until someone changes the target.
    """

    def __init__(self, kind: str, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.transient = transient

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass(frozen=True)
class FetchPolicy:
    allowed_networks: tuple[IPNetwork, ...] = DEFAULT_ALLOWED
    connect_timeout: float = 2.0
    read_timeout: float = 5.0
    total_timeout: float = 8.0
    max_bytes: int = 8 * 1024 * 1024
    max_redirects: int = 3
    resolver: Resolver | None = field(default=None, compare=False)


@dataclass(frozen=True)
class FetchResult:
    url: str
    status: int
    content_type: str
    body: bytes
    elapsed_s: float
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.body)

    def text(self) -> str:
        """Decode as UTF-8, replacing invalid bytes: an engine's text is evidence, not code."""
        return self.body.decode("utf-8", errors="replace")


def parse_networks(items: Iterable[str]) -> tuple[IPNetwork, ...]:
    """CIDR strings to networks; raises ValueError naming the bad item."""
    networks = []
    for item in items:
        try:
            networks.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"{item!r} is not a network in CIDR notation ({exc})") from None
    return tuple(networks)


# IPv6 prefixes whose last 32 bits are an IPv4 address the packet ends up at: NAT64's
# well-known prefix (RFC 6052; DNS64 networks route it to IPv4), SIIT's IPv4-translated
# form (RFC 2765) and the deprecated IPv4-compatible form. Judged as that IPv4 address, so
# 64:ff9b::a9fe:a9fe is the metadata service even when the allow-list says ::/0.
_EMBEDS_IPV4 = tuple(
    ipaddress.ip_network(net) for net in ("64:ff9b::/96", "::ffff:0:0:0/96", "::/96")
)


def _normalise(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if int(address) > 1 and any(address in net for net in _EMBEDS_IPV4):  # not :: or ::1
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def check_address(raw: str, policy: FetchPolicy) -> IPAddress:
    """Raise ProbeError unless ``raw`` is an allowed destination; return it normalised."""
    try:
        address = _normalise(ipaddress.ip_address(raw.split("%", 1)[0]))
    except ValueError:
        raise ProbeError(
            "blocked-address", f"{raw!r} is not an IP address", transient=False
        ) from None
    if any(address in net for net in ALWAYS_BLOCKED if net.version == address.version):
        raise ProbeError(
            "blocked-address",
            f"{address} is link-local, metadata or otherwise never a probe target",
            transient=False,
        )
    if not any(address in net for net in policy.allowed_networks if net.version == address.version):
        raise ProbeError(
            "blocked-address",
            f"{address} is outside the allowed networks (ATLAS_PROBE_ALLOWED_NETWORKS)",
            transient=False,
        )
    return address


# Names that are the cloud metadata service wherever they resolve: refused by name, at
# registration and at connection, before any DNS answer is asked for.
METADATA_NAMES = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
     "instance-data.ec2.internal", "metadata.azure.com"}
)  # fmt: skip


def literal_address(host: str) -> str | None:
    """The address ``host`` spells, if the resolver would read it as numeric without DNS.

    That is wider than dotted quads: ``2852039166``, ``0xa9fea9fe``, ``0251.0376.0251.0376``
    and ``169.254.43518`` are all 169.254.169.254 to getaddrinfo (inet_aton's rules)."""
    bare = host.strip("[]").split("%", 1)[0]
    try:
        infos = socket.getaddrinfo(bare, None, flags=socket.AI_NUMERICHOST)
    except (OSError, UnicodeError, ValueError):
        return None
    return str(infos[0][4][0]) if infos else None


def check_registered_url(url: str, policy: FetchPolicy) -> None:
    """Refuse at registration what every connection would refuse (issue 19.13).

    An address literal is judged now by the same rules as at connect time (always-blocked
    ranges, then the allow-list), so a metadata, link-local or disallowed private address
    is an error on the form, not a target that fails every cycle. A name is not resolved
    here (the web process may not see the workers' DNS, and an answer can change): it is
    judged at each connection, unless it is a well-known metadata name."""
    host = validate_url(url).host.lower().rstrip(".")
    if host in METADATA_NAMES:
        raise ProbeError(
            "blocked-address", f"{host} is the cloud metadata service", transient=False
        )
    address = literal_address(host)
    if address is not None:
        check_address(address, policy)


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [info[4][0] for info in infos]


def resolve_checked(host: str, port: int, policy: FetchPolicy) -> str:
    """Resolve once and return the first address, provided *every* answer is allowed.

    Refusing when any answer is blocked stops a name that mixes a public and a
    metadata address from being used for a round-robin bypass.
    """
    if host.lower().rstrip(".") in METADATA_NAMES:
        raise ProbeError(
            "blocked-address", f"{host} is the cloud metadata service", transient=False
        )
    resolver = policy.resolver or system_resolver
    try:
        answers = list(dict.fromkeys(resolver(host, port)))
    except (OSError, UnicodeError) as exc:
        raise ProbeError("dns", f"cannot resolve {host!r}: {exc}", transient=True) from None
    if not answers:
        raise ProbeError("dns", f"{host!r} has no addresses", transient=True)
    checked = [check_address(answer, policy) for answer in answers]
    return str(checked[0])


class ProbeClient:
    """A guarded connection pool: every new connection goes to an address that
    ``resolve_checked`` approved, resolved once and off the event loop."""

    def __init__(self, policy: FetchPolicy, max_connections: int) -> None:
        self.policy = policy
        self.pool = http11.Pool(
            self._connect,
            max_connections=max_connections,
            connect_timeout=policy.connect_timeout,
            read_timeout=policy.read_timeout,
        )

    async def _connect(self, host: str, port: int) -> str:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            # A name (or an odd spelling of an address): resolution may block, so keep
            # it off the event loop; one slow DNS answer must not stall the cycle.
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, resolve_checked, host, port, self.policy)
        return str(check_address(str(address), self.policy))

    async def __aenter__(self) -> ProbeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pool.aclose()


def guarded_async_client(policy: FetchPolicy, *, max_connections: int = 64) -> ProbeClient:
    return ProbeClient(policy, max_connections)


def validate_url(url: str) -> httpx.URL:
    """Reject what can never be a probe target before any connection is attempted."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise ProbeError("bad-url", f"not a URL: {exc}", transient=False) from None
    if parsed.scheme not in ALLOWED_SCHEMES:
        raise ProbeError("bad-url", f"scheme {parsed.scheme!r} is not http/https", transient=False)
    if parsed.userinfo:
        raise ProbeError(
            "bad-url", "credentials in URLs are refused; use a target token", transient=False
        )
    if not parsed.host:
        raise ProbeError("bad-url", "the URL has no host", transient=False)
    return parsed


def _redirect_target(response: http11.RawResponse, current: httpx.URL) -> httpx.URL:
    location = response.headers.get("location")
    if not location:
        raise ProbeError("redirect", f"HTTP {response.status} without Location", transient=False)
    target = validate_url(str(current.join(location)))
    if (target.scheme, target.host, target.port) != (current.scheme, current.host, current.port):
        raise ProbeError(
            "redirect",
            f"redirect to another origin refused: {target.scheme}://{target.host}",
            transient=False,
        )
    return target


def _status_error(response: http11.RawResponse) -> ProbeError:
    transient = response.status >= 500 or response.status == 429
    return ProbeError(
        "http-status", f"HTTP {response.status} {response.reason}".strip(), transient=transient
    )


# Transport failures: worth retrying next cycle, or not until someone changes something.
TRANSIENT_KINDS = frozenset({"timeout", "connect"})


def _origin(url: httpx.URL) -> tuple[str, str, int]:
    return url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80)


async def afetch(
    client: ProbeClient,
    url: str,
    policy: FetchPolicy,
    *,
    accept_status: Collection[int] = (),
) -> FetchResult:
    """Async ``fetch``, bounded by an overall deadline as well as per-read timeouts.

    A status of 400 or more raises ``http-status`` unless it is in ``accept_status``:
    then its body is read under the same bounds and returned, for APIs (Prometheus)
    that explain their errors in the body. Redirects are never "accepted".
    """
    started = time.monotonic()
    try:
        async with asyncio.timeout(policy.total_timeout):
            return await _afetch(client, url, policy, started, frozenset(accept_status))
    except TimeoutError:
        raise ProbeError(
            "timeout", f"no complete answer within {policy.total_timeout:g} s", transient=True
        ) from None


async def _afetch(client, url, policy, started, accept_status) -> FetchResult:
    current = validate_url(url)
    deadline = asyncio.get_running_loop().time() + policy.total_timeout
    for _ in range(policy.max_redirects + 1):
        try:
            response = await client.pool.get(
                _origin(current),
                current.raw_path.decode("ascii"),
                max_bytes=policy.max_bytes,
                headers={},
                deadline=deadline,
            )
        except http11.HTTPError as exc:
            raise ProbeError(exc.kind, str(exc), transient=exc.kind in TRANSIENT_KINDS) from None
        if response.status in REDIRECT_STATUSES:
            current = _redirect_target(response, current)
            continue
        if response.status >= 400 and response.status not in accept_status:
            raise _status_error(response)
        return FetchResult(
            url=str(current),
            status=response.status,
            content_type=response.headers.get("content-type", ""),
            body=response.body,
            elapsed_s=time.monotonic() - started,
            headers=_kept(response),
        )
    raise ProbeError("redirect", f"more than {policy.max_redirects} redirects", transient=False)


REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


def _kept(response: http11.RawResponse) -> dict[str, str]:
    return {name: response.headers[name][:200] for name in KEPT_HEADERS if name in response.headers}


async def apost(
    client: ProbeClient,
    url: str,
    body: bytes,
    policy: FetchPolicy,
    *,
    content_type: str = "application/json",
) -> FetchResult:
    """POST one body through the guard (chat webhooks): same address checks, byte cap and
    deadline as ``afetch``. Redirects are refused, not followed: re-sending a POST to
    wherever a Location points is how a webhook would be steered somewhere else."""
    started = time.monotonic()
    current = validate_url(url)
    try:
        async with asyncio.timeout(policy.total_timeout):
            deadline = asyncio.get_running_loop().time() + policy.total_timeout
            try:
                response = await client.pool.get(
                    _origin(current),
                    current.raw_path.decode("ascii"),
                    max_bytes=policy.max_bytes,
                    headers={"Content-Type": content_type},
                    deadline=deadline,
                    method="POST",
                    body=body,
                )
            except http11.HTTPError as exc:
                raise ProbeError(
                    exc.kind, str(exc), transient=exc.kind in TRANSIENT_KINDS
                ) from None
    except TimeoutError:
        raise ProbeError(
            "timeout", f"no complete answer within {policy.total_timeout:g} s", transient=True
        ) from None
    if response.status in REDIRECT_STATUSES:
        raise ProbeError("redirect", "a webhook answered with a redirect", transient=False)
    if response.status >= 400:
        raise _status_error(response)
    return FetchResult(
        url=str(current),
        status=response.status,
        content_type=response.headers.get("content-type", ""),
        body=response.body,
        elapsed_s=time.monotonic() - started,
        headers=_kept(response),
    )


def post(
    url: str, body: bytes, policy: FetchPolicy, *, content_type: str = "application/json"
) -> FetchResult:
    """``apost`` for synchronous callers (a Celery task): one guarded connection, closed after."""

    async def once() -> FetchResult:
        async with guarded_async_client(policy, max_connections=1) as client:
            return await apost(client, url, body, policy, content_type=content_type)

    return aio.run(once())
