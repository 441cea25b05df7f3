"""Serving plans (``plan_llm``): the memory arithmetic by hand, the decode and prefill bounds
against the roofline, quantized weights, tensor parallelism and the command line.

Small Llama/Mixtral geometries keep most tests fast; the Must-show figures use Llama-3-8B's
published sizes, built on the meta device (its captures are shared by the tests that use it).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

import torch_gemm_cost as tgc
from torch_gemm_cost.capture.core import capture
from torch_gemm_cost.capture.hf_config import config_dims, read_hf_config
from torch_gemm_cost.cli import main
from torch_gemm_cost.compiled.fusion import fuse_kernels
from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.llm import format_llm_layers
from torch_gemm_cost.llm.attention import ServingAttention
from torch_gemm_cost.llm.memory import activation_bytes_per_token, kv_cache_bytes, max_batch_fitting
from torch_gemm_cost.llm.model import config_key, config_of, meta_model
from torch_gemm_cost.llm.pricing import kernel_floors, serving_records
from torch_gemm_cost.llm.schedule import decode_contexts, prefill_steps
from torch_gemm_cost.llm.shape import ServingShape
from torch_gemm_cost.llm.shard import shard_config
from torch_gemm_cost.llm.step import _serving_kernels, serving_step
from torch_gemm_cost.llm.weights import WEIGHT_BYTES
from torch_gemm_cost.predict import default_predictor
from torch_gemm_cost.predict.ops import load_op_costs
from torch_gemm_cost.predict.price import price_records
from torch_gemm_cost.records import extract
from torch_gemm_cost.records.types import FusedKernel

pytest.importorskip("transformers")

LLAMA3_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0,
             "tie_word_embeddings": False}
TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "vocab_size": 1024, "max_position_embeddings": 4096, "tie_word_embeddings": False}
TINY_MOE = {"model_type": "mixtral", "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
            "vocab_size": 1024, "max_position_embeddings": 4096, "num_local_experts": 4,
            "num_experts_per_tok": 2, "tie_word_embeddings": False}


def tiny_plan(**kw):
    args = {"device": "h100_sxm5_80gb", "dtype": "bf16", "prompt": 512, "gen": 64,
            "batches": [1, 8]}
    return tgc.plan_llm(kw.pop("config", TINY), **{**args, **kw})


@pytest.fixture(scope="module")
def llama3_h100():
    return tgc.plan_llm(LLAMA3_8B, device="h100_sxm5_80gb", dtype="bf16", prompt=2048,
                        gen=256, batches=[1])


# ---------------------------------------------------------------- arithmetic by hand
def test_kv_cache_bytes_by_hand_with_gqa():
    # Llama-3-8B: 2 (K, V) · 32 layers · 8 KV heads (GQA: not the 32 query heads) · 128 ·
    # 2304 tokens · 2 bytes = 301,989,888 bytes a sequence; 16 sequences 16 times that
    assert kv_cache_bytes([0] * 32, 8, 128, 2304, 1, 2) == 2 * 32 * 8 * 128 * 2304 * 2
    assert kv_cache_bytes([0] * 32, 8, 128, 2304, 16, 2) == 16 * 301_989_888
    # an fp8 cache holds half; a sliding-window layer (window 1024) only its window
    assert kv_cache_bytes([0] * 32, 8, 128, 2304, 1, 1) == 150_994_944
    assert kv_cache_bytes([1024, 0], 8, 128, 2304, 1, 2) == 2 * 8 * 128 * (1024 + 2304) * 2


def test_a_plans_rows_carry_the_kv_and_activation_arithmetic():
    plan = tiny_plan()
    for r in plan.rows:
        # 2 · 2 layers · 2 KV heads · head_dim 32 · (512 + 64) tokens · batch · 2 bytes
        assert r.kv_cache_bytes == 2 * 2 * 2 * 32 * 576 * r.batch * 2
        # 8192 tokens · 2 B · (2·256 + max((8 + 2·2)·32 + 8·32, 3·512)) + batch · 1024 · 4
        assert r.activation_bytes == 8192 * 2 * (512 + 1536) + r.batch * 1024 * 4
        assert r.request_ms == pytest.approx(r.ttft_ms + 63 * r.tpot_ms)
        assert r.tokens_per_s == pytest.approx(r.batch * 64 / r.request_ms * 1e3)
        assert r.fits == (r.memory_bytes <= plan.usable_bytes)
    # the tiny model's weights: embed and lm_head 2·1024·256, per layer q 256·256, k and v
    # 64·256 each, o 256·256, gate/up/down 3·512·256, two norms 2·256; a final norm 256
    params = 2 * 1024 * 256 + 2 * (2 * 256 * 256 + 2 * 64 * 256 + 3 * 512 * 256 + 512) + 256
    assert plan.rows[0].weights_bytes == 2 * params


def test_max_batch_on_a_24_gb_l4_matches_the_hbm_arithmetic(llama3_h100):
    plan = tgc.plan_llm(LLAMA3_8B, device="l4", dtype="bf16", prompt=2048, gen=256,
                        batches=[1])
    # weights: 8,030,261,248 parameters (embedding and lm_head 128256·4096 each; per layer
    # q 4096², k and v 1024·4096, o 4096², gate/up/down 14336·4096, two norms) · 2 bytes
    weights = 8_030_261_248 * 2
    assert plan.rows[0].weights_bytes == weights
    usable = 0.9 * 24 * 2**30  # vLLM's gpu_memory_utilization of the L4's 24 GB (GiB)
    # activations for the 8192-token budget: 2 B · (2·4096 + max(6144 + 4096, 3·14336))
    fixed = 8192 * 102_400
    # a sequence: its KV cache 2·32·8·128·2304·2 and its fp32 logits 128256·4
    per_sequence = 301_989_888 + 128_256 * 4
    # (23,192,823,398 - 16,060,522,496 - 838,860,800) / 302,502,912 = 20.80 -> 20
    assert plan.max_batch == int((usable - weights - fixed) // per_sequence) == 20
    assert max_batch_fitting(usable, weights, fixed, per_sequence, 8192) == 20
    # 20 fits and 21 does not: the plan's own rows say so
    rows = tgc.plan_llm(LLAMA3_8B, device="l4", dtype="bf16", prompt=2048, gen=256,
                        batches=[20, 21]).rows
    assert [r.fits for r in rows] == [True, False]


def test_activation_bound_of_an_moe_counts_its_top_k_copies():
    dense = ServingShape.of(config_of(TINY))
    moe = ServingShape.of(config_of(TINY_MOE))
    # dense: 2·(2·256 + max(384 + 256, 3·512)); MoE: the MLP half holds top-2 copies
    assert activation_bytes_per_token(dense, 2) == 2 * (512 + 1536)
    assert activation_bytes_per_token(moe, 2) == 2 * (512 + 2 * 1536)


def test_one_config_reader_gives_capture_and_the_planner_their_sizes():
    # a Qwen2-MoE-like config: the planner prices each expert's MLP (moe_intermediate_size
    # 1408), while capture names the config's dense intermediate_size (5632) for advice; both
    # read head_dim = 2048 / 16 = 128 from the one record, and the window is off
    qwen_moe = {"model_type": "qwen2_moe", "hidden_size": 2048, "num_attention_heads": 16,
                "num_key_value_heads": 16, "num_hidden_layers": 4, "vocab_size": 151936,
                "intermediate_size": 5632, "moe_intermediate_size": 1408, "num_experts": 60,
                "num_experts_per_tok": 4, "sliding_window": 4096, "use_sliding_window": False,
                "max_position_embeddings": 8192}
    hf = read_hf_config(qwen_moe)
    assert config_dims(qwen_moe) == hf.dims() == {
        "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632,
        "num_attention_heads": 16, "head_dim": 128}
    assert ServingShape.of(qwen_moe) == ServingShape(
        layers=4, hidden=2048, heads=16, kv_heads=16, head_dim=128, intermediate=1408,
        vocab=151936, experts=60, top_k=4, windows=(0, 0, 0, 0), max_positions=8192)
    # per-layer kinds: a sliding layer holds its 512-token window, a full one all of it
    gemma = {**TINY, "sliding_window": 512, "layer_types": ["sliding_attention",
                                                            "full_attention"]}
    assert ServingShape.of(gemma).windows == (512, 0)
    with pytest.raises(ValueError, match="lacks the sizes of a decoder-only LM"):
        ServingShape.of({"hidden_size": 256})


def test_prefill_steps_chunk_prompts_under_the_token_budget():
    # 64 prompts of 2048 under 8192: 16 full steps of 4 whole prompts each
    assert dict(prefill_steps(64, 2048, 8192)) == {(8192, 4, ((2048, 2048),) * 4): 16}
    # one prompt of 20000: chunks of 8192 against a growing context, the last one sampled
    assert dict(prefill_steps(1, 20000, 8192)) == {
        (8192, 0, ((8192, 8192),)): 1, (8192, 0, ((8192, 16384),)): 1,
        (3616, 1, ((3616, 20000),)): 1}
    steps = prefill_steps(5, 3000, 8192)
    assert sum(t * n for (t, _, _), n in steps.items()) == 5 * 3000
    assert sum(k * n for (_, k, _), n in steps.items()) == 5


def test_simpson_over_a_few_contexts_matches_every_decode_step():
    """Oracle: the attention of every one of the gen − 1 decode steps, summed, against the
    plan's five-point Simpson integral of it."""
    shape = ServingShape.of(shard_config(config_of(LLAMA3_8B), 1))
    bf16 = tgc.resolve_dtype("bf16")
    attention = ServingAttention(get_device("h100_sxm5_80gb"), shape, bf16, bf16)
    prompt, gen, batch = 2048, 1025, 8
    exact = sum(attention.decode(batch, prompt + t)[0] for t in range(1, gen)) / (gen - 1)
    points = decode_contexts(prompt, gen)
    assert len(points) == 5 and sum(w for _, w in points) == pytest.approx(1.0)
    integrated = sum(w * attention.decode(batch, c)[0] for c, w in points)
    assert integrated == pytest.approx(exact, rel=0.01)


