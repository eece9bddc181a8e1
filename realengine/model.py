"""A tiny random-weight Llama as a local folder: vLLM reads only its ``config.json``.

With ``--load-format dummy`` the weights are random and never downloaded, and with
``--skip-tokenizer-init`` no tokenizer is needed either (prompts are token ids), so the
whole model is this one file. Its shape fixes the KV arithmetic a budget uses:
bytes per token = 2 (K and V) x layers x KV heads x head dim x 2 (bf16).
"""

from __future__ import annotations

import json
from pathlib import Path

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 4096,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def kv_bytes_per_token(config: dict = TINY_LLAMA, dtype_bytes: int = 2) -> int:
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    return 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * dtype_bytes


def write_tiny_model(folder: Path, config: dict = TINY_LLAMA) -> Path:
    """Write the model folder (idempotent) and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    text = json.dumps(config, indent=2, sort_keys=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return folder
