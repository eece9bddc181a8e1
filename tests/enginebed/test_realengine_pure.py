"""The real-engine test bed's pure parts (flags, the fix-to-flags table, the model file,
calibration arithmetic, the install stamp), checked without installing or starting vLLM."""

from __future__ import annotations

import json

import pytest

from loadgen.report import Outcome
from realengine.calibrate import CalibrationError, calibrate, served_per_s, tiny_budget
from realengine.controller import UnsupportedSetting, flags_for_fix
from realengine.install import REQUIREMENTS, STAMP, ensure_installed
from realengine.model import TINY_LLAMA, kv_bytes_per_token, write_tiny_model
from realengine.server import EngineFlags


def test_default_flags_are_the_tiny_dummy_engine():
    args = EngineFlags().args()
    for flag in ("--load-format", "--skip-tokenizer-init", "--enforce-eager"):
        assert flag in args
    assert args[args.index("--num-gpu-blocks-override") + 1] == "96"
    assert "--max-num-seqs" not in args  # vLLM's own default unless a scenario sets it
    # Streamed in chunks of 16 tokens: the front end's per-token work starved it on 2 cores.
    assert args[args.index("--stream-interval") + 1] == "16"
    assert "--stream-interval" not in EngineFlags(stream_interval=None).args()


def test_fix_settings_become_flags_and_unknown_ones_are_refused():
    fixed = flags_for_fix(EngineFlags(), {"max_num_seqs": 11.0, "enable_chunked_prefill": 1})
    assert fixed.max_num_seqs == 11
    assert fixed.enable_chunked_prefill is True
    args = fixed.args()
    assert args[args.index("--max-num-seqs") + 1] == "11"
    assert "--enable-chunked-prefill" in args
    with pytest.raises(UnsupportedSetting):
        flags_for_fix(EngineFlags(), {"kv_leak_fraction": 0})
    with pytest.raises(UnsupportedSetting):
        flags_for_fix(EngineFlags(), {"max_num_seqs": 2.5})
    with pytest.raises(UnsupportedSetting):
        flags_for_fix(EngineFlags(), {"max_num_batched_tokens": 0})


def test_tiny_model_file_and_its_kv_arithmetic(tmp_path):
    folder = write_tiny_model(tmp_path / "m")
    assert json.loads((folder / "config.json").read_text()) == TINY_LLAMA
    first = (folder / "config.json").stat().st_mtime_ns
    write_tiny_model(tmp_path / "m")
    assert (folder / "config.json").stat().st_mtime_ns == first  # idempotent
    # 2 (K, V) x 2 layers x 2 KV heads x 64 head dim x 2 bytes
    assert kv_bytes_per_token() == 1024


def test_calibration_is_the_ttft_slope_and_decode_time_per_token():
    def send(request):
        prefill = 0.010 + request.prompt_tokens * 0.00005  # 10 ms overhead + 0.05 ms/token
        decode = 0.004 * (request.max_tokens - 1)
        return Outcome(request.seq, request.prompt_tokens, request.max_tokens, 0, 0.0,
                       status="ok", ttft_s=prefill, e2e_s=prefill + decode,
                       output_tokens=request.max_tokens, itl_s=[0.0] * 3)  # fmt: skip

    measured = calibrate(send, short=32, long=768, repeats=3, decode_tokens=16)
    assert measured.prefill_ms_per_token == pytest.approx(0.05)
    assert measured.decode_step_ms == pytest.approx(4.0)
    constants = tiny_budget(measured, kv_tokens=12288, max_num_seqs=128,
                            max_num_batched_tokens=2048, ttft_target_ms=700,
                            itl_ceiling_ms=50)  # fmt: skip
    from deployments.budget import Budget, kv_capacity_tokens

    assert kv_capacity_tokens(Budget(**constants)) == 12288


def test_a_matching_stamp_is_trusted_without_pip(tmp_path):
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("#!/bin/false\n")
    (env / STAMP).write_text(json.dumps({"requirements": list(REQUIREMENTS), "install_s": 12.5}))
    install = ensure_installed(env)
    assert install.fresh is False
    assert install.install_s == 12.5


def test_the_served_rate_is_a_full_batch_over_its_makespan():
    sent: list[list] = []

    def send_batch(requests):
        sent.append(requests)
        # The last of the batch finishes at 4 s: six requests in 4 s.
        return [Outcome(r.seq, r.prompt_tokens, r.max_tokens, 0, 0.0, status="ok", ttft_s=0.1,
                        e2e_s=2.0 + 0.4 * i, output_tokens=r.max_tokens)
                for i, r in enumerate(requests)]  # fmt: skip

    assert served_per_s(send_batch, prompt=300, output=200, seats=6) == pytest.approx(1.5)
    (batch,) = sent
    assert len(batch) == 6 and {(r.prompt_tokens, r.max_tokens) for r in batch} == {(300, 200)}
    assert len({r.seq for r in batch}) == 6


def test_a_served_rate_probe_that_fails_says_so():
    def failing(requests):
        return [Outcome(r.seq, r.prompt_tokens, r.max_tokens, 0, 0.0, status="error",
                        error="connection refused") for r in requests]  # fmt: skip

    with pytest.raises(CalibrationError, match="connection refused"):
        served_per_s(failing, prompt=300, output=200, seats=3)
    with pytest.raises(CalibrationError):
        served_per_s(failing, prompt=300, output=200, seats=0)
