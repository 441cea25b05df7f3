"""The host's share of serving latency (``serving.host``, ``serving.host_fit``) and the reader
of ``vllm bench serve --save-result`` files (``measured.vllm_bench``): the API server's queue by
hand at a constant step time, a profile read from a small JSON, a calibration that meets the
figures it was made from, and the benchmark's path through the same argument as the user's."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from torch_gemm_cost.cli import main
from torch_gemm_cost.measured.vllm_bench import read_vllm_bench
from torch_gemm_cost.serving import ServingEngine, simulate_serving
from torch_gemm_cost.serving.host import HostPath
from torch_gemm_cost.serving.host_fit import host_from_bench
from torch_gemm_cost.serving.scheduler import EngineLimits, StepBatch, run_engine
from torch_gemm_cost.serving.workload import Request

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "vocab_size": 32000, "max_position_embeddings": 4096, "tie_word_embeddings": False}
BUDGET = 2048


def ten_ms(batch: StepBatch) -> float:
    return 10.0


def served(reqs, host, concurrency=None, blocks=1000, block_size=16):
    done, trace = run_engine(reqs, EngineLimits(100, 256, blocks, block_size), ten_ms,
                             concurrency, None, host)
    return {o.request.id: (o.request.arrival_ms, o.first_token_ms, o.finish_ms)
            for o in done}, trace


# ------------------------------------------------------------------ the server by hand
def test_requests_and_tokens_queue_on_one_server():
    # request_ms 4, token_ms 1; requests of 4 prompt tokens and 2 generated, sent at 0 and 1.
    # Server: request 0 0-4 (the engine has it at 4), request 1 waits, 4-8.
    # Engine (10 ms steps): step 1 4-14 prefills request 0; step 2 14-24 decodes it and
    # prefills request 1 (it reached the engine at 8); step 3 24-34 decodes request 1.
    # Tokens on the server: r0's 1st 14-15; at 24 r0's 2nd 24-25 then r1's 1st 25-26;
    # r1's 2nd 34-35. Client 0: TTFT 15, last at 25; client 1: TTFT 26 - 1 = 25, last at 35
    out, trace = served([Request(0, 0.0, 4, 2), Request(1, 1.0, 4, 2)], HostPath(4.0, 1.0))
    assert out == {0: (0.0, 15.0, 25.0), 1: (1.0, 26.0, 35.0)}
    assert trace.step_end_ms == [14.0, 24.0, 34.0]


def test_a_closed_loop_client_sends_when_it_has_seen_its_last_token():
    # one client, request_ms 3, token_ms 2, step_ms 1 (a step 10 + 1 = 11 ms), prompts 4,
    # 2 generated. Request 0: server 0-3; steps 3-14, 14-25; its tokens 14-16 and 25-27.
    # The client sends request 1 at 27: server 27-30; steps 30-41, 41-52; tokens 41-43 and
    # 52-54: TTFT 43 - 27 = 16 as request 0's, TPOT 54 - 43 = 11, a step
    reqs = [Request(0, 0.0, 4, 2), Request(1, 999.0, 4, 2)]
    out, _ = served(reqs, HostPath(3.0, 2.0, 1.0), concurrency=1)
    assert out == {0: (0.0, 16.0, 27.0), 1: (27.0, 43.0, 54.0)}


def test_the_engines_host_time_lengthens_every_step():
    # step_ms 5, a free API server: two requests of 4 + 3 at 0 run 3 steps of 10 + 5 ms
    # together (prefill, two decodes): first tokens at 15, last at 45, TPOT 15
    out, trace = served([Request(0, 0.0, 4, 3), Request(1, 0.0, 4, 3)], HostPath(0.0, 0.0, 5.0))
    assert out == {0: (0.0, 15.0, 45.0), 1: (0.0, 15.0, 45.0)}
    assert trace.step_end_ms == [15.0, 30.0, 45.0]


def test_bad_host_costs_name_the_nearest_good():
    with pytest.raises(ValueError, match="token_ms must be a number of ms of at least 0"):
        HostPath(1.0, -0.5)


# ------------------------------------------------------------------ the reader
def bench_file(tmp_path, **change):
    # what `vllm bench serve --save-result` writes, the fields read and a few beside
    data = {"date": "20250101-000000", "backend": "vllm", "model_id": "tiny",
            "num_prompts": 8, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 1,
            "duration": 1.5, "completed": 8, "failed": 0, "total_input_tokens": 8 * 128,
            "total_output_tokens": 8 * 16, "output_throughput": 85.3, "mean_ttft_ms": 9.1,
            "median_ttft_ms": 9.0, "p99_ttft_ms": 11.0, "median_tpot_ms": 0.61,
            "median_itl_ms": 0.6, "median_e2el_ms": 18.2}
    for k, v in change.items():
        if v is None and k != "max_concurrency":
            data.pop(k)
        else:
            data[k] = v
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data))
    return path


def test_reader_takes_the_load_the_lengths_and_the_medians(tmp_path):
    b = read_vllm_bench(bench_file(tmp_path))
    assert (b.concurrency, b.rate_qps, b.completed) == (1, None, 8)
    assert (b.prompt_lens, b.output_lens) == ((128,), (16,))  # 1024 / 8, 128 / 8
    assert (b.ttft_p50_ms, b.itl_p50_ms, b.model) == (9.0, 0.6, "tiny")
    # --save-detailed: each request's lengths; a Poisson rate without a cap
    b = read_vllm_bench(bench_file(tmp_path, input_lens=[100, 120], output_lens=[8, 9],
                                   request_rate=4.0, max_concurrency=None))
    assert (b.prompt_lens, b.output_lens, b.rate_qps, b.concurrency) == (
        (100, 120), (8, 9), 4.0, None)


def test_reader_names_what_a_bad_file_lacks(tmp_path):
    with pytest.raises(ValueError, match="no 'median_itl_ms' field.*'median_ttft_ms'"):
        read_vllm_bench(bench_file(tmp_path, median_itl_ms=None))
    with pytest.raises(ValueError, match="sends every request at once"):
        read_vllm_bench(bench_file(tmp_path, max_concurrency=None))
    with pytest.raises(ValueError, match="burstiness 0.5"):
        read_vllm_bench(bench_file(tmp_path, request_rate=2.0, burstiness=0.5))
    two = tmp_path / "two.json"
    two.write_text(bench_file(tmp_path).read_text() + "\n" + bench_file(tmp_path).read_text())
    with pytest.raises(ValueError, match="2 results"):
        read_vllm_bench(two)
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_vllm_bench(tmp_path / "none.json")


# ------------------------------------------------------------------ calibration
@pytest.fixture(scope="module")
def engine():
    return ServingEngine(TINY, "h100_sxm5_80gb", dtype="bf16", token_budget=BUDGET)


def test_a_profile_at_concurrency_one_adds_its_ttft_gap(engine, tmp_path):
    # at concurrency 1 nothing queues: TTFT = request_ms + the GPU's TTFT (token_ms 0), so
    # request_ms = measured - simulated GPU TTFT, and step_ms = measured ITL - GPU TPOT
    bench = read_vllm_bench(bench_file(tmp_path, median_ttft_ms=9.0, median_itl_ms=0.6))
    gpu = engine.run(concurrency=1, prompt=128, gen=16, num_requests=8)
    host = host_from_bench(engine, bench)
    assert host.step_ms == pytest.approx(0.6 - gpu.tpot.p50, abs=1e-3)
    with_step = engine.with_host(HostPath(0.0, 0.0, host.step_ms)).run(
        concurrency=1, prompt=128, gen=16, num_requests=8)
    assert host.request_ms == pytest.approx(9.0 - with_step.ttft.p50, abs=0.02)
    sim = engine.with_host(host).run(concurrency=1, prompt=128, gen=16, num_requests=8)
    assert (sim.ttft.p50, sim.tpot.p50) == pytest.approx((9.0, 0.6), abs=0.02)
    assert engine.host is None and "host path unpriced" in gpu.host
    # a given token cost: the first token's streaming (0.5 ms) leaves the request's cost
    given = host_from_bench(engine, bench, token_ms=0.5)
    assert given.request_ms == pytest.approx(host.request_ms - 0.5, abs=0.02)
    with pytest.raises(ValueError, match="states its own token_ms"):
        ServingEngine(TINY, "h100_sxm5_80gb", dtype="bf16", token_budget=BUDGET,
                      host_profile=given, host_token_ms=0.5)


def test_a_load_the_gpu_alone_is_slower_than_gives_no_host_time(engine, tmp_path):
    bench = read_vllm_bench(bench_file(tmp_path, median_ttft_ms=0.001, median_itl_ms=0.001))
    assert (host_from_bench(engine, bench).request_ms, host_from_bench(engine, bench).step_ms
            ) == (0.0, 0.0)


def test_a_poisson_profile_meets_its_own_median_and_a_capped_rate_is_refused(engine, tmp_path):
    bench = read_vllm_bench(bench_file(tmp_path, request_rate=50.0, max_concurrency=None,
                                       median_ttft_ms=4.0, median_itl_ms=0.2))
    host = host_from_bench(engine, bench)
    sim = engine.with_host(host).run(rate_qps=50.0, prompt=128, gen=16, num_requests=8)
    assert sim.ttft.p50 == pytest.approx(4.0, abs=0.02)
    capped = read_vllm_bench(bench_file(tmp_path, request_rate=50.0, max_concurrency=4))
    with pytest.raises(ValueError, match="under a concurrency cap"):
        host_from_bench(engine, capped)


def test_the_slo_search_runs_with_the_host_path(engine):
    # 5 ms of the API server a request: no rate meets a TTFT p99 of 4 ms, which the GPU
    # alone meets at the lowest rate tried
    from torch_gemm_cost.serving.slo import max_rate_under_slo

    work = {"prompt": 128, "gen": 8, "num_requests": 10}
    assert max_rate_under_slo(engine, {"ttft_p99": 4.0}, **work).rate_qps > 0
    assert max_rate_under_slo(engine.with_host(HostPath(5.0)), {"ttft_p99": 4.0},
                              **work).rate_qps == 0


def load_benchmark():
    spec = importlib.util.spec_from_file_location("serve_sim_bench",
                                                  ROOT / "benchmarks" / "serve_sim.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_profile_takes_the_users_path(tmp_path, capsys):
    # the benchmark writes a minimal --save-result JSON of a published row; the command line
    # and the library read it through the same host_profile argument
    bench = load_benchmark()
    path = bench.write_profile(tmp_path / "row.json", concurrency=2, prompt=128, gen=16,
                               completed=8, ttft_p50_ms=9.0, itl_p50_ms=0.6)
    read = read_vllm_bench(path)
    assert (read.concurrency, read.prompt_lens, read.output_lens, read.ttft_p50_ms,
            read.itl_p50_ms) == (2, (128,), (16,), 9.0, 0.6)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    out = tmp_path / "run.json"
    assert main(["serve-sim", "--hf-config", str(config), "--concurrency", "4", "--prompt",
                 "128", "--gen", "16", "--num-requests", "8", "--max-num-batched-tokens",
                 str(BUDGET), "--host-profile", str(path), "--json", str(out),
                 "--assumptions"]) == 0
    text = capsys.readouterr().out
    assert "host path: " in text and "one first-come-first-served server" in text
    cli = json.loads(out.read_text())
    lib = simulate_serving(TINY, "h100_sxm5_80gb", dtype="bf16", token_budget=BUDGET,
                           concurrency=4, prompt=128, gen=16, num_requests=8,
                           host_profile=path)
    assert (cli["ttft"]["p50"], cli["tpot"]["p50"]) == (lib.ttft.p50, lib.tpot.p50)
    assert cli["host"] == lib.host
    assert main(["serve-sim", "--hf-config", str(config), "--concurrency", "4",
                 "--host-profile", str(tmp_path / "none.json")]) == 2
    assert "--host-profile" in capsys.readouterr().err
    assert main(["serve-sim", "--hf-config", str(config), "--concurrency", "4",
                 "--host-token-ms", "0.1"]) == 2
    assert "add --host-profile" in capsys.readouterr().err
