"""Training plans (``plan_training``, ``search_training_plans``): the pipeline schedule and the
memory arithmetic by hand, the one-GPU plan against ``estimate(mode="train")``, the
tensor-parallel split against the full model, the step's parts summing to the step, the search
and the command line. A 4-layer GPT-2 of width 64 keeps every capture under a second."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import torch_gemm_cost as tgc
from torch_gemm_cost.cli import main
from torch_gemm_cost.trainplan.comm import overlapped_ms
from torch_gemm_cost.trainplan.layout import group_per_node
from torch_gemm_cost.trainplan.memory import (
    ActivationShape,
    ParamBytes,
    layer_activation_bytes,
    param_bytes,
)
from torch_gemm_cost.trainplan.model import StepSource
from torch_gemm_cost.trainplan.schedule import in_flight, run_pipeline
from torch_gemm_cost.trainplan.shard import shard_records

transformers = pytest.importorskip("transformers")

DEVICE = "a100_sxm4_80gb"
TINY = {"model_type": "gpt2", "n_layer": 4, "n_embd": 64, "n_head": 4, "vocab_size": 512,
        "n_positions": 128, "bos_token_id": 0, "eos_token_id": 0}
# its parameters: wte 512·64 = 32768, wpe 128·64 = 8192, per layer 12·64² + 13·64 = 49984
# (c_attn 64·192 + 192, c_proj 64·64 + 64, c_fc 64·256 + 256, mlp.c_proj 256·64 + 64, two
# norms 4·64), final norm 128: 32768 + 8192 + 4·49984 + 128 = 241024 (lm_head tied to wte)
TINY_PARAMS = 241024


def plan(**kw):
    args = {"seq": 64, "dtype": "bf16", "optimizer": "adamw"} | kw
    return tgc.plan_training(TINY, DEVICE, **args)


# ---------------------------------------------------------------- the schedule, by hand
@pytest.mark.parametrize("pp, m", [(2, 2), (4, 8), (4, 1), (8, 32)])
def test_1f1b_bubble_is_pp_minus_one_over_m(pp: int, m: int) -> None:
    # equal stages, t_f = 1, t_b = 2, no sends: (m + pp - 1)·3; the ideal m·3, the bubble
    # (pp - 1)·3 = (pp - 1)/m of the ideal (Narayanan et al. 2021, §2.2.1)
    run = run_pipeline(pp, 1, m, [1.0] * pp, [2.0] * pp, [0.0] * (pp - 1))
    assert run.makespan_ms == pytest.approx((m + pp - 1) * 3.0)
    assert (run.makespan_ms - m * 3.0) / (m * 3.0) == pytest.approx((pp - 1) / m)
    assert [in_flight(pp, 1, m, g) for g in range(pp)] == [min(pp - g, m) for g in range(pp)]


@pytest.mark.parametrize("pp, v, m", [(2, 2, 2), (4, 2, 8), (4, 4, 16)])
def test_interleaving_cuts_the_bubble_by_v(pp: int, v: int, m: int) -> None:
    # each chunk 1/v of a stage: t_f = 1/v, t_b = 2/v; bubble (pp - 1)·3/v (§2.2.2)
    stages = pp * v
    run = run_pipeline(pp, v, m, [1.0 / v] * stages, [2.0 / v] * stages, [0.0] * (stages - 1))
    assert run.makespan_ms == pytest.approx(m * 3.0 + (pp - 1) * 3.0 / v)


def test_a_send_delays_each_stage_boundary_twice_per_pass() -> None:
    # pp = 2, m = 1: F0, send, F1, B1, send, B0: 1 + 0.5 + 1 + 2 + 0.5 + 2
    run = run_pipeline(2, 1, 1, [1.0, 1.0], [2.0, 2.0], [0.5])
    assert run.makespan_ms == pytest.approx(7.0)


def test_overlap_hides_all_but_the_last_bucket() -> None:
    # 8 ms of gradient reduce in 4 buckets under a 40 ms backward: only the last 2 ms show;
    # 80 ms under 40 ms: the first bucket starts after 10 ms, 80 - 30 = 50 ms show
    assert overlapped_ms(8.0, 40.0, 4) == pytest.approx(2.0)
    assert overlapped_ms(80.0, 40.0, 4) == pytest.approx(50.0)
    assert group_per_node(16, 2, 8) == 4 and group_per_node(4, 8, 8) == 1


# ---------------------------------------------------------------- memory, by hand
def test_zero_stages_shard_states_grads_then_weights() -> None:
    # bf16 + AdamW: 2 + 2 + 12 bytes a parameter (ZeRO §3); dp = 4 shards
    assert param_bytes(2, "adamw") == ParamBytes(weight=2, grad=2, optimizer=12)
    p = TINY_PARAMS
    mem = {z: plan(dp=4, zero=z, micro_batch=1).memory for z in (0, 1, 2, 3)}
    assert (mem[0].weights_bytes, mem[0].grads_bytes, mem[0].optimizer_bytes) == (
        2 * p, 2 * p, 12 * p)
    assert (mem[1].weights_bytes, mem[1].grads_bytes, mem[1].optimizer_bytes) == (
        2 * p, 2 * p, 12 * p / 4)
    assert (mem[2].grads_bytes, mem[2].optimizer_bytes) == (2 * p / 4, 12 * p / 4)
    # ZeRO-3 also shards the weights, and holds two layers whole (49984 each, 2 bytes)
    assert mem[3].weights_bytes == 2 * p / 4 + 2 * 49984 * 2


def test_tensor_parallelism_splits_what_megatron_splits() -> None:
    # tp = 2: per layer c_attn (64·192 + 192), c_proj weight 64·64, c_fc (64·256 + 256),
    # mlp.c_proj weight 256·64 split = 49600 / 2; norms and row biases (4·64 + 2·64 = 384)
    # replicated; wte split (32768 / 2), wpe and the final norm replicated:
    # 4·(24800 + 384) + 16384 + 8192 + 128 = 125440
    assert plan(tp=2, micro_batch=1).stages[0].params == 125440
    assert plan(micro_batch=1).stages[0].params == TINY_PARAMS


def test_activations_are_korthikantis_34sbh_plus_5as2b() -> None:
    # GPT-3 layer, s = 2048, b = 1, h = 4096, a = 32, 16-bit, dropout, eager attention:
    # 34·s·b·h + 5·a·s²·b = 285212672 + 671088640; with t = 8: s·b·h·(10 + 24/8) + 5·a·s²·b/8
    a = ActivationShape(tokens=2048, seq=2048, micro_batch=1, hidden=4096, intermediate=16384,
                        heads=32, kv_heads=32, head_dim=128, elem_bytes=2, gated_mlp=False,
                        attention_dropout=True, hidden_dropout=True, flash=False)
    sbh = 2048 * 4096
    assert layer_activation_bytes(a, 1, False, "none") == 34 * sbh + 5 * 32 * 2048**2
    assert layer_activation_bytes(a, 8, False, "none") == pytest.approx(
        sbh * (10 + 24 / 8) + 5 * 32 * 2048**2 / 8)
    # sequence parallelism splits the 10·s·b·h too; selective drops the s² terms; full keeps
    # the layer's input, 2·s·b·h
    assert layer_activation_bytes(a, 8, True, "selective") == pytest.approx(34 * sbh / 8)
    assert layer_activation_bytes(a, 1, False, "full") == 2 * sbh


def test_a_pipeline_stage_holds_pp_minus_stage_micro_batches() -> None:
    p = plan(pp=2, micro_batch=1, global_batch=8)
    first, last = p.stages
    assert (first.in_flight, last.in_flight) == (2, 1)
    # the first stage holds its own micro-batch and one more in flight
    assert first.memory.in_flight_bytes == pytest.approx(first.memory.activations_bytes)
    assert last.memory.in_flight_bytes == 0


# ---------------------------------------------------------------- oracles and invariants
@pytest.mark.parametrize("optimizer, compiled", [(None, False), ("adamw", False),
                                                 (None, True)])
def test_one_gpu_plan_is_estimates_training_step(optimizer: str | None, compiled: bool) -> None:
    # a vocabulary of 65,536 makes the embedding 65,536·64·4 B = 16.8 MB, its gradient as
    # much: the step touches more than the A100's 40 MB of L2, as a model worth planning does
    # (a plan prices every op from DRAM; estimate reads a call that fits from the L2)
    config = transformers.GPT2Config(**{k: v for k, v in TINY.items() if k != "model_type"}
                                     | {"vocab_size": 65_536})
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(config)
    ids = torch.ones(2, 64, dtype=torch.long, device="meta")
    report = tgc.estimate(model, (ids,), {"labels": ids, "use_cache": False}, device=DEVICE,
                          mode="train", optimizer=optimizer, compiled=compiled)
    p = tgc.plan_training(model, DEVICE, micro_batch=2, seq=64, dtype="fp32",
                          optimizer=optimizer, compiled=compiled)
    assert p.step_ms == pytest.approx(report.gpu_ms, rel=1e-9)  # a plan prices the kernels
    assert p.bubble_ms == p.exposed_comm_ms == 0


def test_compiled_kernels_split_with_their_ops() -> None:
    step = StepSource(TINY, "bfloat16", "eager", compiled=True).step(2, 64)
    _, _, kernels = shard_records(step, 2, False)
    assert step.kernels and len(kernels) == len(step.kernels)
    for full, one in zip(step.kernels, kernels):
        roles = {step.other_role[i] for i in full.ops}
        if roles <= {"split", "head"}:  # every op split: half the bytes (rounded)
            assert abs(2 * one.dram_bytes - full.dram_bytes) <= 2
        elif roles == {"replicated"}:
            assert one == full


def test_split_records_hold_a_tp_th_of_every_split_gemm() -> None:
    step = StepSource(TINY, "bfloat16", "sdpa").step(2, 64)
    sites, _, _ = shard_records(step, 4, False)
    for full, one, role in zip(step.sites, sites, step.site_role):
        if role in ("column", "row", "head"):
            assert one.flops * 4 == full.flops, (full.module, full.phase)
        else:
            assert one == full
    attn = [s for s, r in zip(sites, step.site_role) if r == "column" and s.phase == "forward"
            and s.module.endswith("c_attn")]
    assert {s.n for s in attn} == {3 * 64 // 4}


def test_the_step_is_its_parts() -> None:
    p = plan(tp=2, pp=2, dp=2, micro_batch=2, global_batch=16, zero=1)
    assert p.step_ms == pytest.approx(p.compute_ms + p.bubble_ms + p.exposed_comm_ms
                                      + p.optimizer_ms)
    assert p.bubble_ms > 0 and p.exposed_comm_ms > 0
    lo, hi = p.step_interval_ms
    assert lo <= p.step_ms <= hi
    assert p.tokens_per_s_per_gpu == pytest.approx(16 * 64 / (p.step_ms * 1e-3) / 8)
    doc = json.loads(p.to_json())
    assert doc["layout"]["gpus"] == 8 and len(doc["stages"]) == 2


def test_recomputation_costs_compute_and_saves_activations() -> None:
    plans = {r: plan(micro_batch=2, recompute=r) for r in ("none", "selective", "full")}
    assert plans["none"].compute_ms < plans["selective"].compute_ms < plans["full"].compute_ms
    acts = {r: p.memory.activations_bytes for r, p in plans.items()}
    assert acts["full"] < acts["selective"] < acts["none"]
    assert plans["full"].hardware_tflops_per_gpu > plans["full"].model_tflops_per_gpu


# ---------------------------------------------------------------- search and the command line
def test_search_ranks_the_fitting_layouts_and_says_why_the_others_lose() -> None:
    found = tgc.search_training_plans(TINY, DEVICE, gpus=4, global_batch=8, seq=64,
                                      micro_batches=(1, 2), recompute=("none",), top=3)
    assert found.captures == 2  # one per micro-batch size, every layout reuses them
    steps = [p.step_ms for p in found.plans]
    assert steps == sorted(steps) and all(p.fits for p in found.plans)
    assert found.layouts == len(found.plans) + len(found.rejected)
    assert all(r.why for r in found.rejected)
    assert all(r.step_ms >= steps[0] for r in found.rejected if r.fits)
    assert "why the others lose" in str(found)


def test_bad_layouts_name_the_nearest_good_value() -> None:
    with pytest.raises(ValueError, match="tp=3 does not divide the 4 attention heads; nearest "
                                         "good: 2 or 4"):
        plan(tp=3)
    with pytest.raises(ValueError, match="nearest good: zero=1, or pp=1"):
        plan(pp=2, dp=2, zero=3)
    with pytest.raises(ValueError, match="not a multiple of dp·micro_batch"):
        plan(dp=2, micro_batch=2, global_batch=6)
    with pytest.raises(ValueError, match="unknown recompute 'ful'; did you mean 'full'"):
        plan(recompute="ful")


def test_train_plan_command(tmp_path: Path, capsys) -> None:
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    base = ["train-plan", "--hf-config", str(config), "--device", DEVICE, "--seq", "64"]
    assert main([*base, "--gpus", "4", "--tp", "2", "--global-batch", "4"]) == 0
    out = capsys.readouterr().out
    assert "tp2 pp1 dp2 mb1" in out and "step" in out
    assert main([*base, "--gpus", "2", "--global-batch", "4", "--search", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["plans"] and doc["gpus"] == 2
    assert main([*base, "--tp", "3"]) == 2
    assert "tp=3 does not divide" in capsys.readouterr().err


def test_search_captures_each_shape_once_and_prices_each_split_once(monkeypatch) -> None:
    # oracle: count the real captures and pricings (the module caches cleared first) against
    # the distinct shapes of the layouts the search tries, counted from the layouts themselves
    from torch_gemm_cost.trainplan import model as model_mod
    from torch_gemm_cost.trainplan import planner as planner_mod
    from torch_gemm_cost.trainplan.search import candidate_layouts

    captured: list[tuple[int, int]] = []
    priced: list[tuple[int, bool, int, int]] = []
    capture_step, price_segments = model_mod.capture_step, planner_mod.price_segments

    def counting_capture(model, micro_batch, seq):
        captured.append((micro_batch, seq))
        return capture_step(model, micro_batch, seq)

    def counting_price(step, tp, sp, cp, *args):
        priced.append((tp, sp, cp, step.micro_batch))
        return price_segments(step, tp, sp, cp, *args)

    monkeypatch.setattr(model_mod, "capture_step", counting_capture)
    monkeypatch.setattr(planner_mod, "price_segments", counting_price)
    model_mod._captured_config_step.cache_clear()
    model_mod._captured_config.cache_clear()
    kw = {"micro_batches": (1, 2), "recompute": ("none", "selective", "full")}
    found = tgc.search_training_plans(TINY, DEVICE, gpus=4, global_batch=8, seq=64, top=2,
                                      **kw)
    source = StepSource(TINY, "bfloat16", "sdpa")
    layouts = list(candidate_layouts(source.shape, 4, 8, 64, 8, kw["micro_batches"],
                                     kw["recompute"]))
    assert found.layouts == len(layouts) > 2 * len({(lay.micro_batch, 64 // lay.cp)
                                                    for lay in layouts})
    assert sorted(captured) == sorted({(lay.micro_batch, 64 // lay.cp) for lay in layouts})
    assert sorted(priced) == sorted({(lay.tp, lay.sequence_parallel, lay.cp, lay.micro_batch)
                                     for lay in layouts})
