"""Serving plans across GPUs and formats: collectives from a measured profile, pipeline stages
(layers, sends, batches in flight) by hand, the launches vLLM's CUDA-graph mode leaves, fp4 and
w4a8 weights, and tensor parallelism on Falcon and GPT-NeoX, whose attention derives its head
size from the hidden size.

A tiny Llama geometry keeps the captures fast; each expected number is worked in a comment or
priced by the predict stage as an oracle.
"""

from __future__ import annotations

import json

import pytest

import torch_gemm_cost as tgc
from torch_gemm_cost.cli import main
from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.hardware.dtypes import DTYPES
from torch_gemm_cost.llm.model import config_key, config_of
from torch_gemm_cost.llm.pipeline import stage_layers
from torch_gemm_cost.llm.pricing import price_step
from torch_gemm_cost.llm.shard import shard_config
from torch_gemm_cost.llm.step import captured_step
from torch_gemm_cost.llm.weights import WEIGHT_BYTES, fp4_device
from torch_gemm_cost.predict import default_predictor
from torch_gemm_cost.predict.collectives import predict_collective_ms
from torch_gemm_cost.predict.comm_profile import CommMeasurement, CommProfile
from torch_gemm_cost.predict.ops import load_op_costs
from torch_gemm_cost.predict.price import price_records
from torch_gemm_cost.serving.scheduler import EngineLimits, StepBatch, run_engine
from torch_gemm_cost.serving.workload import Request

pytest.importorskip("transformers")

TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "vocab_size": 1024, "max_position_embeddings": 4096, "tie_word_embeddings": False}
TINY4 = {**TINY, "num_hidden_layers": 4}
H100 = "h100_sxm5_80gb"
BF16 = DTYPES["bfloat16"]


def plan(config=TINY, **kw):
    args = {"device": H100, "dtype": "bf16", "prompt": 512, "gen": 64, "batches": [1]}
    return tgc.plan_llm(config, **{**args, **kw})


def dense_ms(config, tokens, sampled, graph, device=H100, fmt=None):
    step = captured_step(config_key(config_of(config)), "bfloat16", tokens, sampled)
    return price_step(step, get_device(device), default_predictor(), fmt, BF16,
                      load_op_costs(), graph)


# ---------------------------------------------------------------- collectives from a profile
def test_a_comm_profile_prices_the_tp_collectives_it_measured(tmp_path):
    # one measured size each, met exactly: a decode step of batch 1 all-reduces 1 token ·
    # 256 hidden · 2 bytes = 512 B and all-gathers 1 · 1024 (padded) vocab · 2 B = 2048 B
    profile = CommProfile((CommMeasurement("all_reduce", 2, 2, 512.0, 20.0),
                           CommMeasurement("all_gather", 2, 2, 2048.0, 30.0)),
                          "NVIDIA H100 80GB HBM3", ("hand-written",))
    p = plan(tp=2, comm_profile=profile)
    # (2 all-reduces a layer · 2 layers + 1 after the embedding) · 0.020 ms + 0.030 ms
    assert p.rows[0].decode_comm_ms == pytest.approx(5 * 0.020 + 0.030)
    said = next(a for a in p.assumptions if a.startswith("Collectives:"))
    assert "from the comm profile of NVIDIA H100 80GB HBM3 (hand-written)" in said
    assert "all_reduce over 2 GPUs: 1 of 2 distinct sizes measured" in said
    prior = plan(tp=2)
    assert "topology prior; no --comm-profile" in next(
        a for a in prior.assumptions if a.startswith("Collectives:"))
    reduce = predict_collective_ms(H100, "all_reduce", size_bytes=512.0, num_gpus=2)
    gather = predict_collective_ms(H100, "all_gather", size_bytes=2048.0, num_gpus=2)
    assert prior.rows[0].decode_comm_ms == pytest.approx(5 * reduce + gather)
    # the command line takes the profile's file, and refuses a missing one
    path = profile.save(tmp_path / "comm.json")
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    args = ["llm", "--hf-config", str(config), "--prompt", "512", "--gen", "64", "--batch", "1",
            "--tp", "2", "--json", "-"]
    assert main([*args, "--comm-profile", str(path)]) == 0
    assert main([*args, "--comm-profile", str(tmp_path / "none.json")]) == 2


