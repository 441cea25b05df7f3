"""Falcon-style configs: the MLP width from ``ffn_hidden_size`` and the KV heads from
``num_kv_heads`` (or one under ``multi_query``), read by the one config reader and priced by
``plan_llm``, weights and KV cache counted by hand."""

from __future__ import annotations

import pytest

import torch_gemm_cost as tgc
from torch_gemm_cost.capture.hf_config import read_hf_config

pytest.importorskip("transformers")

# Falcon-40B's layout (new decoder architecture: grouped KV heads, two layer norms a layer)
FALCON = {"model_type": "falcon", "hidden_size": 256, "ffn_hidden_size": 384,
          "num_hidden_layers": 2, "num_attention_heads": 8, "num_kv_heads": 2,
          "new_decoder_architecture": True, "vocab_size": 1024, "bias": False}
# Falcon-7B's (multi-query: one KV head)
FALCON_7B = {"model_type": "falcon", "hidden_size": 256, "ffn_hidden_size": 640,
             "num_hidden_layers": 2, "num_attention_heads": 8, "multi_query": True,
             "vocab_size": 1024}


def test_the_reader_takes_ffn_hidden_size_and_falcons_kv_heads():
    assert (read_hf_config(FALCON).intermediate_size, read_hf_config(FALCON).num_key_value_heads
            ) == (384, 2)
    assert (read_hf_config(FALCON_7B).intermediate_size,
            read_hf_config(FALCON_7B).num_key_value_heads) == (640, 1)


def test_a_falcon_plan_counts_its_weights_and_kv_cache_by_hand():
    r = tgc.plan_llm(FALCON, device="h100_sxm5_80gb", prompt=128, gen=16, batches=[1]).rows[0]
    # embedding 1024·256 (tied with the lm_head); a layer: fused q/k/v (8 + 2·2)·32·256, the
    # output 256·256, the MLP 2·256·384 (not 4·256), two layer norms 2·2·256; a final norm 2·256
    params = 1024 * 256 + 2 * ((8 + 2 * 2) * 32 * 256 + 256 * 256 + 2 * 256 * 384
                               + 2 * 2 * 256) + 2 * 256
    assert r.weights_bytes == 2 * params
    # 2 (K, V) · 2 layers · 2 KV heads · 32 · (128 + 16) tokens · 2 bytes
    assert r.kv_cache_bytes == 2 * 2 * 2 * 32 * 144 * 2
    seven = tgc.plan_llm(FALCON_7B, device="h100_sxm5_80gb", prompt=128, gen=16,
                         batches=[1]).rows[0]
    assert seven.kv_cache_bytes == 2 * 2 * 1 * 32 * 144 * 2  # one KV head
