"""The stable cause keys: what a confirmed leaf of a hypothesis tree names.

These keys are an interface: playbooks, the simulator's ground truth, alert rules,
postmortems and team statistics ("count by cause") all use them, so a key is never
renamed; a new cause gets a new key. Documented in docs/playbooks.md.
"""

CAUSES: dict[str, str] = {
    "router-latency": "The router or load balancer is slow to forward requests to engines.",
    "queue-backlog": "Requests wait in the engine's admission queue for lack of capacity.",
    "prefill-slow": "Prefill itself is slower than tokens x cost per token (no chunking, "
    "CUDA-graph fallback to eager, interference).",
    "kv-cache-pressure": "The KV cache is full: admission stalls and running requests are "
    "preempted and recomputed.",
    "cuda-graph-pool-growth": "Batch shapes missing from the warm-up capture are captured on the "
    "fly; each capture's private memory pool stays reserved.",
    "kv-block-leak": "KV blocks of finished requests are not returned; usage ratchets up "
    "even off-peak.",
    "allocator-leak": "Allocated memory only grows (a tensor leak) until CUDA OOM.",
    "oversized-prefill-chunks": "Prefill chunks larger than the chunk budget stretch engine "
    "steps and every decode in them.",
    "gc-pauses": "Python garbage-collection pauses stall the engine loop.",
    "tp-straggler": "One tensor-parallel rank is slower; every step waits for it at the "
    "all-reduce.",
    "gpu-throttling": "GPUs run below their clocks (thermal or power limits) across ranks.",
}
CAUSE_KEYS = frozenset(CAUSES)