def test_serve_sim_takes_the_comm_profile_too():
    profile = CommProfile((CommMeasurement("all_reduce", 2, 2, 512.0, 20.0),), None, ("x",))
    sim = tgc.simulate_serving(TINY, H100, concurrency=1, prompt=64, gen=4, num_requests=1,
                               tp=2, token_budget=1024, comm_profile=profile)
    assert any(a.startswith("Collectives: collectives from the comm profile (x)")
               for a in sim.assumptions)


# ---------------------------------------------------------------- CUDA graphs and launches
def test_a_short_prefill_pays_its_layers_attention_launches_a_long_one_every_launch():
    launch = load_op_costs().launch_ms  # the op model's gap between back-to-back kernels
    short = plan(prompt=256, gen=2)
    # 256 tokens: piecewise graphs, each of the 2 layers' attention launched outside them
    graph = dense_ms(TINY, 256, 1, True)
    r = short.rows[0]
    assert r.ttft_max_ms == pytest.approx(graph.dense_ms + r.prefill_attention_ms + 2 * launch)
    long = plan(prompt=1024, gen=2)
    # 1024 tokens, above the largest captured size (512): eager, every kernel its launch gap
    eager = dense_ms(TINY, 1024, 1, False)
    r = long.rows[0]
    assert r.ttft_max_ms == pytest.approx(eager.dense_ms + r.prefill_attention_ms + 2 * launch)
    # oracle: the eager ops are price_records' own (launches included), as estimate prices them
    step = captured_step(config_key(config_of(TINY)), "bfloat16", 1024, 1)
    from torch_gemm_cost.llm.pricing import serving_records

    sites, others = serving_records(step, None, BF16)
    priced = price_records(sites, others, get_device(H100), default_predictor(),
                           kernels=step.kernels, op_costs=load_op_costs())
    ops = sum(o.time_ms or 0.0 for i, o in enumerate(priced.ops)
              if i not in step.dropped and o.op.attention is None)
    assert eager.dense_ms == pytest.approx(sum(g.time_ms for g in priced.gemms) + ops)
    assert eager.dense_ms > dense_ms(TINY, 1024, 1, True).dense_ms
    # a decode step of batch 1 replays one full graph: no launch gap
    d = short.rows[0]
    assert d.tpot_ms == pytest.approx(dense_ms(TINY, 1, 1, True).dense_ms
                                      + d.decode_attention_ms)


# ---------------------------------------------------------------- pipeline parallelism
def test_pipeline_stages_add_their_sends_and_overlap_micro_batches():
    one = plan(TINY4, batches=[1, 4])
    two = plan(TINY4, batches=[1, 8], pp=2)
    # one prefill pass of 512 tokens through 2 stages: the whole step plus one send of its
    # hidden states and residual, 2 · 512 · 256 · 2 bytes = 524,288 B
    send = predict_collective_ms(H100, "send_recv", size_bytes=524_288.0, num_gpus=2)
    assert two.row(1).ttft_max_ms == pytest.approx(one.row(1).ttft_max_ms + send)
    # batch 1 decodes as one micro-batch: its trip, L(1) + send of 2 · 1 · 256 · 2 = 1024 B
    send1 = predict_collective_ms(H100, "send_recv", size_bytes=1024.0, num_gpus=2)
    assert two.row(1).tpot_ms == pytest.approx(one.row(1).tpot_ms + send1)
    # batch 8 as 2 micro-batches of 4, stages of 2 layers each (share 1/2): the first stage
    # L(4)/2 + send(4), the last L(4)/2; the cycle max(L + s, 2 · (L/2 + s)) = L(4) + 2·s(4),
    # s(4) the send of 2 · 4 · 256 · 2 = 4096 B
    send4 = predict_collective_ms(H100, "send_recv", size_bytes=4096.0, num_gpus=2)
    assert two.row(8).tpot_ms == pytest.approx(one.row(4).tpot_ms + 2 * send4)
    assert "layers split 2/2" in " ".join(two.assumptions)


