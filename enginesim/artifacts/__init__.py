"""Pure generators that turn simulated engine history into the files operators upload.

Each module renders one artifact type from the frozen records in ``records``: a Kineto
Chrome trace, a CUDA caching-allocator snapshot pickle, CPython GC DEBUG_STATS output,
and vLLM/SGLang log lines. They are deterministic (same inputs, same bytes) and use only
the standard library, so the simulator can regenerate an incident's evidence on demand.
"""

from .chrome_trace import kineto_base_time_ns, render_chrome_trace, write_chrome_trace
from .gc_log import gc_pause_lines, render_gc_log
from .loglines import (
    LogMessage,
    chunked_prefill_message,
    format_size,
    graph_capture_messages,
    oom_messages,
    oom_messages_from_details,
    render_messages,
    restart_messages,
    sglang_decode_message,
    sglang_line,
    sglang_prefill_message,
    sglang_retract_message,
    startup_memory_messages,
    stats_message,
    torch_oom_text,
    v0_preemption_message,
    vllm_line,
)
from .memory_snapshot import (
    OomDetails,
    build_memory_snapshot,
    dump_memory_snapshot,
    expected_totals,
    oom_details,
)
from .records import DEFAULT_EPOCH_UNIX, GcPause, GraphCapture, RankMemory, StepRecord

__all__ = [
    "DEFAULT_EPOCH_UNIX",
    "GcPause",
    "GraphCapture",
    "LogMessage",
    "OomDetails",
    "RankMemory",
    "StepRecord",
    "build_memory_snapshot",
    "chunked_prefill_message",
    "dump_memory_snapshot",
    "expected_totals",
    "format_size",
    "gc_pause_lines",
    "graph_capture_messages",
    "kineto_base_time_ns",
    "oom_details",
    "oom_messages",
    "oom_messages_from_details",
    "render_chrome_trace",
    "render_gc_log",
    "render_messages",
    "restart_messages",
    "sglang_decode_message",
    "sglang_line",
    "sglang_prefill_message",
    "sglang_retract_message",
    "startup_memory_messages",
    "stats_message",
    "torch_oom_text",
    "v0_preemption_message",
    "vllm_line",
    "write_chrome_trace",
]
