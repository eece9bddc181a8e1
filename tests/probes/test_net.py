"""The guarded client against real hostile endpoints on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import re
import threading

import pytest

from probes import net
from probes.net import (
    METADATA_NAMES,
    FetchPolicy,
    ProbeError,
    afetch,
    apost,
    check_address,
    check_registered_url,
    guarded_async_client,
    literal_address,
    parse_networks,
    post,
    resolve_checked,
    validate_url,
)
from tests.support.hostile import _Handler, guarded_fetch, hostile_server

LOOPBACK = FetchPolicy(connect_timeout=1, read_timeout=1, total_timeout=3, max_bytes=1 << 20)
# For the size-cap tests: deadlines so generous that only the cap can end the fetch, however
# busy the machine (the deadline has tests of its own: /hang and /slow never finish).
SIZE_ONLY = FetchPolicy(connect_timeout=30, read_timeout=30, total_timeout=120, max_bytes=1 << 20)
EVERYWHERE = FetchPolicy(allowed_networks=parse_networks(["0.0.0.0/0", "::/0"]))


@pytest.fixture(scope="module")
def server():
    with hostile_server() as base:
        yield base


def _fetch(url: str, policy: FetchPolicy = LOOPBACK):
    return guarded_fetch(url, policy)


def _error(url: str, policy: FetchPolicy = LOOPBACK) -> ProbeError:
    with pytest.raises(ProbeError) as caught:
        _fetch(url, policy)
    return caught.value


def test_an_allowed_target_answers(server):
    result = _fetch(server + "/ok")
    assert result.status == 200 and result.body.startswith(b"# TYPE up gauge")


def test_a_hanging_target_is_a_bounded_transient_timeout(server):
    error = _error(server + "/hang")
    assert error.kind == "timeout" and error.transient


def test_a_trickling_target_hits_the_overall_deadline(server):
    error = _error(server + "/slow")
    assert error.kind == "timeout" and error.transient


def test_a_50_mb_body_is_cut_off_at_the_cap(server):
    error = _error(server + "/huge", SIZE_ONLY)
    assert error.kind == "too-large" and not error.transient


def test_a_gzip_bomb_is_counted_after_decoding(server):
    error = _error(server + "/gzip-bomb", SIZE_ONLY)
    assert error.kind == "too-large"


def test_garbage_instead_of_http_is_a_protocol_error(server):
    error = _error(server + "/garbage")
    assert error.kind in ("protocol", "transport")


def test_a_redirect_to_the_metadata_service_is_refused(server):
    error = _error(server + "/redirect-metadata", EVERYWHERE)
    assert error.kind == "redirect" and "169.254.169.254" in error.message


def test_a_redirect_to_another_host_name_is_refused(server):
    assert _error(server + "/redirect-other-host").kind == "redirect"


def test_a_redirect_to_another_port_of_the_same_host_is_refused(server):
    """Another port is another origin (issue 19.14: a guard comparing scheme and host only
    passed every test). The other port really answers, so following it would succeed."""
    with hostile_server() as other:
        other_port = other.rsplit(":", 1)[1]
        assert _fetch(other + "/ok").status == 200
        error = _error(f"{server}/redirect-other-port?port={other_port}")
    assert error.kind == "redirect" and "another origin" in error.message


def test_a_same_origin_redirect_is_followed(server):
    assert _fetch(server + "/redirect-same-origin").url.endswith("/ok")


def test_redirect_loops_end(server):
    assert "redirects" in _error(server + "/redirect-loop").message


def test_server_errors_are_transient_and_client_errors_permanent(server):
    assert _error(server + "/error").transient
    assert not _error(server + "/missing").transient


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/",
        "http://[::ffff:169.254.169.254]/",  # IPv6-mapped IPv4
        "http://0251.0376.0251.0376/",  # octal spelling of 169.254.169.254
        "http://2852039166/",  # decimal spelling of 169.254.169.254
        "http://0xa9fea9fe/",  # hex spelling
        "http://100.100.100.200/",
        "http://[fd00:ec2::254]/",
        "http://0.0.0.0:80/",
    ],
)
def test_metadata_and_link_local_are_blocked_even_when_everything_is_allowed(url):
    error = _error(url, EVERYWHERE)
    # httpx already refuses some spellings as malformed; either way nothing is connected to.
    assert error.kind in ("blocked-address", "bad-url"), error
    assert not error.transient


# Every provider's metadata endpoint, by address (issue 19.14: removing Azure's wire server
# from the always-blocked list passed every test). Judged with everything allowed, so only
# the always-blocked list can refuse them, and with a refusal that says so.
METADATA_ENDPOINTS = [
    "http://169.254.169.254/latest/meta-data/",  # AWS, GCP, Azure IMDS, Oracle, DigitalOcean
    "http://[fd00:ec2::254]/latest/meta-data/",  # AWS over IPv6
    "http://168.63.129.16/machine?comp=goalstate",  # Azure wire server
    "http://[::ffff:168.63.129.16]/machine",  # the same, IPv4-mapped
    "http://[64:ff9b::a83f:8110]/machine",  # the same, through NAT64
    "http://100.100.100.200/latest/meta-data/",  # Alibaba Cloud
]


@pytest.mark.parametrize("url", METADATA_ENDPOINTS)
def test_every_providers_metadata_endpoint_is_always_blocked(url):
    error = _error(url, EVERYWHERE)
    assert error.kind == "blocked-address", error
    assert "metadata or otherwise never a probe target" in error.message


@pytest.mark.parametrize("neighbour", ["168.63.129.15", "168.63.129.17", "100.100.100.201"])
def test_the_metadata_blocks_are_single_addresses(neighbour):
    """Their neighbours are ordinary addresses: the block is the entry, not a wider rule."""
    assert str(check_address(neighbour, EVERYWHERE)) == neighbour


@pytest.mark.parametrize(
    "url", ["http://2130706433:9/", "http://0x7f000001:9/", "http://10.1.2.3/"]
)
def test_addresses_outside_the_allow_list_are_blocked(url):
    policy = FetchPolicy(allowed_networks=parse_networks(["192.0.2.0/24"]))
    assert _error(url, policy).kind == "blocked-address"


def test_a_name_resolving_to_a_metadata_address_is_blocked():
    policy = FetchPolicy(
        allowed_networks=EVERYWHERE.allowed_networks,
        resolver=lambda host, port: ["169.254.169.254"],
    )
    error = _error("http://metadata.attacker.example/", policy)
    assert error.kind == "blocked-address"


def test_a_name_with_any_blocked_answer_is_refused():
    policy = FetchPolicy(
        allowed_networks=EVERYWHERE.allowed_networks,
        resolver=lambda host, port: ["127.0.0.1", "169.254.169.254"],
    )
    assert _error("http://round-robin.example/", policy).kind == "blocked-address"


def test_the_connection_goes_to_the_address_that_was_checked(server):
    """DNS rebinding: a resolver that answers differently on the second call must not matter,
    because the name is resolved once and the socket connects to the checked address."""
    answers = iter([["127.0.0.1"], ["169.254.169.254"]])
    calls = []

    def rebinding(host, port):
        calls.append(host)
        return next(answers)

    port = server.rsplit(":", 1)[1]
    policy = FetchPolicy(resolver=rebinding, total_timeout=3)
    result = _fetch(f"http://rebind.example:{port}/ok", policy)
    assert result.status == 200
    assert calls == ["rebind.example"]


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("ftp://127.0.0.1/metrics", "scheme"),
        ("file:///etc/passwd", "scheme"),
        ("http://admin:secret@127.0.0.1/metrics", "credentials"),
        ("gopher://127.0.0.1:6379/_FLUSHALL", "scheme"),
        ("http:///metrics", "host"),
    ],
)
def test_urls_that_can_never_be_targets_fail_before_connecting(url, fragment):
    error = _error(url, EVERYWHERE)
    assert error.kind == "bad-url" and fragment in error.message


def test_check_address_normalises_mapped_addresses():
    assert check_address("::ffff:127.0.0.1", LOOPBACK) == ipaddress.ip_address("127.0.0.1")


def test_parse_networks_names_the_bad_item():
    with pytest.raises(ValueError, match=re.escape("'10.0.0.0/33'")):
        parse_networks(["10.0.0.0/8", "10.0.0.0/33"])


def test_one_hung_target_does_not_hold_up_the_others(server):
    """Concurrent polling: fast targets finish while the hung one is still waiting."""

    async def run():
        finished: list[str] = []
        async with guarded_async_client(LOOPBACK) as client:

            async def one(path):
                try:
                    await afetch(client, server + path, LOOPBACK)
                    finished.append(path)
                except ProbeError as exc:
                    finished.append(f"{path}:{exc.kind}")

            await asyncio.gather(one("/hang"), *(one("/ok") for _ in range(8)))
        return finished

    finished = asyncio.run(run())
    assert finished[:8] == ["/ok"] * 8
    assert finished[8] == "/hang:timeout"


def test_async_fetch_enforces_the_same_bounds(server):
    async def run(path):
        async with guarded_async_client(LOOPBACK) as client:
            return await afetch(client, server + path, LOOPBACK)

    with pytest.raises(ProbeError, match="too-large"):
        asyncio.run(run("/huge"))
    with pytest.raises(ProbeError, match="redirect"):
        asyncio.run(run("/redirect-other-host"))
    assert asyncio.run(run("/ok")).status == 200


def test_accepted_error_statuses_return_their_body_and_others_still_raise(server):
    """APIs such as Prometheus explain 4xx/5xx answers in the body; the caller opts in per
    status, and the byte cap, deadline and redirect rules stay the same."""

    async def run(path, accept):
        async with guarded_async_client(LOOPBACK) as client:
            return await afetch(client, server + path, LOOPBACK, accept_status=accept)

    result = asyncio.run(run("/error", {503}))
    assert (result.status, result.body) == (503, b"busy")
    with pytest.raises(ProbeError, match="http-status") as caught:
        asyncio.run(run("/missing", {503}))
    assert not caught.value.transient
    with pytest.raises(ProbeError, match="too-large"):
        asyncio.run(run("/huge", {503}))
    with pytest.raises(ProbeError, match="redirect"):
        asyncio.run(run("/redirect-metadata", {302, 503}))


# --- survivors of the mutation run (.ci/mutation, issue 19.14) --------------------------------


def test_the_default_fetch_policy_is_the_documented_one_and_frozen():
    """The deadlines, the body cap and the redirect count every probe runs under unless a
    target says otherwise (docs/threat-model.md); shared by every fetch, so immutable."""
    import dataclasses

    policy = FetchPolicy()
    assert (policy.connect_timeout, policy.read_timeout, policy.total_timeout) == (2.0, 5.0, 8.0)
    assert (policy.max_bytes, policy.max_redirects) == (8 * 1024 * 1024, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.max_bytes = 1  # type: ignore[misc]


def test_the_headers_the_log_follower_reads_are_kept(server):
    """Only these headers survive the fetch; dropping one silently breaks log paging."""
    fetched = _fetch(server + "/log-huge-offset")
    assert fetched.headers == {
        "content-type": "text/plain",
        "x-log-next-offset": "99999999999999999999999",
    }


def test_a_probe_error_reads_as_kind_then_message():
    """The health strip and the poll log show ``str(error)``."""
    assert str(ProbeError("redirect", "to another origin", transient=False)) == (
        "redirect: to another origin"
    )


# Refused by name, before any DNS answer is asked for (issue 19.14: the runner of the
# mutation run is this file, and removing a name or inverting the check left it green).
# Written out, not read from METADATA_NAMES: a name dropped from the set must fail here.
WELL_KNOWN_METADATA_NAMES = [
    "instance-data",
    "instance-data.ec2.internal",
    "metadata",
    "metadata.azure.com",
    "metadata.goog",
    "metadata.google.internal",
]


def test_the_metadata_names_are_the_well_known_ones():
    assert sorted(METADATA_NAMES) == WELL_KNOWN_METADATA_NAMES


@pytest.mark.parametrize("name", WELL_KNOWN_METADATA_NAMES)
@pytest.mark.parametrize("spelling", [str, str.upper, lambda n: n + "."])
def test_every_metadata_name_is_refused_by_name_at_registration_and_at_connection(name, spelling):
    asked: list[str] = []

    def public(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["8.8.8.8"]

    policy = dataclasses.replace(EVERYWHERE, resolver=public)
    host = spelling(name)
    with pytest.raises(ProbeError) as registered:
        check_registered_url(f"http://{host}/latest/meta-data/", policy)
    with pytest.raises(ProbeError) as connected:
        resolve_checked(host, 80, policy)
    for error in (registered.value, connected.value):
        assert error.kind == "blocked-address" and "cloud metadata service" in error.message
        assert not error.transient  # the same name fails the same way every cycle
    assert asked == []


def test_an_ordinary_name_is_left_to_the_connection_and_resolved_there():
    asked: list[str] = []

    def public(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["8.8.8.8", "8.8.4.4"]

    policy = dataclasses.replace(EVERYWHERE, resolver=public)
    check_registered_url("http://metadata.example.com:8000/metrics", policy)  # no DNS here
    assert asked == []
    assert resolve_checked("metadata.example.com", 8000, policy) == "8.8.8.8"
    assert asked == ["metadata.example.com"]


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("169.254.169.254", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("[fe80::1%eth0]", "fe80::1"),
        # A zone no interface has: still a literal (cut before asking), refused at
        # registration, not left to the connection as if it were a name.
        ("[fe80::1%nosuchzone]", "fe80::1"),
        ("[::1]", "::1"),
        ("probe.example.com", None),
    ],
)
def test_literal_address_reads_what_the_resolver_would_read_without_dns(host, address):
    assert literal_address(host) == address


class _LogRelay(_Handler):
    """A log relay that pages with both offsets and sends what a probe must not keep."""

    def do_log_window(self, path: str) -> None:
        body = b"INFO engine started\n"
        headers = {
            "Content-Type": "text/plain",
            "X-Log-Start-Offset": "7",
            "X-Log-Next-Offset": "9" * 300,
            "Set-Cookie": "session=secret",
            "X-Engine-Build": "abc",
        }
        self._head("200 OK", headers, len(body))
        self.wfile.write(body)


def test_only_the_kept_headers_survive_and_each_is_cut_at_200_characters():
    """The log follower pages by both offsets (issue 19.14: dropping the start offset from
    the kept list passed); anything else a target sends is dropped with the response, and a
    kept value is cut at 200 characters however long the target makes it."""
    with hostile_server(_LogRelay) as base:
        fetched = _fetch(base + "/log-window")
    assert fetched.headers == {
        "content-type": "text/plain",
        "x-log-start-offset": "7",
        "x-log-next-offset": "9" * 200,
    }


def test_a_targets_bytes_read_as_text_never_raise():
    """An engine's text is evidence, not code: invalid UTF-8 from a hostile target becomes
    replacement characters, not an exception in the analysis that reads it."""
    from probes.net import FetchResult

    result = FetchResult(url="u", status=200, content_type="", body=b"ok \xff\xfe", elapsed_s=0)
    assert result.text() == "ok \ufffd\ufffd"
    assert result.size == 5


def test_an_allow_list_entry_with_host_bits_is_read_as_its_network():
    """``10.1.2.3/8`` in ATLAS_PROBE_ALLOWED_NETWORKS means 10.0.0.0/8, as operators write it;
    a typo is still named (``test_parse_networks_names_the_bad_item``)."""
    assert parse_networks([" 10.1.2.3/8 ", "fd00::1/64"]) == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("fd00::/64"),
    )


def test_the_ipv4_compatible_form_starts_at_2_so_ipv6_loopback_stays_ipv6():
    """``::/96`` embeds an IPv4 address in its last 32 bits, except ``::`` and ``::1``: ``::2``
    is 0.0.0.2 (never a target, even with everything allowed), ``::1`` is IPv6 loopback
    (allowed by default, not 0.0.0.1)."""
    with pytest.raises(ProbeError, match=re.escape("0.0.0.2 is link-local, metadata or other")):
        check_address("::2", EVERYWHERE)
    assert check_address("::1", FetchPolicy()) == ipaddress.ip_address("::1")


def test_a_scope_id_is_dropped_so_the_address_checked_is_the_address_connected_to():
    """A resolver may answer ``fe80::1%eth0``: the zone is cut before the check, and what the
    connection gets (``str`` of the checked address) carries none."""
    checked = check_address("::1%lo", FetchPolicy())
    assert checked == ipaddress.ip_address("::1") and str(checked) == "::1"
    with pytest.raises(ProbeError, match="fe80::1 is link-local"):
        check_address("fe80::1%eth0", EVERYWHERE)


@pytest.mark.parametrize(
    ("url", "policy", "reason"),
    [
        ("http://169.254.169.254/latest/", EVERYWHERE, "is link-local, metadata or otherwise"),
        ("http://2852039166/latest/", EVERYWHERE, "is link-local, metadata or otherwise"),
        ("http://[fd00:ec2::254]/", EVERYWHERE, "is link-local, metadata or otherwise"),
        ("http://10.0.0.1:8000/metrics", FetchPolicy(), "is outside the allowed networks"),
    ],
)
def test_an_address_literal_is_judged_at_registration_without_a_resolver(url, policy, reason):
    """A literal (in any spelling the resolver reads as numeric) is refused when the target
    is registered, by the connection guard's rules, and no resolver is asked."""

    def no_dns(host: str, port: int) -> list[str]:
        raise AssertionError(f"asked the resolver about {host}")

    with pytest.raises(ProbeError) as caught:
        check_registered_url(url, dataclasses.replace(policy, resolver=no_dns))
    assert caught.value.kind == "blocked-address" and reason in caught.value.message
    assert not caught.value.transient
    check_registered_url("http://127.0.0.1:8000/metrics", FetchPolicy(resolver=no_dns))