def test_each_stage_holds_its_layers_and_the_plan_its_most_loaded_stage():
    one, two = plan(TINY4), plan(TINY4, pp=2)
    # per layer: q 256², k and v 64·256 each, o 256², gate/up/down 3·512·256, 2 norms of 256
    layer = 2 * 256 * 256 + 2 * 64 * 256 + 3 * 512 * 256 + 2 * 256
    # first stage: embedding 1024·256 and 2 layers; last: 2 layers, final norm, lm_head
    first, last = 1024 * 256 + 2 * layer, 2 * layer + 256 + 1024 * 256
    assert one.rows[0].weights_bytes == 2 * (first + last)
    assert two.rows[0].weights_bytes == 2 * last  # the last stage holds more
    # its KV cache: 2 layers of 2 · 2 KV heads · 32 · (512 + 64) tokens · 2 bytes
    assert two.rows[0].kv_cache_bytes == 2 * 2 * 2 * 32 * 576 * 2
    assert stage_layers(4, 3) == (1, 2, 1)  # vLLM splits unevenly where pp does not divide


def test_bad_pipeline_sizes_name_the_nearest_good_one():
    with pytest.raises(ValueError, match="pp=5 exceeds the model's 4 decoder layers.*"
                                         "nearest good pp: 4"):
        plan(TINY4, pp=5)
    with pytest.raises(ValueError, match="pp must be a positive integer, got 0"):
        plan(TINY4, pp=0)


def test_the_batch_queue_keeps_one_batch_a_stage_in_flight():
    # two requests of 4 prompt tokens and 2 generated, a budget of 4 tokens a step, every step
    # 2 ms: one stage runs them in turn; two stages of 1 ms each overlap them
    reqs = [Request(0, 0.0, 4, 2), Request(1, 0.0, 4, 2)]
    limits = EngineLimits(4, 256, 1000, 16)

    def two_ms(batch: StepBatch) -> float:
        return 2.0

    one, _ = run_engine(reqs, limits, two_ms)
    # one stage: [0, 2] prefill 0; [2, 4] decode 0 (its last token) and 3 tokens of prompt
    # 1; [4, 6] the last token of prompt 1 (its first token); [6, 8] decode 1
    assert [(o.first_token_ms, o.finish_ms) for o in one] == [(2.0, 4.0), (6.0, 8.0)]
    two, _ = run_engine(reqs, limits, two_ms, stages=lambda b, ms: [ms / 2, ms / 2])
    # two stages: prefill 0 leaves the stages at 2; prefill 1 follows a stage behind, at 3;
    # request 0's decode enters at 2 and leaves at 4, request 1's at 3 and 5
    assert [(o.first_token_ms, o.finish_ms) for o in two] == [(2.0, 4.0), (3.0, 5.0)]


def test_serve_sim_runs_the_pipeline(tmp_path, capsys):
    sim = tgc.simulate_serving(TINY4, H100, concurrency=4, prompt=128, gen=16,
                               num_requests=8, pp=2, token_budget=1024)
    assert sim.pp == 2 and sim.gpus == 2 and "pipeline parallel 2" in str(sim)
    assert any(a.startswith("Pipeline parallelism 2 (layers 2/2") for a in sim.assumptions)
    config = tmp_path / "tiny4.json"
    config.write_text(json.dumps(TINY4))
    # the two clients prefill together (128 tokens), then decode together (2 tokens): their
    # sends are 2 · 128 · 256 · 2 = 131,072 B and 2 · 2 · 256 · 2 = 2048 B, the second measured
    profile = CommProfile((CommMeasurement("send_recv", 2, 2, 2048.0, 20.0),), None, ("x",))
    path = profile.save(tmp_path / "comm.json")
    assert main(["serve-sim", "--hf-config", str(config), "--concurrency", "2", "--prompt",
                 "64", "--gen", "8", "--num-requests", "4", "--pp", "2", "--comm-profile",
                 str(path), "--max-num-batched-tokens", "1024", "--assumptions"]) == 0
    out = capsys.readouterr().out
    assert "pipeline parallel 2" in out and "send_recv over 2 GPUs: 1 of 2 distinct" in out