# ---------------------------------------------------------------- one pipeline
def test_a_plans_decode_step_is_the_pipelines_price_of_that_step():
    """Oracle: the plan's decode step at batch B is the predict stage ``estimate`` runs
    (``price_records``) on that step's records, captured as ``estimate(compiled=True)``
    captures them, plus what the serving engine adds, each shown here: its layout of the
    records, a KV-cache write a layer, CUDA graphs, and its attention kernel."""
    batch, prompt, gen = 4, 512, 3
    spec, bf16 = get_device("h100_sxm5_80gb"), tgc.resolve_dtype("bf16")
    plan = tgc.plan_llm(TINY, device=spec.id, dtype="bf16", prompt=prompt, gen=gen,
                        batches=[batch])
    row, report = plan.rows[0], plan.decode_reports[0]

    # the decode step captured anew: B sequences of one token each are B tokens of one
    # flattened sequence, every one sampled; capture -> extract -> fuse, as estimate does
    config = config_of(TINY)
    model = meta_model(config_key(config), "bfloat16")
    ids = torch.ones(1, batch, dtype=torch.long, device="meta")
    captured = capture(model, (ids,), {"use_cache": False, "logits_to_keep": batch})
    sites, others = extract(captured, bf16, mode="inference", native_dtype=torch.bfloat16)
    others, kernels = fuse_kernels(captured, others, bf16, mode="inference",
                                   native_dtype=torch.bfloat16)
    # the serving engine's layout: q/k/v and gate/up one GEMM each (4 a layer, and the
    # lm_head), no SDPA GEMMs (its attention kernel runs them), and after the step's ops one
    # KV-cache write a layer: 2 (K, V) · 4 tokens · 2 KV heads · 32 = 512 elements, 2 B read
    # and 2 B written each
    step = serving_step(model, captured, sites, others, kernels, batch, batch)
    dense_sites, ops = serving_records(step, None, bf16)
    assert len(dense_sites) == 2 * 4 + 1
    writes = [o for o in ops if o.op == "reshape_and_cache"]
    assert [(o.numel, o.dram_bytes) for o in writes] == [(512, 512 * 4)] * 2

    # estimate's predict stage on those records, the ops without launch cost (a CUDA graph),
    # then each kernel at least its floor; the attention ops and the attention-output copies
    # the engine does not run count nothing
    costs = load_op_costs()
    priced = price_records(dense_sites, ops, spec, default_predictor(), kernels=step.kernels,
                           op_costs=replace(costs, launch_ms=0.0))
    floored = kernel_floors(priced.ops, step.kernels, costs)
    kept = [(o, t) for i, (o, t) in enumerate(zip(priced.ops, floored))
            if i not in step.dropped and o.op.attention is None]
    kv_write_ms = sum(t or 0.0 for o, t in kept if o.op.op == "reshape_and_cache")
    dense_ms = sum(g.time_ms for g in priced.gemms) + sum(t or 0.0 for _, t in kept)
    assert step.dropped and kv_write_ms > 0

    # the attention kernel of each of the 2 layers at the gen - 1 = 2 decode contexts, 513 and
    # 514 keys, half each; one GPU, so no collectives
    attention = ServingAttention(spec, ServingShape.of(config), bf16, bf16)
    at_513, at_514 = attention.decode(batch, 513)[0], attention.decode(batch, 514)[0]
    assert at_513 == pytest.approx(2 * attention.per_layer_ms(batch, 513, 0), rel=1e-12)
    assert row.decode_comm_ms == 0.0
    assert row.decode_attention_ms == pytest.approx(0.5 * at_513 + 0.5 * at_514, rel=1e-9)
    assert row.tpot_ms == pytest.approx(dense_ms + 0.5 * at_513 + 0.5 * at_514, rel=1e-9)
    # the decode report is that step at the middle context, prompt + gen // 2 = 513 keys
    assert [g.time_ms for g in report.gemms] == [g.time_ms for g in priced.gemms]
    assert report.total_ms == pytest.approx(dense_ms + at_513, rel=1e-9)
    assert sum(o.time_ms or 0.0 for o in report.others if o.op.op == "reshape_and_cache") \
        == pytest.approx(kv_write_ms, rel=1e-9)

    # and estimate itself prices the GEMMs the engine leaves as they are (o_proj, down_proj,
    # the lm_head) to the same times
    estimated = tgc.estimate(model, (ids,), {"use_cache": False, "logits_to_keep": batch},
                             device=spec, dtype="bf16", compiled=True)
    same = ("model.layers.0.self_attn.o_proj", "model.layers.1.mlp.down_proj", "lm_head")
    assert [g.time_ms for g in estimated.gemms if g.site.module in same] == \
        [g.time_ms for g in report.gemms if g.site.module in same]


