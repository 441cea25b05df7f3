"""Serving under load (``simulate_serving``): vLLM V1's scheduler by hand at a constant step
time, the simulator at concurrency 1 against ``plan_llm`` (its oracle), a step at any token
count against its own capture, the workload's draws, the SLO search and the command line.

A tiny Llama geometry with a 32k vocabulary keeps the tests fast (a gather reads at most its
table, so a vocabulary smaller than the token budget would bend the steps' byte counts).
"""

from __future__ import annotations

import json
import random

import pytest

import torch_gemm_cost as tgc
from torch_gemm_cost.cli import main
from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.hardware.dtypes import DTYPES
from torch_gemm_cost.llm.affine import StepFamily
from torch_gemm_cost.llm.model import config_key, config_of
from torch_gemm_cost.llm.pricing import price_step
from torch_gemm_cost.llm.step import captured_step
from torch_gemm_cost.predict import default_predictor
from torch_gemm_cost.predict.ops import load_op_costs
from torch_gemm_cost.serving import Lengths, ServingEngine
from torch_gemm_cost.serving.dense import grouped_dense_ms
from torch_gemm_cost.serving.scheduler import EngineLimits, StepBatch, run_engine
from torch_gemm_cost.serving.slo import max_rate_under_slo, metric_ms
from torch_gemm_cost.serving.workload import Request, arrival_times_ms

pytest.importorskip("transformers")

TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "vocab_size": 32000, "max_position_embeddings": 4096, "tie_word_embeddings": False}
BUDGET = 2048


@pytest.fixture(scope="module")
def engine():
    return ServingEngine(TINY, "h100_sxm5_80gb", dtype="bf16", token_budget=BUDGET)


def ten_ms(batch: StepBatch) -> float:
    return 10.0


def serve(reqs, budget=100, seqs=256, blocks=1000, block_size=16, concurrency=None):
    done, trace = run_engine(reqs, EngineLimits(budget, seqs, blocks, block_size), ten_ms,
                             concurrency)
    return {o.request.id: o for o in done}, trace


# ------------------------------------------------------------------ the scheduler by hand
def test_two_requests_prefill_together_then_decode():
    # both arrive at 0, prompts of 4 and 3 generated tokens, 10 ms a step: step 1 prefills
    # both (8 tokens) and samples their first tokens at 10 ms (TTFT 10); steps 2 and 3
    # decode both, the last token at 30 ms: TPOT = (30 - 10) / (3 - 1) = 10
    out, trace = serve([Request(0, 0.0, 4, 3), Request(1, 0.0, 4, 3)])
    assert [(o.first_token_ms, o.finish_ms) for o in out.values()] == [(10, 30), (10, 30)]
    assert trace.step_tokens == [8, 2, 2]


def test_a_chunked_prompt_waits_a_step_for_its_first_token():
    # budget 6: step 1 runs request 0's prompt (4) and 2 of request 1's; step 2 decodes
    # request 0 and finishes request 1's prompt (2 tokens), its first token at 20 ms.
    # Request 0: tokens at 10, 20, 30; request 1: at 20, 30, 40 -> TPOT 10 each
    out, trace = serve([Request(0, 0.0, 4, 3), Request(1, 0.0, 4, 3)], budget=6)
    assert (out[0].first_token_ms, out[0].finish_ms) == (10, 30)
    assert (out[1].first_token_ms, out[1].finish_ms) == (20, 40)
    assert trace.step_tokens == [6, 3, 2, 1]


def test_max_num_seqs_holds_the_second_request_back():
    # one sequence at a time: request 1 starts in the step after request 0 finishes (30 ms),
    # its first token at 40, last at 60
    out, _ = serve([Request(0, 0.0, 4, 3), Request(1, 0.0, 4, 3)], seqs=1)
    assert (out[1].first_token_ms, out[1].finish_ms) == (40, 60)