# ---------------------------------------------------------------- fp4 and w4a8 weights
def test_fp4_and_w4a8_weights_by_their_bits():
    # nvfp4: 4 bits + one 8-bit scale per 16 = 4.5 bits; mxfp4: 4 + 8/32 = 4.25 bits;
    # w4a8: int4 + one 16-bit scale per 128 = 4.125 bits
    assert [8 * WEIGHT_BYTES[f] for f in ("nvfp4", "mxfp4", "w4a8")] == [4.5, 4.25, 4.125]
    p = plan(device="b200", weights="nvfp4")
    # the decoder's linear weights in nvfp4 (0.5625 B), the rest in bf16: per layer
    # q/o 2·256², k/v 2·64·256, gate/up/down 3·512·256 = 557,056 weights; norms 2·256
    linear = 2 * (2 * 256 * 256 + 2 * 64 * 256 + 3 * 512 * 256)
    rest = 2 * 1024 * 256 + 2 * 2 * 256 + 256
    assert p.rows[0].weights_bytes == round(linear * 0.5625 + 2 * rest)
    assert p.weights == "nvfp4" and any("fp4 dense peak (9000 TFLOP/s dense on b200)" in a
                                        for a in p.assumptions)


def test_an_fp4_gemm_is_the_predictors_fp8_gemm_at_the_fp4_rate():
    p = plan(device="b200", weights="mxfp4")
    spec = get_device("b200")
    fp8_typed = [g for g in p.decode_reports[0].gemms if g.site.dtype == "float8_e4m3fn"]
    assert fp8_typed and all(g.site.b_bytes == WEIGHT_BYTES["mxfp4"] for g in fp8_typed)
    # oracle: the GEMM predictor on the B200 with 9000 TFLOP/s in place of its fp8 4500
    assert fp4_device(spec).peak("fp8") == 9.0e15
    for g in fp8_typed[:3]:
        again = price_records([g.site], [], fp4_device(spec), default_predictor())
        assert g.time_ms == pytest.approx(again.gemms[0].time_ms)


def test_formats_without_their_tensor_cores_are_refused_naming_devices_that_have_them():
    with pytest.raises(ValueError, match="weights='nvfp4' needs fp4 tensor cores; "
                                         "h100_sxm5_80gb .* with them: b200"):
        plan(weights="nvfp4")
    with pytest.raises(ValueError, match="weights='w4a8' .* a100_sxm4_80gb .* with them: "
                                         ".*h100_sxm5_80gb"):
        plan(device="a100_sxm4_80gb", weights="w4a8")
    w4a8 = plan(weights="w4a8")
    fp8 = [g for g in w4a8.decode_reports[0].gemms if g.site.dtype == "float8_e4m3fn"]
    assert fp8 and all(g.site.b_bytes == 0.5 + 2 / 128 for g in fp8)


# ---------------------------------------------------------------- Falcon and GPT-NeoX
FALCON_40B = {"model_type": "falcon", "hidden_size": 256, "num_attention_heads": 8,
              "num_kv_heads": 2, "new_decoder_architecture": True, "num_hidden_layers": 2,
              "vocab_size": 1024, "ffn_hidden_size": 1024, "alibi": False,
              "parallel_attn": True, "bias": False, "max_position_embeddings": 4096}
FALCON_7B = {**FALCON_40B, "new_decoder_architecture": False, "multi_query": True}
NEOX = {"model_type": "gpt_neox", "hidden_size": 256, "num_attention_heads": 8,
        "intermediate_size": 1024, "num_hidden_layers": 2, "vocab_size": 1024,
        "use_parallel_residual": True, "rotary_pct": 0.25, "max_position_embeddings": 4096}


def _layer0(config, tp):
    step = captured_step(config_key(shard_config(config_of(config), tp)), "bfloat16", 16, 1)
    return {s.module.rsplit(".", 1)[1]: (s.n, s.k) for s in step.sites
            if ".0." in s.module and s.op not in ("sdpa_qk", "sdpa_pv")}


@pytest.mark.parametrize(("config", "qkv"), [
    (FALCON_40B, (4 + 2 * 1) * 32),  # 8/2 query heads, 2/2 KV heads, head size 256/8 = 32
    (FALCON_7B, (4 + 2) * 32),       # multi-query: the one KV head replicated on each GPU
    (NEOX, 3 * 4 * 32),              # q, k and v of 4 heads each
])
def test_tp_shards_falcon_and_gpt_neox_at_their_head_size(config, qkv, tmp_path):
    # each GPU: the fused q/k/v Linear 256 -> its heads, dense 4·32 -> 256, the MLP's
    # ffn_hidden_size / intermediate_size 1024 split in two
    assert _layer0(config, 2) == {"query_key_value": (qkv, 256), "dense": (256, 128),
                                  "dense_h_to_4h": (512, 256), "dense_4h_to_h": (256, 512)}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["llm", "--hf-config", str(path), "--tp", "2", "--prompt", "128", "--gen",
                 "8", "--batch", "1", "--json", "-"]) == 0