def test_dns_failures_are_transient_dns_errors():
    """A resolver that fails or answers nothing is retried next cycle (DNS recovers), not
    shown as a permanent fault of the target."""

    def failing(host: str, port: int) -> list[str]:
        raise OSError("temporary failure in name resolution")

    for resolver in (failing, lambda host, port: []):
        with pytest.raises(ProbeError) as caught:
            resolve_checked("probe.example.com", 80, FetchPolicy(resolver=resolver))
        assert caught.value.kind == "dns" and caught.value.transient


def test_one_guarded_client_opens_at_most_64_connections_by_default():
    client = guarded_async_client(FetchPolicy())
    assert client.pool._max_idle == 64


class _Hops(_Handler):
    """``/hop?n=K&status=S``: K redirects with status S (same origin), then 200;
    ``/status?code=C``: answers with status C."""

    def do_hop(self, path: str) -> None:
        query = dict(part.split("=") for part in path.split("?", 1)[1].split("&"))
        n, status = int(query["n"]), query["status"]
        if n == 0:
            self.do_ok(path)
        else:
            self._head(f"{status} Moved", {"Location": f"/hop?n={n - 1}&status={status}"}, 0)

    def do_nowhere(self, path: str) -> None:
        self._head("302 Found", {}, 0)  # a redirect without a Location

    def do_status(self, path: str) -> None:
        code = path.split("code=", 1)[1]
        self._head(f"{code} Whatever", {"Content-Type": "text/plain"}, 2)
        self.wfile.write(b"no")


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_each_redirect_status_counts_against_the_redirect_cap_and_a_post_refuses_it(status):
    """``max_redirects`` redirects are followed, one more is refused, whichever redirect
    status the target uses; a webhook POST follows none of them."""
    from probes.net import post

    policy = dataclasses.replace(LOOPBACK, max_redirects=2)
    with hostile_server(_Hops) as base:
        assert _fetch(f"{base}/hop?n=2&status={status}", policy).url.endswith(
            "n=0&status=" + str(status)
        )
        error = _error(f"{base}/hop?n=3&status={status}", policy)
        assert error.kind == "redirect" and error.message == "more than 2 redirects"
        with pytest.raises(ProbeError) as posted:
            post(f"{base}/hop?n=1&status={status}", b"{}", LOOPBACK)
    assert posted.value.kind == "redirect" and not posted.value.transient


