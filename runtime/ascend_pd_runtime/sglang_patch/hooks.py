"""Functions the patched SGLang files call at start-up (not per request)."""

from __future__ import annotations

from typing import Any


def set_kv_layout_args(kv_args: Any, token_to_kv_pool: Any, num_hidden_layers: int) -> None:
    """Record the KV buffer layout in ``KVArgs`` as SGLang 0.5.12 does.

    ``total_kv_layers`` never counts draft layers; ``kv_buf_groups`` is set for the
    NPU MLA pool, whose pointer list is one block per buffer (latent k, rope v and,
    on DSA models, index_k), each with one entry per layer it holds.
    """
    kv_args.total_kv_layers = num_hidden_layers
    pool_classes = {cls.__name__ for cls in type(token_to_kv_pool).__mro__}
    if "NPUMLATokenToKVPool" in pool_classes:
        has_index = getattr(token_to_kv_pool, "index_k_buffer", None) is not None
        kv_args.kv_buf_groups = 3 if has_index else 2
