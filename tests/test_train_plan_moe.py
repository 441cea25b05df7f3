"""Expert parallelism in training plans: a Mixtral-style MoE's experts read off its captured
graph, their parameters divided over ep by hand, the all-to-all dispatch and combine priced by
the collective model by hand, the expert GEMMs regrouped for the same FLOPs (oracle: the
unsplit records), and Megatron's rules for ep as errors that name the nearest good value. A
2-layer Mixtral of width 64 with 4 experts keeps every capture under a second."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import torch_gemm_cost as tgc
from torch_gemm_cost.cli import main
from torch_gemm_cost.trainplan.model import StepSource
from torch_gemm_cost.trainplan.search import candidate_layouts
from torch_gemm_cost.trainplan.shard import shard_records

transformers = pytest.importorskip("transformers")

DEVICE = "h100_sxm5_80gb"
MOE = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64,
       "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
       "vocab_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2,
       "max_position_embeddings": 128}
# parameters per layer: q 64·64 = 4096, k and v 64·32 = 2048 each, o 4096, two norms 128,
# router 4·64 = 256, experts' gate_up 4·64·256 = 65536 and down 4·128·64 = 32768;
# embeddings and the untied head 512·64 = 32768 each, final norm 64
EXPERTS_PER_LAYER = 65536 + 32768  # 98304
LAYER = 4096 + 2048 + 2048 + 4096 + 128 + 256 + EXPERTS_PER_LAYER  # 110976
TOTAL = 2 * LAYER + 2 * 32768 + 64  # 287552
DENSE = TOTAL - 2 * EXPERTS_PER_LAYER  # 90944


def plan(**kw):
    args = {"seq": 32, "micro_batch": 2, "global_batch": 8, "dtype": "bf16"} | kw
    return tgc.plan_training(MOE, DEVICE, **args)


def test_the_router_is_replicated_and_the_experts_split_as_an_mlp() -> None:
    step = StepSource(MOE, "bfloat16", "sdpa").step(2, 32)
    roles = {(s.module.rsplit(".", 1)[-1], s.phase, s.n): (r, e)
             for s, r, e, seg in zip(step.sites, step.site_role, step.site_expert,
                                     step.site_segment) if seg == 0 and ".mlp" in s.module}
    assert roles[("gate", "forward", 4)] == ("replicated", False)
    assert roles[("experts", "forward", 256)] == ("column", True)  # gate and up, fused: 2·128
    assert roles[("experts", "forward", 64)] == ("row", True)  # down
    assert step.moe_layers == (0, 1)
    experts = [p for p in step.params if p.expert]
    assert sum(p.numel for p in experts) == 2 * EXPERTS_PER_LAYER
    assert sum(p.numel for p in step.params) == TOTAL


def test_each_token_runs_its_two_experts_by_hand() -> None:
    # forward GEMM FLOPs outside attention's core, 2·32 = 64 tokens: per layer q, k, v, o
    # 2·64·12288 = 1572864, router 2·64·256 = 32768, experts 64 tokens × 2 routed = 128
    # rows through gate_up and down, 2·128·(64·256 + 128·64) = 6291456; two layers, then the
    # head 2·64·64·512 = 4194304: 2·7897088 + 4194304 = 19988480
    step = StepSource(MOE, "bfloat16", "sdpa").step(2, 32)
    flops = sum(s.flops for s, core in zip(step.sites, step.site_core)
                if s.phase == "forward" and not core)
    assert flops == 19988480


def test_expert_parameters_split_over_ep_by_hand() -> None:
    for ep in (1, 2, 4):
        p = plan(gpus=4, ep=ep)
        # a GPU holds the dense parameters and 1/ep of the experts: 90944 + 196608 / ep
        params = DENSE + 2 * EXPERTS_PER_LAYER // ep
        assert p.stages[0].params == params
        assert p.memory.weights_bytes == 2 * params  # bf16
        assert p.memory.optimizer_bytes == 12 * params  # fp32 master + Adam's two moments
    # ZeRO 1 over dp = 4: the dense states over 4 ranks, the experts' over the 4 / 2 = 2
    # ranks holding the same experts: (90944 / 4 + 98304 / 2) · 12 = 862656 bytes
    p = plan(gpus=4, ep=2, zero=1)
    assert p.memory.optimizer_bytes == pytest.approx((DENSE / 4 + EXPERTS_PER_LAYER / 2) * 12)


def test_the_all_to_alls_and_gradient_syncs_by_hand() -> None:
    p = plan(gpus=4, ep=2)
    # one GPU's dispatch: 2·32 tokens × 2 experts each × 64 wide × 2 bytes = 16384 B over the
    # 2 ep ranks, adjacent (tp = 1 apart): both in one node. Per layer and micro-batch
    # dispatch + combine forward and their gradients backward: 4; 2 layers; 8 / (4·2) = 1
    # micro-batch: 8 all-to-alls a step
    a2a = tgc.predict_collective_ms(DEVICE, "alltoall", size_bytes=16384, num_gpus=2,
                                    gpus_per_node=2)
    assert p.comm_ms["expert"] == pytest.approx(8 * a2a)
    full = plan(gpus=4, ep=2, recompute="full")  # each layer's forward, all-to-alls too, again
    assert full.comm_ms["expert"] == pytest.approx(12 * a2a)
    # gradients: the dense 90944 over the 4 dp ranks, each layer's experts (2 · 49152) over
    # the 2 ranks holding the same ones (tp·ep = 2 apart), bf16
    dense = tgc.predict_collective_ms(DEVICE, "all_reduce", size_bytes=2 * DENSE, num_gpus=4)
    experts = tgc.predict_collective_ms(DEVICE, "all_reduce",
                                        size_bytes=2 * EXPERTS_PER_LAYER, num_gpus=2)
    assert p.comm_ms["data"] == pytest.approx(dense + experts)
    assert plan(gpus=4).comm_ms["expert"] == 0.0


def test_expert_gemms_run_ep_times_the_tokens_of_an_ep_th_of_the_experts() -> None:
    step = StepSource(MOE, "bfloat16", "sdpa").step(2, 32)
    whole, _, _ = shard_records(step, 1, False)
    split, _, _ = shard_records(step, 1, False, ep=2)
    for a, b, expert in zip(whole, split, step.site_expert):
        assert b.flops == a.flops  # oracle: the same work, regrouped
        if not expert:
            assert b == a
            continue
        # 2·32 tokens × 2 routed / 4 experts = 32 tokens an expert; with ep 2: 2 experts of 64
        assert (a.batch, b.batch) == (4, 2)
        tokens = "k" if a.phase == "backward_dw" else "m"
        assert (getattr(a, tokens), getattr(b, tokens)) == (32, 64)
        assert b.dram_bytes < a.dram_bytes  # half the experts' weights read


def test_bad_expert_parallelism_names_the_nearest_good_value() -> None:
    with pytest.raises(ValueError, match="ep=3 does not divide the 4 experts; nearest good: "
                                         "2 or 4"):
        plan(gpus=4, ep=3)
    with pytest.raises(ValueError, match=r"ep=4 does not divide dp·cp = 2·1 = 2.*nearest "
                                         "good: ep=2"):
        plan(gpus=4, tp=2, ep=4, sequence_parallel=True)
    with pytest.raises(ValueError, match="nearest good: sequence_parallel=True"):
        plan(gpus=8, tp=2, ep=2)
    with pytest.raises(ValueError, match="zero='fsdp' with ep=2.*nearest good: zero=1"):
        plan(gpus=4, ep=2, zero="fsdp")
    dense = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 512,
             "n_positions": 64, "bos_token_id": 0, "eos_token_id": 0}
    with pytest.raises(ValueError, match="ep=2 on a dense model.*nearest good: ep=1"):
        tgc.plan_training(dense, DEVICE, gpus=4, ep=2, seq=32)


def test_the_search_tries_expert_parallelism_of_a_moe_model() -> None:
    shape = StepSource(MOE, "bfloat16", "sdpa").shape
    eps = {lay.ep for lay in candidate_layouts(shape, 8, 8, 32, 8, (1,), ("none",))}
    assert eps == {1, 2, 4}  # the divisors of the 4 experts that divide dp·cp
    found = tgc.search_training_plans(MOE, DEVICE, gpus=4, global_batch=8, seq=32,
                                      micro_batches=(2,), recompute=("none",), top=2)
    assert any(r.layout.ep > 1 for r in found.rejected) or any(
        p.layout.ep > 1 for p in found.plans)


def test_train_plan_command_with_ep(tmp_path: Path, capsys) -> None:
    config = tmp_path / "moe.json"
    config.write_text(json.dumps(MOE))
    base = ["train-plan", "--hf-config", str(config), "--device", DEVICE, "--seq", "32"]
    assert main([*base, "--gpus", "4", "--ep", "2", "--global-batch", "8", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["layout"]["ep"] == 2 and doc["comm_ms"]["expert"] > 0
    assert main([*base, "--gpus", "4", "--ep", "3"]) == 2
    assert "ep=3 does not divide the 4 experts" in capsys.readouterr().err