# ---------------------------------------------------------------- against the roofline
def test_llama3_8b_h100_batch_1_against_the_roofline(llama3_h100):
    r = llama3_h100.rows[0]
    spec = llama3_h100.device
    # decode is memory-bound at batch 1: at least the bytes it reads (weights, KV cache) at
    # the DRAM bandwidth, and at least the weights it holds but the embedding table, which a
    # decode step reads one row of: (16,060,522,496 - 2·525,336,576) B / 3.35 TB/s = 4.48 ms
    assert r.tpot_ms >= r.roofline_tpot_ms == pytest.approx(r.decode_bytes / 3.35e12 * 1e3)
    assert r.tpot_ms >= (r.weights_bytes - 2 * 128_256 * 4096) / spec.dram_bw_bytes_per_s * 1e3
    # and within 1.5x of all its weights over the bandwidth (16.06 GB / 3.35 TB/s = 4.79 ms):
    # benchmarks/results/llm.md gives the ratio, 1.49x, and what makes it up
    assert 1.0 <= r.tpot_ms / (r.weights_bytes / spec.dram_bw_bytes_per_s * 1e3) <= 1.5
    # prefill of 2048 tokens: 2·6.98e9 parameters·2048 tokens (the lm_head on the last token)
    # + causal attention 4·128·32 heads·(2048·2049/2)·32 layers = 29.69 TFLOP; over the dense
    # bf16 peak of 989.4 TFLOP/s, 30.0 ms; the plan's TTFT within 1.0x-2.0x of it
    assert r.prefill_flops == pytest.approx(29.69e12, rel=0.002)
    assert r.roofline_ttft_ms == pytest.approx(r.prefill_flops / 989.4e12 * 1e3)
    assert 1.0 <= r.ttft_ms / r.roofline_ttft_ms <= 2.0


