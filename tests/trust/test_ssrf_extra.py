"""SSRF cases ``tests/probes/test_net.py`` does not cover, against real sockets on 127.0.0.1.

The guard judges the address a name resolves to (never the spelling), refuses a name if
any answer is outside the allow-list, re-resolves and re-checks for every new connection,
and follows redirects only within one origin. Each test below makes the guard decide
before anything connects: a wrong decision would show up as a ``connect`` error or a 200
instead of ``blocked-address`` / ``redirect`` / ``bad-url``.
"""

from __future__ import annotations

import ipaddress
import re

import pytest

from probes.net import (
    FetchPolicy,
    ProbeError,
    check_address,
    parse_networks,
)
from tests.support.hostile import _Handler, guarded_fetch, hostile_server

LOOPBACK = FetchPolicy(connect_timeout=1, read_timeout=1, total_timeout=3, max_bytes=1 << 20)
EVERYWHERE = FetchPolicy(
    allowed_networks=parse_networks(["0.0.0.0/0", "::/0"]), connect_timeout=1, total_timeout=3
)
# Loopback NOT allowed: only a documentation network nobody listens on.
ELSEWHERE = FetchPolicy(
    allowed_networks=parse_networks(["192.0.2.0/24", "2001:db8::/32"]),
    connect_timeout=1,
    total_timeout=3,
)


class _Redirects(_Handler):
    """Redirect chains that leave the origin after a hop or through an odd Location."""

    def _to(self, location: str) -> None:
        self._head("302 Found", {"Location": location}, 0)

    def _port(self) -> int:
        return self.server.server_address[1]

    def do_chain_1(self, path: str) -> None:
        self._to("/chain-2")

    def do_chain_2(self, path: str) -> None:
        self._to(f"http://localhost:{self._port()}/ok")

    def do_to_127_0_0_2(self, path: str) -> None:
        self._to(f"http://127.0.0.2:{self._port()}/ok")

    def do_protocol_relative(self, path: str) -> None:
        self._to("//169.254.169.254/latest/meta-data/")

    def do_to_https(self, path: str) -> None:
        self._to(f"https://127.0.0.1:{self._port()}/ok")

    def do_with_credentials(self, path: str) -> None:
        self._to(f"http://admin:secret@127.0.0.1:{self._port()}/ok")

    def do_to_file(self, path: str) -> None:
        self._to("file:///etc/passwd")

    def do_to_mapped_metadata(self, path: str) -> None:
        self._to("http://[::ffff:a9fe:a9fe]/latest/meta-data/")


@pytest.fixture(scope="module")
def server():
    with hostile_server(_Redirects) as base:
        yield base


def _fetch(url: str, policy: FetchPolicy = LOOPBACK):
    return guarded_fetch(url, policy)


def _error(url: str, policy: FetchPolicy = LOOPBACK) -> ProbeError:
    with pytest.raises(ProbeError) as caught:
        _fetch(url, policy)
    assert not caught.value.transient, caught.value  # refused for good, not "retry later"
    return caught.value


def _resolving_to(*answers: str, policy: FetchPolicy = LOOPBACK) -> FetchPolicy:
    return FetchPolicy(
        allowed_networks=policy.allowed_networks,
        resolver=lambda host, port: list(answers),
        connect_timeout=1,
        total_timeout=3,
    )


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "answer", ["10.0.0.5", "192.168.1.1", "172.16.0.1", "100.64.0.1", "fd12:3456::1", "fc00::1"]
)
def test_a_name_resolving_to_a_private_address_outside_the_allow_list_is_blocked(answer):
    error = _error("http://internal.example/metrics", _resolving_to(answer))
    assert error.kind == "blocked-address" and "outside the allowed networks" in error.message


@pytest.mark.parametrize(
    "answer",
    ["fe80::1", "fe80::1%eth0", "fe80::a9fe:a9fe", "::", "0.0.0.0", "0.1.2.3", "ff02::1"],  # noqa: S104
)
def test_a_name_resolving_to_link_local_unspecified_or_multicast_is_blocked_everywhere(answer):
    error = _error("http://sneaky.example/", _resolving_to(answer, policy=EVERYWHERE))
    assert error.kind == "blocked-address" and "never a probe target" in error.message


@pytest.mark.parametrize(
    "answer", ["::ffff:127.0.0.1", "::ffff:7f00:1", "64:ff9b::7f00:1", "2002:7f00:1::1"]
)
def test_ipv6_spellings_of_loopback_are_blocked_when_loopback_is_not_allowed(answer):
    error = _error("http://mapped.example:9/", _resolving_to(answer, policy=ELSEWHERE))
    assert error.kind == "blocked-address" and "127.0.0.1" in error.message