def test_a_status_of_400_is_an_error_for_a_fetch_and_a_post():
    from probes.net import post

    with hostile_server(_Hops) as base:
        for code, transient in (("400", False), ("429", True), ("500", True)):
            assert _error(f"{base}/status?code={code}").transient is transient, code
            with pytest.raises(ProbeError) as posted:
                post(f"{base}/status?code={code}", b"{}", LOOPBACK)
            assert posted.value.kind == "http-status" and posted.value.transient is transient
        assert _fetch(f"{base}/status?code=399").status == 399


def test_a_redirect_without_location_and_a_url_without_host_are_permanent_faults():
    """Both fail the same way every cycle: named by kind and not retried."""
    from probes.net import validate_url

    with hostile_server(_Hops) as base:
        error = _error(f"{base}/nowhere")
    assert (error.kind, error.message, error.transient) == (
        "redirect",
        "HTTP 302 without Location",
        False,
    )
    with pytest.raises(ProbeError) as caught:
        validate_url("http:///metrics")
    assert (caught.value.kind, caught.value.transient) == ("bad-url", False)


# --- guard-removal mutants (.ci/guard-mutants) ---------------------------------------------------
#
# One hand-made mutant per limit and refusal of the guard (.ci/guard_mutants.py); the tests
# below are the ones its first run showed missing.