def test_batching_trades_latency_for_throughput():
    plan = tiny_plan(batches=[1, 8, 64])
    one, _, many = plan.rows
    # 64 prompts of 512 tokens take 4 budget-full prefill steps where one takes 1, and the
    # batch holds 64 KV caches, yet it generates more tokens a second
    assert many.prefill_steps == 4 and one.prefill_steps == 1 and many.ttft_ms > one.ttft_ms
    assert many.kv_cache_bytes == 64 * one.kv_cache_bytes
    assert [r.tokens_per_s for r in plan.rows] == sorted(r.tokens_per_s for r in plan.rows)


# ---------------------------------------------------------------- quantized weights
def test_int4_weights_read_a_quarter_of_bf16s_bytes():
    bf16 = tiny_plan(batches=[1])
    int4 = tiny_plan(batches=[1], weights="int4")
    site = {g.site.module: g.site for g in int4.decode_reports[0].gemms}
    qkv = site["model.layers.0.self_attn.q_proj+k_proj+v_proj"]
    # one GEMM for q, k and v: n = (8 + 2·2)·32 = 384; its weight 384·256 int4 weights with a
    # bf16 scale per 128: 0.5 + 2/128 bytes each, a quarter of bf16's 2 and 1/128 more
    assert qkv.n == 384 and qkv.b_bytes == WEIGHT_BYTES["int4"] == 0.5 + 2 / 128
    assert site["lm_head"].b_bytes is None  # the lm_head stays in bf16
    # weights held: the linear layers' 2·(384·256 + 256·256 + 3·512·256) = 1,114,112 weights
    # at 0.515625 B instead of 2 B
    linear = 2 * (384 * 256 + 256 * 256 + 3 * 512 * 256)
    assert bf16.rows[0].weights_bytes - int4.rows[0].weights_bytes == pytest.approx(
        linear * (2 - 0.515625), abs=1)
    # a decode step reads the small weights: the quantized GEMMs' weight bytes are 0.2578 of
    # bf16's
    read = {p: sum(g.site.batch * g.site.k * g.site.n
                   * (g.site.b_bytes if g.site.b_bytes is not None else 2)
                   for g in plan.decode_reports[0].gemms if g.site.module != "lm_head")
            for p, plan in (("bf16", bf16), ("int4", int4))}
    assert read["int4"] / read["bf16"] == pytest.approx(0.515625 / 2)
    assert int4.rows[0].tpot_ms < bf16.rows[0].tpot_ms


