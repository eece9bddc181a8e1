"""`python -m realengine install | serve | calibrate`: the real CPU vLLM test bed by hand.

python -m realengine install                      # the cached venv (prints its path)
python -m realengine serve --port 8200 --max-num-seqs 16 [--max-num-batched-tokens N]
python -m realengine calibrate --url http://127.0.0.1:8200   # idle budget constants
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import threading
from pathlib import Path

from realengine.calibrate import (
    CalibrationError,
    batch_sender,
    calibrate,
    engine_meter,
    http_sender,
)
from realengine.install import InstallError, ensure_installed
from realengine.model import write_tiny_model
from realengine.server import EngineFlags, EngineServer, EngineStartError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m realengine", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="install (or find) the cached engine environment")
    serve = sub.add_parser("serve", help="serve the tiny model on 127.0.0.1 until Ctrl-C")
    serve.add_argument("--port", type=int, default=0)
    serve.add_argument("--max-model-len", type=int, default=1024)
    serve.add_argument("--num-gpu-blocks-override", type=int, default=96)
    serve.add_argument("--max-num-seqs", type=int)
    serve.add_argument("--max-num-batched-tokens", type=int)
    serve.add_argument("--scheduling-policy", choices=("fcfs", "priority"))
    serve.add_argument("--stream-interval", type=int, default=16,
                       help="tokens per streamed chunk (vLLM's own flag; fewer chunks, less "
                       "front-end CPU)")  # fmt: skip
    serve.add_argument("--dtype", choices=("bfloat16", "float16", "float32"),
                       help="weights and KV dtype (default: bfloat16 where the CPU computes it "
                       "in hardware, else float32)")  # fmt: skip
    serve.add_argument("--log", type=Path, help="engine log file (default: a temporary one)")
    cal = sub.add_parser(
        "calibrate", help="measure prefill and decode costs (engine-side, idle engine)"
    )
    cal.add_argument("--url", required=True)
    cal.add_argument("--model", default="tiny-llama")
    return p


def _serve(args: argparse.Namespace) -> int:
    install = ensure_installed()
    folder = Path(tempfile.mkdtemp(prefix="realengine-"))
    flags = EngineFlags(
        max_model_len=args.max_model_len,
        num_gpu_blocks_override=args.num_gpu_blocks_override,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        scheduling_policy=args.scheduling_policy,
        stream_interval=args.stream_interval,
        dtype=args.dtype,
    )
    log = args.log or folder / "engine.log"
    server = EngineServer(install, write_tiny_model(folder / "model"), flags, log, args.port)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    server.start()
    try:
        cold = server.wait_healthy()
        print(f"vLLM {install.version} on {server.url} (healthy after {cold:.0f} s; log {log})")
        while not done.wait(1.0):
            if server.process is None or server.process.poll() is not None:
                print(f"vLLM exited; see {log}", file=sys.stderr)
                return 1
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "install":
            install = ensure_installed()
            found = {"env": str(install.env), "version": install.version,
                     "install_s": round(install.install_s, 1), "fresh": install.fresh}  # fmt: skip
            print(json.dumps(found))
            return 0
        if args.command == "serve":
            return _serve(args)
        url = args.url.rstrip("/")
        measured = calibrate(http_sender(url, args.model), send_batch=batch_sender(url, args.model),
                             meter=engine_meter(f"{url}/metrics"))  # fmt: skip
        print(json.dumps(measured.as_dict(), indent=2))
        return 0
    except (InstallError, EngineStartError, CalibrationError) as exc:
        print(f"realengine: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