@pytest.mark.parametrize(
    "address", ["224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255"]
)
def test_multicast_reserved_and_broadcast_addresses_are_never_targets(address):
    """Not a single host: refused whatever the allow-list says, before anything is sent."""
    with pytest.raises(ProbeError) as caught:
        check_address(address, EVERYWHERE)
    assert (
        caught.value.message
        == f"{address} is link-local, metadata or otherwise never a probe target"
    )
    assert _error(f"http://{address}/", EVERYWHERE).kind == "blocked-address"


def test_by_default_only_loopback_is_allowed():
    """ATLAS_PROBE_ALLOWED_NETWORKS unset: 127.0.0.0/8 and ::1, nothing else."""
    for address in ("127.0.0.1", "127.9.9.9", "::1"):
        assert str(check_address(address, FetchPolicy())) == address
    for address in (
        "10.0.0.1",
        "192.168.1.1",
        "8.8.8.8",
        "2001:db8::1",
        "fd12::1",
        "2001:4860::8888",
    ):
        with pytest.raises(ProbeError, match="is outside the allowed networks"):
            check_address(address, FetchPolicy())


def test_an_unparsable_url_is_a_bad_url():
    for url in ("http://[::1/metrics", "http://a\x00b/metrics"):
        with pytest.raises(ProbeError) as caught:
            validate_url(url)
        assert caught.value.kind == "bad-url" and not caught.value.transient
        assert caught.value.message.startswith("not a URL: ")