@pytest.mark.parametrize(
    "address", ["64:ff9b::a9fe:a9fe", "::ffff:0:a9fe:a9fe", "::a9fe:a9fe", "2002:a9fe:a9fe::"]
)
def test_ipv6_forms_that_embed_the_metadata_address_are_blocked_everywhere(address):
    """NAT64 (DNS64 networks route 64:ff9b::/96 to IPv4), SIIT and IPv4-compatible forms
    were judged as IPv6 addresses, so an allow-list of ::/0 let 169.254.169.254 through."""
    with pytest.raises(ProbeError, match=re.escape("169.254.169.254")):
        check_address(address, EVERYWHERE)
    assert _error(f"http://[{address}]/latest/", EVERYWHERE).kind == "blocked-address"


def test_embedded_ipv4_is_what_the_socket_connects_to(server):
    """The guard connects to the address it judged: 64:ff9b::7f00:1 is judged (and dialled)
    as 127.0.0.1, so a NAT64 spelling cannot reach anything the judgement did not allow."""
    assert check_address("64:ff9b::7f00:1", LOOPBACK) == ipaddress.ip_address("127.0.0.1")
    port = server.rsplit(":", 1)[1]
    policy = _resolving_to("64:ff9b::7f00:1")
    assert _fetch(f"http://nat64.example:{port}/ok", policy).status == 200


@pytest.mark.parametrize(
    "url",
    [
        "http://0x7f.0x0.0x0.0x1:9/",  # hex-dotted 127.0.0.1
        "http://0x7f.1:9/",  # hex, two parts
        "http://127.1:9/",  # short form
        "http://017700000001:9/",  # octal, one part
        "http://2130706433:9/",  # decimal
        "http://[::ffff:7f00:1]:9/",  # IPv6-mapped, hex words
        "http://[::ffff:127.0.0.1]:9/",  # IPv6-mapped, dotted
        "http://0177.0.0.1:9/",  # octal dotted (httpx refuses it as malformed)
        "http://localhost:9/",
    ],
)
def test_every_spelling_of_loopback_is_refused_when_loopback_is_not_allowed(url):
    """Port 9 has no listener: a guard that let the spelling through would fail with
    ``connect`` (transient), not ``blocked-address`` before connecting."""
    assert _error(url, ELSEWHERE).kind in ("blocked-address", "bad-url")


@pytest.mark.parametrize(
    "url", ["http://0xa9.0xfe.0xa9.0xfe/", "http://0xa9.0xfea9fe/", "http://169.254.43518/"]
)
def test_hex_dotted_and_short_forms_of_metadata_are_blocked_everywhere(url):
    assert _error(url, EVERYWHERE).kind in ("blocked-address", "bad-url")


# --------------------------------------------------------------------------- redirects


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/chain-1", "redirect"),  # same origin once, then another host name
        ("/to-127-0-0-2", "redirect"),  # another host in an allowed network: still refused
        ("/protocol-relative", "redirect"),
        ("/to-https", "redirect"),  # another scheme is another origin
        ("/with-credentials", "bad-url"),
        ("/to-file", "bad-url"),
        ("/to-mapped-metadata", "redirect"),
    ],
)
def test_redirect_chains_never_leave_the_origin(server, path, kind):
    error = _error(server + path, EVERYWHERE)
    assert error.kind == kind, error


def test_every_new_connection_resolves_and_is_checked_again(server):
    """DNS rebinding across connections: the first answer is loopback (allowed); the
    redirect closes the connection, and the name now answers the metadata address. The
    second connection must be judged on the new answer, not on a remembered approval."""
    answers = iter([["127.0.0.1"], ["169.254.169.254"]])
    calls: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        return next(answers)

    port = server.rsplit(":", 1)[1]
    policy = FetchPolicy(resolver=rebinding, connect_timeout=1, total_timeout=3)
    error = _error(f"http://rebind.example:{port}/redirect-same-origin", policy)
    assert error.kind == "blocked-address" and "169.254.169.254" in error.message
    assert calls == ["rebind.example", "rebind.example"]


def test_a_resolver_that_fails_or_answers_nothing_is_a_dns_error():
    def broken(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    for policy in (_resolving_to(), FetchPolicy(resolver=broken, total_timeout=3)):
        with pytest.raises(ProbeError) as caught:
            _fetch("http://nowhere.example/", policy)
        assert caught.value.kind == "dns"


@pytest.mark.parametrize("answer", ["not-an-ip", "127.0.0.1 ", "1.2.3.4.5", ""])
def test_a_resolver_answer_that_is_not_an_address_is_blocked(answer):
    assert _error("http://odd.example/", _resolving_to(answer)).kind == "blocked-address"