def test_a_full_cache_preempts_the_newest_request_which_recomputes():
    # 3 blocks of 4 tokens; prompts of 4, 5 tokens generated. Step 1 (->10 ms): both
    # prompts, a block each, first tokens. Step 2: request 0's 5th token needs a 2nd block
    # (the last free one); request 1's needs one more: none left, so request 1 (the newest)
    # is preempted, its block freed, and no waiting request starts. Request 0 decodes alone
    # and finishes at 50 ms (tokens at 10..50), freeing its 2 blocks; request 1 then
    # recomputes its 5 tokens (prompt + the one generated, 2 blocks) in step 6 (->60 ms),
    # samples its 2nd token, and its 3rd..5th at 70, 80, 90. TPOT: (90 - 10) / 4 = 20
    out, trace = serve([Request(0, 0.0, 4, 5), Request(1, 0.0, 4, 5)], blocks=3, block_size=4)
    assert (out[0].first_token_ms, out[0].finish_ms, out[0].preemptions) == (10, 50, 0)
    assert (out[1].first_token_ms, out[1].finish_ms, out[1].preemptions) == (10, 90, 1)
    assert trace.preemptions == 1
    assert trace.step_tokens == [8, 1, 1, 1, 1, 5, 1, 1, 1]
    # blocks held after each step: request 0's 2 (request 1's freed by the preemption),
    # none once request 0 finishes, then request 1's 2
    assert trace.blocks_used == [2, 2, 2, 2, 0, 2, 2, 2, 0]


def test_closed_loop_sends_the_next_request_when_one_finishes():
    # one client: request 1 arrives when request 0 finishes (30 ms), not at its own time
    reqs = [Request(0, 0.0, 4, 3), Request(1, 999.0, 4, 3)]
    out, _ = serve(reqs, concurrency=1)
    assert (out[1].request.arrival_ms, out[1].first_token_ms, out[1].finish_ms) == (30, 40, 60)


# ------------------------------------------------------------------ oracle: plan_llm
def test_concurrency_one_with_fixed_lengths_equals_plan_llm(engine):
    sim = engine.run(concurrency=1, prompt=256, gen=32, num_requests=2)
    plan = tgc.plan_llm(TINY, device="h100_sxm5_80gb", dtype="bf16", prompt=256, gen=32,
                        batches=[1], token_budget=BUDGET).rows[0]
    for r in sim.requests:
        # one prefill step of 256 tokens (a CUDA-graph size, so not padded): the plan's TTFT
        assert r.ttft_ms == pytest.approx(plan.ttft_max_ms, rel=1e-9)  # one request: mean = max
        # decode attention read between contexts priced on a grid, where the plan integrates
        # five exact contexts by Simpson's rule
        assert r.tpot_ms == pytest.approx(plan.tpot_ms, rel=1e-3)
        assert r.e2e_ms == pytest.approx(plan.request_ms, rel=1e-3)
    # one request after the other: the run lasts two requests' latency
    assert sim.duration_ms == pytest.approx(2 * plan.request_ms, rel=1e-3)


def test_a_derived_step_is_its_own_capture_and_prices_alike():
    key = config_key(config_of(TINY))
    family = StepFamily(lambda t, s: captured_step(key, "bfloat16", t, s), 1000)
    assert family.derived and family.separable
    spec, pred, costs, bf = get_device("h100_sxm5_80gb"), default_predictor(), \
        load_op_costs(), DTYPES["bfloat16"]
    for tokens, sampled in [(2, 1), (7, 7), (100, 3), (999, 17)]:
        step = family.of(tokens, sampled)
        assert step == captured_step(key, "bfloat16", tokens, sampled)
        full = price_step(step, spec, pred, None, bf, costs).dense_ms
        assert grouped_dense_ms(step, spec, pred, None, bf, costs) == pytest.approx(full,
                                                                                  rel=1e-12)


# ------------------------------------------------------------------ workload
def test_lengths_parse_and_draw():
    rng = random.Random(0)
    assert Lengths.parse("512").draw(3, rng) == [512, 512, 512]
    u = Lengths.parse("uniform:10:20").draw(500, rng)
    assert min(u) >= 10 and max(u) <= 20 and len(set(u)) == 11
    logn = Lengths.parse("lognormal:500:250").draw(20000, rng)
    assert sum(logn) / len(logn) == pytest.approx(500, rel=0.03)
    with pytest.raises(ValueError, match="did you mean 'lognormal'"):
        Lengths.parse("lognormall:500:250")
    with pytest.raises(ValueError, match="uniform takes 2 number"):
        Lengths.parse("uniform:10")


def test_lengths_from_a_file(tmp_path):
    f = tmp_path / "lengths.txt"
    f.write_text("# prompts\n100\n200\n\n300\n")
    assert sorted(set(Lengths.parse(f"file:{f}").draw(200, random.Random(1)))) == [100, 200, 300]
    f.write_text("100\nabc\n")
    with pytest.raises(ValueError, match="line 2: 'abc'"):
        Lengths.parse(f"file:{f}")