def test_fp8_weights_run_fp8_gemms_with_their_activation_cast():
    plan = tiny_plan(batches=[1], weights="fp8")
    sites = [g.site for g in plan.decode_reports[0].gemms]
    quantized = [s for s in sites if s.module != "lm_head"]
    assert all(s.dtype == "float8_e4m3fn" and s.quantized_elements == s.m * s.k
               for s in quantized)
    assert [s.dtype for s in sites if s.module == "lm_head"] == ["bfloat16"]


def test_an_moe_router_and_lm_head_stay_unquantized():
    plan = tiny_plan(config=TINY_MOE, batches=[1], weights="int4")
    sites = {g.site.module: g.site for g in plan.decode_reports[0].gemms}
    assert sites["model.layers.0.mlp.gate"].b_bytes is None  # the router: n = 4 experts
    assert sites["model.layers.0.mlp.experts"].b_bytes == WEIGHT_BYTES["int4"]


def test_weight_formats_the_device_cannot_run_are_named():
    with pytest.raises(ValueError, match="needs fp8 tensor cores; a100_sxm4_80gb .* supports"):
        tiny_plan(device="a100_sxm4_80gb", weights="fp8")
    # 'int3' shares 'int' with 'int8' and 'int4': 2·3/8 = 0.75; nothing with 'fp8'
    with pytest.raises(ValueError,
                       match=r"^unknown weights format 'int3'; did you mean 'int8', 'int4'\?$"):
        tiny_plan(weights="int3")
    with pytest.raises(ValueError, match="compute capability 8.0"):
        tiny_plan(device="tesla_t4", dtype="fp16", weights="int4")


