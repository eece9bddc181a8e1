"""Stack frames for simulated allocator events, shaped like torch's ``context="all"`` capture.

Real snapshots record innermost-first stacks mixing C++ frames (``filename "??"`` when no
debug info) and Python frames from the vLLM worker. Analysts grep these for
``capture_model`` / ``execute_model`` / ``load_model`` to attribute memory, so the
simulated stacks name the same vLLM V1 functions. Each stack is one list object shared by
every event that uses it, exactly as pickle memoisation makes them shared in real dumps.
"""

from __future__ import annotations

Frame = dict[str, object]

_PY = "/usr/local/lib/python3.12/dist-packages"
_STD = "/usr/lib/python3.12"
_RUNNER = f"{_PY}/vllm/v1/worker/gpu_model_runner.py"
_WORKER = f"{_PY}/vllm/v1/worker/gpu_worker.py"
_EXECUTOR = f"{_PY}/vllm/v1/executor/multiproc_executor.py"
_LLAMA = f"{_PY}/vllm/model_executor/models/llama.py"
_MODULE = f"{_PY}/torch/nn/modules/module.py"

_CPP_CAPTURE = (
    ("torch::unwind::unwind()", "??", 0),
    ("torch::CapturedTraceback::gather(bool, bool, bool)", "??", 0),
    ("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp", 0),
)
_CPP_MALLOC = (
    *_CPP_CAPTURE,
    (
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc("
        "signed char, unsigned long, CUstream_st*)",
        "CUDACachingAllocator.cpp",
        0,
    ),
    (
        "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc("
        "void**, signed char, unsigned long, CUstream_st*)",
        "CUDACachingAllocator.cpp",
        0,
    ),
    (
        "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)",
        "CUDACachingAllocator.cpp",
        0,
    ),
    (
        "at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*, "
        "c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)",
        "??",
        0,
    ),
    (
        "at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>, "
        "std::optional<c10::MemoryFormat>)",
        "??",
        0,
    ),
    ("torch::autograd::THPVariable_empty(_object*, _object*, _object*)", "??", 0),
)
_CPP_FREE = (
    *_CPP_CAPTURE,
    (
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free("
        "c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::Block*)",
        "CUDACachingAllocator.cpp",
        0,
    ),
    (
        "c10::cuda::CUDACachingAllocator::Native::local_raw_delete(void*)",
        "CUDACachingAllocator.cpp",
        0,
    ),
    ("c10::StorageImpl::~StorageImpl()", "", 0),
    ("c10::TensorImpl::~TensorImpl()", "??", 0),
    ("THPVariable_subclass_dealloc(_object*)", "??", 0),
)
_CPP_EMPTY_CACHE = (
    *_CPP_CAPTURE,
    (
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::release_cached_blocks("
        "std::shared_ptr<c10::GatheredContext> const&)",
        "CUDACachingAllocator.cpp",
        0,
    ),
    (
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::emptyCache()",
        "CUDACachingAllocator.cpp",
        0,
    ),
    ("THCPModule_emptyCache(_object*, _object*)", "Module.cpp", 0),
)
_CPP_RELEASE_ON_OOM = (
    *_CPP_MALLOC[:4],
    (
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::release_cached_blocks("
        "std::shared_ptr<c10::GatheredContext> const&)",
        "CUDACachingAllocator.cpp",
        0,
    ),
    *_CPP_MALLOC[4:],
)
_CPP_ROOT = (
    ("PyEval_EvalCode", "??", 0),
    ("run_eval_code_obj", "??", 0),
    ("Py_RunMain", "??", 0),
    ("Py_BytesMain", "??", 0),
    ("__libc_start_main", "??", 0),
    ("_start", "??", 0),
)
_WORKER_ROOT = (
    ("worker_main", _EXECUTOR, 635),
    ("run", f"{_STD}/multiprocessing/process.py", 108),
    ("_bootstrap", f"{_STD}/multiprocessing/process.py", 314),
    ("_main", f"{_STD}/multiprocessing/spawn.py", 135),
    ("spawn_main", f"{_STD}/multiprocessing/spawn.py", 122),
    ("<module>", "<string>", 1),
)
_BUSY = (("worker_busy_loop", _EXECUTOR, 700), *_WORKER_ROOT)
_FORWARD = (
    ("forward_cuda", f"{_PY}/vllm/model_executor/layers/activation.py", 95),
    ("forward", f"{_PY}/vllm/model_executor/custom_op.py", 44),
    ("_call_impl", _MODULE, 1784),
    ("_wrapped_call_impl", _MODULE, 1773),
    ("forward", _LLAMA, 103),
    ("_call_impl", _MODULE, 1784),
    ("_wrapped_call_impl", _MODULE, 1773),
    ("forward", _LLAMA, 393),
)

_PY_STACKS: dict[str, tuple[tuple[str, str, int], ...]] = {
    "weights": (
        ("create_weights", f"{_PY}/vllm/model_executor/layers/linear.py", 195),
        ("__init__", f"{_PY}/vllm/model_executor/layers/linear.py", 412),
        ("__init__", _LLAMA, 146),
        ("__init__", _LLAMA, 287),
        ("<lambda>", _LLAMA, 361),
        ("make_layers", f"{_PY}/vllm/model_executor/models/utils.py", 627),
        ("__init__", _LLAMA, 358),
        ("__init__", f"{_PY}/vllm/compilation/decorators.py", 201),
        ("__init__", _LLAMA, 537),
        ("_initialize_model", f"{_PY}/vllm/model_executor/model_loader/utils.py", 64),
        ("load_model", f"{_PY}/vllm/model_executor/model_loader/base_loader.py", 45),
        ("load_model", _RUNNER, 2662),
        ("load_model", _WORKER, 230),
        ("__init__", _EXECUTOR, 494),
        *_WORKER_ROOT,
    ),
    "kv_cache": (
        ("_allocate_kv_cache_tensors", _RUNNER, 4066),
        ("initialize_kv_cache_tensors", _RUNNER, 4247),
        ("initialize_kv_cache", _RUNNER, 4401),
        ("initialize_from_config", _WORKER, 370),
        *_BUSY,
    ),
    "profile": (
        *_FORWARD,
        ("_dummy_run", _RUNNER, 3215),
        ("profile_run", _RUNNER, 3442),
        ("determine_available_memory", _WORKER, 281),
        *_BUSY,
    ),
    "empty_cache": (
        ("empty_cache", f"{_PY}/torch/cuda/memory.py", 224),
        ("determine_available_memory", _WORKER, 290),
        *_BUSY,
    ),
    "capture": (
        *_FORWARD,
        ("__call__", f"{_PY}/vllm/compilation/cuda_graph.py", 168),
        ("_dummy_run", _RUNNER, 3215),
        ("_capture_cudagraphs", _RUNNER, 3651),
        ("capture_model", _RUNNER, 3571),
        ("compile_or_warm_up_model", _WORKER, 414),
        *_BUSY,
    ),
    "capture_late": (
        *_FORWARD,
        ("__call__", f"{_PY}/vllm/compilation/cuda_graph.py", 168),
        ("execute_model", _RUNNER, 2436),
        ("execute_model", _WORKER, 541),
        *_BUSY,
    ),
    "forward": (
        *_FORWARD,
        ("execute_model", _RUNNER, 2436),
        ("execute_model", _WORKER, 541),
        *_BUSY,
    ),
    "leak": (
        ("_prepare_inputs", _RUNNER, 1124),
        ("execute_model", _RUNNER, 2380),
        ("execute_model", _WORKER, 541),
        *_BUSY,
    ),
}


def _frame(name: str, filename: str, line: int) -> Frame:
    return {"name": name, "filename": filename, "line": line}


def _python_part(kind: str) -> list[Frame]:
    frames: list[Frame] = []
    for name, filename, line in _PY_STACKS[kind]:
        frames.append(_frame(name, filename, line))
        frames.append(_frame("_PyEval_EvalFrameDefault", "??", 0))
    return frames


class FrameBook:
    """Builds each stack once per snapshot so every event shares the same list object."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], list[Frame]] = {}

    def get(self, op: str, kind: str) -> list[Frame]:
        """``op`` is ``malloc``, ``free``, ``empty_cache`` or ``oom_release``."""
        key = (op, kind)
        frames = self._cache.get(key)
        if frames is None:
            cpp = {
                "malloc": _CPP_MALLOC,
                "free": _CPP_FREE,
                "empty_cache": _CPP_EMPTY_CACHE,
                "oom_release": _CPP_RELEASE_ON_OOM,
            }[op]
            frames = [_frame(*f) for f in cpp] + _python_part(kind)
            frames += [_frame(*f) for f in _CPP_ROOT]
            self._cache[key] = frames
        return frames