# ---------------------------------------------------------------- expert parallelism
TINY_MOE = {"model_type": "mixtral", "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
            "vocab_size": 1024, "max_position_embeddings": 4096, "num_local_experts": 4,
            "num_experts_per_tok": 2, "tie_word_embeddings": False}


def _experts(p):
    return [(g.site.batch, g.site.m, g.site.n, g.site.k) for g in p.decode_reports[-1].gemms
            if g.site.op == "grouped_mm"][:2]


def test_expert_parallelism_routes_a_gpus_rows_to_its_whole_experts():
    # ep 4, tp 1: 4 data-parallel ranks, batch 8 -> 2 sequences a rank; one expert a GPU,
    # whole (gate/up 2·512 wide); 2 tokens · top-2 / tp 1 = 4 rows a GPU, all on its expert
    p = plan(TINY_MOE, batches=[8], ep=4)
    assert _experts(p) == [(1, 4, 1024, 256), (1, 4, 256, 512)]
    # each MoE layer dispatches and combines 4 rows · 256 · 2 bytes = 2048 B a GPU over the 4;
    # no tensor parallelism, so those are the step's only collectives: 2 layers · 2 all-to-alls
    a2a = predict_collective_ms(H100, "alltoall", size_bytes=2048.0, num_gpus=4)
    assert p.rows[0].decode_comm_ms == pytest.approx(4 * a2a)
    # a GPU's weights: embedding and lm_head 2·1024·256; a layer's attention 2·256² + 2·64·256,
    # its router 1·256 (its one expert's), its expert 3·512·256, two norms; a final norm
    layer = 2 * 256 * 256 + 2 * 64 * 256 + 256 + 3 * 512 * 256 + 2 * 256
    assert p.rows[0].weights_bytes == 2 * (2 * 1024 * 256 + 2 * layer + 256)
    # its KV cache: the rank's 2 sequences of 2 layers · 2 · 2 KV heads · 32 · 576 · 2 bytes
    assert p.rows[0].kv_cache_bytes == 2 * (2 * 2 * 2 * 32 * 576 * 2)
    # ep = tp = 2: no data-parallel ranks; 8 tokens · 2 / 2 = 8 rows over 2 experts, both
    # reached (2·(1 − ½⁸) = 1.99 -> 2), 4 rows each; the all-reduces sum the experts' outputs
    q = plan(TINY_MOE, batches=[8], tp=2, ep=2)
    assert _experts(q) == [(2, 4, 1024, 256), (2, 4, 256, 512)]
    assert q.rows[0].decode_comm_ms == pytest.approx(plan(TINY_MOE, batches=[8], tp=2)
                                                     .rows[0].decode_comm_ms)
    assert "expert parallel 4 (4 data-parallel attention ranks)" in str(p)


def test_bad_expert_parallel_sizes_name_the_nearest_good_one():
    with pytest.raises(ValueError, match="ep=2: the model has a dense MLP.*nearest good ep: 1"):
        plan(ep=2)
    with pytest.raises(ValueError, match="ep=3 does not divide the model's 4 experts; nearest "
                                         "good ep: 2 or 4"):
        plan(TINY_MOE, ep=3)
    with pytest.raises(ValueError, match="ep=2 is not a multiple of tp=4.*nearest good ep: 4"):
        plan(TINY_MOE, tp=4, ep=2)


def test_serve_sim_deals_requests_to_the_data_parallel_ranks():
    sim = tgc.simulate_serving(TINY_MOE, H100, concurrency=4, prompt=64, gen=8,
                               num_requests=8, ep=2, token_budget=1024)
    assert sim.ep == 2 and sim.gpus == 2 and "expert parallel 2" in str(sim)
    assert any(a.startswith("Expert parallelism 2") and "2 data-parallel ranks is an engine"
               in a for a in sim.assumptions)
