"""`python -m enginesim`: serve a simulated Atlas deployment on 127.0.0.1."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

from enginesim import flavours, scenarios
from enginesim.deployment import Deployment, SimClock
from enginesim.server import SimServer


def _params(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects key=value, got {item!r}")
        out[key] = float(value)
    return out


def _control_token(path: str | None) -> str | None:
    """The control token from a file (argv is readable by every user of the host) or the
    environment; an empty one is refused rather than read as "no token"."""
    if path is None:
        return os.environ.get("ENGINESIM_CONTROL_TOKEN") or None
    token = Path(path).read_text(encoding="ascii").strip()
    if not token:
        raise ValueError(f"{path} holds no control token")
    return token


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m enginesim", description=__doc__)
    p.add_argument("--list", action="store_true", help="list scenarios and exit")
    p.add_argument("--scenario", default="healthy", help="scenario name, or a+b to combine two")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="scenario parameter"
    )
    p.add_argument("--port", type=int, default=8100, help="main port (0 = any free port)")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument(
        "--simulated",
        type=int,
        default=None,
        help="simulate at most this many engines; further replicas mirror them",
    )
    p.add_argument("--per-replica-ports", action="store_true", help="also one port per replica")
    p.add_argument("--replica-base-port", type=int, default=0, help="first per-replica port")
    p.add_argument("--router-port", type=int, default=None, help="serve router metrics here too")
    p.add_argument("--format", default="vllm-v1", choices=flavours.names())
    p.add_argument("--speed", type=float, default=1.0, help="simulated seconds per wall second")
    p.add_argument("--clock", default="realtime", choices=("realtime", "manual"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--loop",
        type=float,
        default=None,
        metavar="SECONDS",
        help="repeat the scenario's traffic every SECONDS simulated seconds (the demo)",
    )
    p.add_argument(
        "--control-token-file",
        default=None,
        help="require the token in this file (or $ENGINESIM_CONTROL_TOKEN) on /control/",
    )
    p.add_argument("--log-file", default=None, help="also append the engine log here ({replica})")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        for name, summary, params in scenarios.describe():
            knobs = " ".join(f"{k}={v:g}" for k, v in params.items())
            print(f"{name:20s} {summary} [--set {knobs}]")
        print(f"{'a+b':20s} Any two scenarios combined, e.g. kv-pressure+gc-pauses.")
        return 0
    try:
        dep = Deployment(
            args.scenario,
            replicas=args.replicas,
            simulated=args.simulated,
            seed=args.seed,
            fmt=args.format,
            clock=SimClock(args.clock, args.speed),
            params=_params(args.set),
            log_file=args.log_file,
            loop_s=args.loop,
        )
        token = _control_token(args.control_token_file)
    except (KeyError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    server = SimServer(
        dep,
        port=args.port,
        per_replica_ports=args.per_replica_ports,
        replica_base_port=args.replica_base_port,
        router_port=args.router_port,
        control_token=token,
    )

    async def run() -> None:
        await server.start()
        ports = f"{server.ports}" + (
            f", replica ports {server.replica_ports[0]}..{server.replica_ports[-1]}"
            if server.replica_ports
            else ""
        )
        print(
            f"enginesim: scenario={'(hidden)' if token else dep.scenario.name} "
            f"replicas={len(dep.replicas)} "
            f"format={dep.fmt} clock={args.clock} speed={args.speed} loop={args.loop} "
            f"listening {ports}",
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.close()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