# ---------------------------------------------------------------- tensor parallelism
def test_tensor_parallelism_halves_the_gemm_flops_and_adds_the_all_reduces():
    one, two = tiny_plan(batches=[8]), tiny_plan(batches=[8], tp=2)
    flops = [sum(g.site.flops for g in p.decode_reports[0].gemms) for p in (one, two)]
    assert flops[1] * 2 == flops[0]  # every GEMM sharded: heads, MLP and vocabulary columns
    assert one.rows[0].decode_comm_ms == 0.0
    # per decode step of 8 tokens: 2 all-reduces a layer and one after the embedding, of
    # 8 tokens · 256 hidden · 2 bytes, and an all-gather of 8 sampled tokens' 1024 logits
    reduce = tgc.predict_collective_ms("h100_sxm5_80gb", "all_reduce", size_bytes=8 * 256 * 2,
                                       num_gpus=2)
    gather = tgc.predict_collective_ms("h100_sxm5_80gb", "all_gather",
                                       size_bytes=8 * 1024 * 2, num_gpus=2)
    assert two.rows[0].decode_comm_ms == pytest.approx(5 * reduce + gather)
    # each GPU holds half the KV heads and half the sharded weights
    assert two.rows[0].kv_cache_bytes * 2 == one.rows[0].kv_cache_bytes


def test_kv_heads_replicate_where_tp_exceeds_them():
    config = config_of(TINY)
    assert shard_config(config, 4).num_key_value_heads == 1  # 2 KV heads on 4 GPUs
    with pytest.raises(ValueError, match="does not divide the 8 attention heads; nearest"):
        shard_config(config, 3)
    # GPT-2 names no MLP width (n_inner is None: 4 x hidden), so nothing says what to split
    gpt2 = config_of({"model_type": "gpt2", "n_embd": 256, "n_head": 8, "n_layer": 2})
    with pytest.raises(ValueError, match="tp=2 needs a config that names its MLP width"):
        shard_config(gpt2, 2)


def test_tp_beyond_the_node_is_refused_before_any_capture():
    with pytest.raises(ValueError, match="tp=16 on l4"):
        tiny_plan(device="l4", tp=16, config={**TINY, "num_attention_heads": 16})


# ---------------------------------------------------------------- reports and the CLI
def test_the_decode_table_sums_to_its_total_and_runs_no_attention_copy(llama3_h100):
    report = llama3_h100.decode_reports[0]
    rows = report.module_rows(depth=1)
    assert sum(r["time_ms"] for r in rows) == pytest.approx(report.total_ms)
    ops = {o.op.op for o in report.others if o.time_ms}
    assert "reshape_and_cache" in ops and "aten.clone" not in ops
    # q/k/v and gate/up are one GEMM each: 4 a layer and the lm_head
    assert len(report.gemms) == 32 * 4 + 1
    # the rotary embeddings of q and k are one kernel a layer, as vLLM's rotary_embedding runs
    rotary = {o.kernel for o in report.others if o.op.op == "aten.neg"}
    assert len(rotary) == 32 and all(k.count("+") == 1 for k in rotary)
    text = format_llm_layers(llama3_h100, 1)
    assert "LlamaDecoderLayer × 32" in text and "context 2176" in text


