"""Counters and histograms of one engine process (they reset when the process restarts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from enginesim import flavours
from enginesim.exposition import buckets as B
from enginesim.histogram import Histogram

FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


class EngineMetrics:
    """Plain attributes, updated on the hot path; renderers read them."""

    def __init__(
        self,
        fmt: str,
        max_model_len: int,
        created_unix: float,
        buckets: Mapping[str, Sequence[float]] | None = None,
    ) -> None:
        """``buckets``: bounds by vLLM's custom-histogram family name, overriding the
        format's defaults (a team that set ``--custom-histogram-buckets``, an older release)."""
        custom = dict(buckets or {})
        self.fmt = fmt
        self.created_unix = created_unix
        self.prompt_tokens = 0
        self.prompt_tokens_cached = 0
        self.generation_tokens = 0
        self.num_preemptions = 0
        self.retracted_input_tokens = 0
        self.retracted_output_tokens = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.success = dict.fromkeys(FINISH_REASONS, 0)
        self.graph_passes = {
            "decode_cuda_graph": 0,
            "decode_none": 0,
            "prefill_cuda_graph": 0,
            "prefill_none": 0,
        }
        self.num_requests = 0
        self.aborted = 0
        tok = B.build_1_2_5_buckets(max_model_len)
        defaults = flavours.get(fmt).buckets
        self.iteration_tokens = Histogram(custom.get("iteration_tokens", B.VLLM_ITERATION_TOKENS))
        self.request_prompt_tokens = Histogram(tok)
        self.request_generation_tokens = Histogram(tok)
        self.request_max_num_generation_tokens = Histogram(tok)
        self.request_params_n = Histogram(B.VLLM_PARAMS_N)
        self.request_params_max_tokens = Histogram(tok)
        self.request_prefill_kv_computed_tokens = Histogram(tok)
        ttft = custom.get("time_to_first_token", defaults["ttft"])
        itl = custom.get("inter_token_latency", defaults["itl"])
        latency = custom.get("request_latency", B.VLLM_REQUEST_LATENCY)
        self.ttft = Histogram(ttft)
        self.itl = Histogram(itl)
        self.request_tpot = Histogram(itl)
        self.e2e = Histogram(custom.get("request_latency", defaults["e2e"]))
        self.queue_time = Histogram(custom.get("request_latency", defaults["queue_time"]))
        self.inference_time = Histogram(latency)
        self.prefill_time = Histogram(latency)
        self.decode_time = Histogram(latency)
        self.request_num_preemptions = Histogram(B.VLLM_NUM_PREEMPTIONS)
