"""`python -m loadgen`: open-loop load against an OpenAI-compatible completions endpoint.

    python -m loadgen --url http://127.0.0.1:8000 --model tiny-llama --rate 4 \
        --duration 60 --prompt 0.8:100-300,0.2:800 --output 64-128 --seed 1 --json
    python -m loadgen --url ... --trace recorded.jsonl         # replay a recorded trace
    python -m loadgen --rate 2 --count 100 ... --plan-out plan.jsonl --dry-run

Prints what was sent and what came back (counts, TTFT / ITL / e2e percentiles). Exit
status 0 when the run happened, 2 on bad arguments or a refused target.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from loadgen.client import TargetRefused, run_plan
from loadgen.plan import (
    MAX_TRACE_BYTES,
    LengthMix,
    PlanError,
    dump_trace,
    load_trace,
    parse_priorities,
    poisson_plan,
)
from loadgen.report import summarize


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m loadgen", description=__doc__.split("\n")[0])
    p.add_argument("--url", help="engine base URL (or its /v1/completions URL)")
    p.add_argument("--model", default="tiny-llama", help="served model name")
    p.add_argument("--rate", type=float, help="Poisson arrivals per second")
    p.add_argument("--count", type=int, help="stop after this many requests")
    p.add_argument("--duration", type=float, help="stop planning arrivals after N seconds")
    p.add_argument("--trace", type=Path, help="replay this JSON-lines trace instead")
    p.add_argument("--prompt", default="128-512", help="prompt-length mixture, w:lo-hi,...")
    p.add_argument("--output", default="64-256", help="output-length mixture, w:lo-hi,...")
    p.add_argument("--priority", default="1:0", help="priority mixture, w:value,...")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab", type=int, default=4096, help="token ids are drawn below this")
    p.add_argument("--max-in-flight", type=int, default=256)
    p.add_argument("--request-timeout", type=float, default=120.0)
    p.add_argument("--deadline", type=float, help="cancel whatever still runs after N seconds")
    p.add_argument("--no-ignore-eos", action="store_true", help="let the model stop early")
    p.add_argument("--allow-remote", action="store_true", help="allow non-loopback targets")
    p.add_argument("--plan-out", type=Path, help="write the plan as a replayable trace")
    p.add_argument("--dry-run", action="store_true", help="plan only, send nothing")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def _plan(args: argparse.Namespace):
    if args.trace is not None:
        if args.trace.stat().st_size > MAX_TRACE_BYTES:
            raise PlanError(f"{args.trace}: larger than {MAX_TRACE_BYTES} bytes")
        return load_trace(args.trace.read_text(encoding="utf-8"))
    if args.rate is None:
        raise PlanError("give --rate (with --count or --duration) or --trace")
    return poisson_plan(
        args.rate,
        prompt=LengthMix.parse(args.prompt),
        output=LengthMix.parse(args.output),
        priorities=parse_priorities(args.priority),
        seed=args.seed,
        count=args.count,
        duration_s=args.duration,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        plan = _plan(args)
    except (PlanError, OSError, UnicodeDecodeError) as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 2
    if args.plan_out is not None:
        args.plan_out.write_text(dump_trace(plan), encoding="utf-8")
    if args.dry_run:
        print(json.dumps({"planned": len(plan), "span_s": plan[-1].at_s if plan else 0.0}))
        return 0
    if not args.url:
        print("loadgen: give --url (or --dry-run)", file=sys.stderr)
        return 2
    try:
        result = run_plan(
            plan,
            args.url,
            model=args.model,
            seed=args.seed,
            vocab=args.vocab,
            max_in_flight=args.max_in_flight,
            request_timeout_s=args.request_timeout,
            deadline_s=args.deadline,
            ignore_eos=not args.no_ignore_eos,
            allow_remote=args.allow_remote,
        )
    except (TargetRefused, ValueError) as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 2
    report = summarize(result.outcomes, result.wall_s)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report))
    return 0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def format_report(report: dict) -> str:
    lines = [
        f"planned {report['planned']}  sent {report['sent']}  statuses {report['statuses']}",
        f"prompt tokens sent {report['prompt_tokens_sent']}  "
        f"output tokens received {report['output_tokens_received']}",
    ]
    for name in ("ttft_s", "itl_s", "e2e_s"):
        d = report[name]
        lines.append(
            f"{name[:-2]:5} n={d['count']:<6} p50 {_ms(d['p50'])} ms  p95 {_ms(d['p95'])} ms  "
            f"p99 {_ms(d['p99'])} ms  max {_ms(d['max'])} ms"
        )
    for error, n in report["errors"].items():
        lines.append(f"error x{n}: {error}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