def test_the_pool_runs_under_the_policys_timeouts():
    """The connect and per-read timeouts of a target's policy are the ones its connections
    use (the default pool's are generous)."""
    client = guarded_async_client(FetchPolicy(connect_timeout=1.5, read_timeout=2.5))
    assert (client.pool.connect_timeout, client.pool.read_timeout) == (1.5, 2.5)


def test_a_silent_target_ends_at_the_read_timeout(server):
    """A target that accepts and says nothing is given up after the per-read timeout, long
    before the overall deadline."""
    policy = dataclasses.replace(LOOPBACK, read_timeout=0.3, total_timeout=20)
    error = _error(server + "/hang", policy)
    assert (error.kind, error.message, error.transient) == ("timeout", "no answer in time", True)


def test_a_posts_answer_is_cut_off_at_the_cap(server):
    """A webhook that answers a POST with 50 MB is read to the cap, no further."""
    with pytest.raises(ProbeError) as caught:
        post(server + "/huge", b"{}", SIZE_ONLY)
    assert caught.value.kind == "too-large" and not caught.value.transient


@pytest.mark.parametrize("method", ["fetch", "post"])
def test_a_slow_resolver_is_bounded_by_the_overall_deadline(server, method):
    """Resolving a name happens before the exchange and outside the pool's own deadline:
    only the overall timeout bounds a DNS answer that never comes."""
    release = threading.Event()
    asked: list[str] = []

    def hanging(host: str, port: int) -> list[str]:
        asked.append(host)
        release.wait(10)  # released as soon as the fetch gave up
        return ["127.0.0.1"]

    policy = dataclasses.replace(LOOPBACK, resolver=hanging, total_timeout=0.5)
    url = f"http://slow-dns.example:{server.rsplit(':', 1)[1]}/ok"

    async def once():
        async with guarded_async_client(policy) as client:
            if method == "fetch":
                return await afetch(client, url, policy)
            return await apost(client, url, b"{}", policy)

    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(ProbeError) as caught:
            loop.run_until_complete(once())
    finally:
        release.set()
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
    error = caught.value
    assert (error.kind, error.message) == ("timeout", "no complete answer within 0.5 s")
    assert asked == ["slow-dns.example"]