def test_poisson_gaps_average_the_rate():
    t = arrival_times_ms(20001, 10.0, "poisson", random.Random(0))
    assert t[-1] / 20000 == pytest.approx(100.0, rel=0.03)  # 10 QPS: 100 ms a gap
    assert arrival_times_ms(3, 4.0, "constant", random.Random(0)) == [0.0, 250.0, 500.0]
    with pytest.raises(ValueError, match="did you mean 'poisson'"):
        arrival_times_ms(3, 4.0, "poison", random.Random(0))


# ------------------------------------------------------------------ load and the SLO search
def test_latency_grows_with_the_rate_and_the_slo_search_brackets_it(engine):
    work = {"prompt": "uniform:200:600", "gen": 64, "num_requests": 60, "seed": 3}
    light, heavy = engine.run(rate_qps=1, **work), engine.run(rate_qps=2000, **work)
    assert heavy.ttft.p99 > light.ttft.p99
    assert heavy.output_tokens_per_s > light.output_tokens_per_s
    assert len(light.requests) == 60 and light.to_dict()["requests"][0]["ttft_ms"] > 0
    limit = (light.ttft.p99 + heavy.ttft.p99) / 2
    found = max_rate_under_slo(engine, {"ttft_p99": limit}, lo_qps=1, hi_qps=2000, **work)
    assert found.sim is not None and metric_ms(found.sim, "ttft_p99") <= limit
    assert found.miss_rate_qps is not None
    miss = engine.run(rate_qps=found.miss_rate_qps, **work)
    assert metric_ms(miss, "ttft_p99") > limit


def test_bad_arguments_name_the_nearest_good_value(engine):
    with pytest.raises(ValueError, match="exactly one of rate_qps"):
        engine.run(prompt=10, gen=10, num_requests=2)
    with pytest.raises(ValueError, match="did you mean 'ttft_p99'"):
        max_rate_under_slo(engine, {"ttft_p999": 5.0}, prompt=10, gen=10, num_requests=2)
    with pytest.raises(ValueError, match="nearest good gen: 4000"):
        engine.run(rate_qps=1, prompt=96, gen=4096, num_requests=1)


def test_cli_serve_sim(tmp_path, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    out = tmp_path / "run.json"
    assert main(["serve-sim", "--hf-config", str(config), "--concurrency", "2", "--prompt",
                 "128", "--gen", "8", "--num-requests", "4", "--max-num-batched-tokens",
                 str(BUDGET), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "TTFT ms" in text and "concurrency 2" in text
    assert len(json.loads(out.read_text())["requests"]) == 4
    assert main(["serve-sim", "--hf-config", str(config)]) == 2
    assert "give --rate QPS or --concurrency N" in capsys.readouterr().err
    slo = ["serve-sim", "--hf-config", str(config), "--prompt", "128", "--gen", "8",
           "--num-requests", "10", "--max-num-batched-tokens", str(BUDGET),
           "--max-rate-under-slo", "--slo-ttft-p99-ms", "50"]
    assert main(slo) == 0
    assert "max rate under SLO (ttft_p99 <= 50 ms)" in capsys.readouterr().out
    assert main([*slo, "--rate", "3"]) == 2
    assert "leave out --rate and --concurrency" in capsys.readouterr().err


def test_two_replicas_serve_two_clients_as_two_engines_of_one(engine):
    # 2 clients dealt to 2 replicas: each engine serves one request at a time, as at
    # concurrency 1 on one engine; 4 requests, 2 a replica, so the run lasts 2 latencies
    one = engine.run(concurrency=1, prompt=256, gen=32, num_requests=1).requests[0]
    sim = engine.run(concurrency=2, prompt=256, gen=32, num_requests=4, replicas=2)
    assert sim.gpus == 2 and "over 2 replicas" in sim.workload
    for r in sim.requests:
        assert (r.ttft_ms, r.e2e_ms) == pytest.approx((one.ttft_ms, one.e2e_ms), rel=1e-12)
    assert sim.duration_ms == pytest.approx(2 * one.e2e_ms, rel=1e-12)
    # on one engine the two clients share each step: TTFT of a batch of two prompts
    shared = engine.run(concurrency=2, prompt=256, gen=32, num_requests=4)
    assert shared.ttft.p50 > one.ttft_ms