def test_a_layers_rotary_kernels_of_q_and_k_run_as_one():
    # Llama-3-8B at one token: the q rotation reads q (32 heads · 128 · 2 B = 8192 B), cos and
    # sin, and writes q; inductor gives q and k (8 heads) a kernel each, as their element
    # counts differ; vLLM rotates both in one launch, so the plan's kernel holds both ops and
    # both byte counts, and the norm kernel between layers stays apart
    def kernel(name, op_class, ops, dram_bytes):
        return FusedKernel(name=name, phase="forward", op_class=op_class, ops=ops,
                           dram_bytes=dram_bytes, module="model.layers.0.self_attn")

    q = kernel("rope_q", "rope_fused", (3, 4), 24_832)
    k = kernel("rope_k", "rope_fused", (5, 6), 6_400)
    norm = kernel("norm", "rms_norm_fused", (7,), 32_768)
    q1 = kernel("rope_q1", "rope_fused", (8,), 24_832)
    out = _serving_kernels([q, k, norm, q1])
    assert [x.name for x in out] == ["rope_q+rope_k", "norm", "rope_q1"]
    assert out[0].ops == (3, 4, 5, 6) and out[0].dram_bytes == 24_832 + 6_400 == 31_232
    assert out[0].launches == 1


def test_bad_arguments_name_the_nearest_good_value():
    with pytest.raises(ValueError, match="gen must be an integer of at least 2"):
        tiny_plan(gen=1)
    with pytest.raises(ValueError, match="exceeds the token budget 8192"):
        tiny_plan(batches=[9000])
    with pytest.raises(ValueError, match="exceeds the model's 4096 positions"):
        tiny_plan(prompt=4000, gen=200)
    with pytest.raises(ValueError, match="use 'bf16' or 'fp16'"):
        tiny_plan(dtype="fp32")


def test_cli_prints_the_plan_and_writes_its_json(tmp_path, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    out = tmp_path / "plan.json"
    rc = main(["llm", "--hf-config", str(config), "--device", "h100_sxm5_80gb", "--prompt",
               "256", "--gen", "32", "--batch", "1,4", "--layers", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "TTFT ms" in text and "decode step at batch 4" in text
    data = json.loads(out.read_text())
    assert [r["batch"] for r in data["rows"]] == [1, 4]
    assert data["device"] == "h100_sxm5_80gb" and data["max_batch"] > 4
    assert set(data["rows"][0]) >= {"ttft_ms", "tpot_ms", "tokens_per_s", "request_ms",
                                    "weights_bytes", "kv_cache_bytes", "activation_bytes",
                                    "fits"}
    rc = main(["llm", "--hf-config", str(config), "--device", "a100_sxm4_80gb", "--weights",
               "fp8"])
    assert rc == 2 and "needs fp8 tensor cores" in capsys.readouterr().err
    rc = main(["llm", "--hf-config", str(config), "--batch", "1,x"])
    assert rc == 2 and "--batch" in capsys.readouterr().err


def test_a_spec_file_device_plans_as_the_catalog_gpu_it_copies(tmp_path):
    import warnings

    from torch_gemm_cost.hardware.datasheet import template
    record = {**template(get_device("l40s")), "id": "my_ada", "name": "My Ada"}
    path = tmp_path / "my_ada.json"
    path.write_text(json.dumps(record))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the template's uncertain fields are reported once
        mine = tiny_plan(device=str(path))
    catalog = tiny_plan(device="l40s")
    assert [(r.ttft_ms, r.tpot_ms) for r in mine.rows] == \
        [(r.ttft_ms, r.tpot_ms) for r in catalog.rows]
    assert mine.max_batch == catalog.max_batch


def test_a_plan_prints_as_its_table_and_footer() -> None:
    """``print(plan)`` shows the plan (its table, then its footer), as ``format_llm_plan`` does,
    not the dataclass's repr."""
    import transformers

    import torch_gemm_cost as tgc

    config = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      vocab_size=512)
    plan = tgc.plan_llm(config, device="h100_sxm5_80gb", prompt=64, gen=16, batches=[1, 2])
    assert str(plan) == tgc.format_llm_plan(plan) == f"{plan.table()}\n{plan.footer()}"
    assert str(plan).splitlines()[0].split()[:3] == ["batch", "TTFT", "ms"]
    assert plan.layer_table(2) == tgc.format_llm_layers(plan, 2)