class _Dribble(_Handler):
    """Ten bytes, one every 0.3 s: each read well within any read timeout."""

    def do_dribble(self, path: str) -> None:
        self._head("200 OK", {"Content-Type": "text/plain"}, 10)
        for _ in range(10):
            if self.server.stop.wait(0.3):
                return
            self.wfile.write(b"x")
            self.wfile.flush()


@pytest.mark.parametrize("method", ["fetch", "post"])
def test_the_exchange_stops_at_the_deadline_without_the_outer_timeout(method, monkeypatch):
    """The fetch's deadline goes down to the read loop, which checks it against the clock
    itself: on Python 3.11 a cancellation landing while a read completes was swallowed, so
    the outer ``asyncio.timeout`` alone never ended a busy exchange (issue 19.1). With the
    outer timeout out of action, a target that sends a byte every 0.3 s still ends at the 1 s
    deadline, not when it finishes after 3 s (or at the pool's fallback, connect plus eight
    read timeouts)."""
    monkeypatch.setattr(net.asyncio, "timeout", lambda delay: contextlib.nullcontext())
    policy = dataclasses.replace(LOOPBACK, connect_timeout=1, read_timeout=2, total_timeout=1)
    with hostile_server(_Dribble) as base, pytest.raises(ProbeError) as caught:
        if method == "fetch":
            _fetch(base + "/dribble", policy)
        else:
            post(base + "/dribble", b"{}", policy)
    assert caught.value.kind == "timeout" and caught.value.transient
