"""The cluster's network as a user states it (``predict.comm_host``): the host class and the NICs
of a node, worked by hand on an all-reduce across nodes, carried from the command lines into the
training and serving plans, and refused with the nearest good value when wrong. A 4-layer GPT-2
of width 64 keeps every capture under a second."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

import torch_gemm_cost as tgc
from torch_gemm_cost.cli import main
from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.predict.collectives import _shipped, predict_collective_ms
from torch_gemm_cost.predict.comm_host import host_collective_ms, with_nics
from torch_gemm_cost.trainplan.comm import Collectives

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
A100 = "a100_sxm4_80gb"
TINY = {"model_type": "gpt2", "n_layer": 4, "n_embd": 64, "n_head": 4, "vocab_size": 512,
        "n_positions": 128, "bos_token_id": 0, "eos_token_id": 0}
LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
         "vocab_size": 1024, "max_position_embeddings": 4096, "tie_word_embeddings": False}
# 32 GPUs at tp 2: dp 16 over 4 nodes, the gradient all-reduce across the network
LAYOUT = {"gpus": 32, "tp": 2, "seq": 64}


def _ring_ms(bus_bytes_per_s: float) -> float:
    """NCCL's ring, Simple protocol, of a 1 GiB all-reduce over 16 A100s, 8 a node, at the
    reference class (NCCL's constants: latency scale 1, network hop 4x the NVLink hop)."""
    s, n, nodes = 2.0**30, 16, 2
    local = float(_shipped()._physical()["local_chunks"][0])  # fitted, not a host constant
    wire = 2 * (n - 1) / n * s + local * s / n  # bytes a GPU: 2·15/16 S + 0.3336 S/16
    hops, net_hops = 2 * (n - 1), 2 * (nodes - 1)  # 30 ring hops, 2 of them on the network
    # Simple: base 8.4 µs, 3.4 µs a hop: 8.4 + 28·3.4 + 2·4·3.4 = 8.4 + 95.2 + 27.2 = 130.8 µs
    latency_us = 8.4 + (hops - net_hops) * 3.4 + net_hops * 4.0 * 3.4
    return latency_us * 1e-3 + 1e3 * wire / bus_bytes_per_s


def test_an_all_reduce_across_nodes_at_the_reference_class_by_hand() -> None:
    # bus bandwidth: min(NVLink 300 GB/s · 0.8 = 240, network 25 GB/s a GPU · 8 GPUs · 0.8 =
    # 160) = 160 GB/s; 1.8959 · 2^30 B / 160 GB/s = 12.723 ms, + 0.131 ms = 12.854 ms. The
    # double binary tree: 2 · 2^30 / (160 GB/s · 0.9) = 14.913 ms + (8.4 + 2·7·3.4 + 2·1·4·3.4)
    # µs = 14.996 ms, slower, so NCCL (and the model) runs the ring.
    spec = get_device(A100)
    call = {"size_bytes": 2.0**30, "num_gpus": 16, "gpus_per_node": 8}
    ref = host_collective_ms(spec, "all_reduce", host="reference", **call)
    assert ref == pytest.approx(_ring_ms(160e9), rel=1e-6)
    assert ref == pytest.approx(12.854, abs=1e-3)
    assert Collectives(spec, None, "reference").ms("all_reduce", 2.0**30, 16, 8) == ref
    # the fitted class: the shipped fit, slower across nodes (a fifth of the network's rate)
    fitted = host_collective_ms(spec, "all_reduce", host="fitted", **call)
    assert fitted == predict_collective_ms(spec, "all_reduce", **call) > 2 * ref
    # 4 NICs of 100 Gb/s a node of 8: 4 · 100e9 / 8 / 8 = 6.25 GB/s a GPU; the network's
    # bus bandwidth 6.25 · 8 · 0.8 = 40 GB/s: 1.8959 · 2^30 / 40e9 = 50.891 ms + 0.131 ms
    slow = with_nics(spec, nics_per_node=4, nic_gbps=100)
    assert slow.network_bw_bytes_per_s == pytest.approx(6.25e9)
    assert host_collective_ms(slow, "all_reduce", host="reference", **call) == pytest.approx(
        _ring_ms(40e9), rel=1e-6)
    # one NIC a GPU by default: 8 · 200 Gb/s / 8 GPUs = the record's 25 GB/s a GPU
    assert with_nics(spec, nic_gbps=200).network_bw_bytes_per_s == pytest.approx(
        spec.network_bw_bytes_per_s)


def test_the_stated_class_reaches_the_plan_from_the_command_line(tmp_path: Path,
                                                                  capsys) -> None:
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    base = ["train-plan", "--hf-config", str(config), "--device", A100, "--seq", "64",
            "--gpus", "32", "--tp", "2", "--json", "-"]
    assert main([*base, "--comm-host", "reference"]) == 0
    cli = json.loads(capsys.readouterr().out)
    api = tgc.plan_training(TINY, A100, comm_host="reference", **LAYOUT)
    fitted = tgc.plan_training(TINY, A100, **LAYOUT)
    assert cli["comm_host"] == api.comm_host == "reference" and fitted.comm_host == "fitted"
    assert cli["step_ms"] == pytest.approx(api.step_ms, rel=1e-12)
    assert api.comm_ms["data"] < fitted.comm_ms["data"] / 2  # the network's share is faster
    # the class and its source beside the result; the interval is the hosts' either way
    said = next(a for a in api.assumptions if a.startswith("Collectives:"))
    assert "host class 'reference': NCCL's own tuning constants" in said
    assert "stated by the user, not measured" in said
    assert "host class 'fitted' (the default)" in next(
        a for a in fitted.assumptions if a.startswith("Collectives:"))
    assert api.step_interval_ms == pytest.approx(fitted.step_interval_ms)
    assert api.step_interval_ms[0] <= api.step_ms <= api.step_interval_ms[1]
    # the NICs too, and the search path
    assert main([*base, "--nic-gbps", "100", "--nics-per-node", "2"]) == 0
    slow = json.loads(capsys.readouterr().out)
    assert "2x 100 Gb/s per 8 GPUs (stated by the user)" in slow["comm_source"]
    assert slow["comm_ms"]["data"] > fitted.comm_ms["data"]
    assert main([*base, "--search", "--global-batch", "16", "--micro-batches", "1",
                 "--top", "1", "--comm-host", "reference"]) == 0
    assert json.loads(capsys.readouterr().out)["plans"][0]["comm_host"] == "reference"


def test_a_gpu_without_a_usual_network_plans_across_nodes_once_its_nics_are_stated() -> None:
    spec = get_device("l40s")
    assert spec.network_bw_bytes_per_s is None
    gpus = 2 * spec.node_gpus
    with pytest.raises(ValueError, match="no usual inter-node network"):
        tgc.plan_training(TINY, "l40s", gpus=gpus, seq=64)
    p = tgc.plan_training(TINY, "l40s", gpus=gpus, seq=64, nic_gbps=100)
    assert p.comm_ms["data"] > 0 and "stated by the user" in p.comm_source


def test_bad_network_facts_name_the_nearest_good_value(tmp_path: Path, capsys) -> None:
    with pytest.raises(ValueError, match="unknown comm_host 'refrence'; did you mean "
                                         "'reference'"):
        tgc.plan_training(TINY, A100, comm_host="refrence", **LAYOUT)
    with pytest.raises(ValueError, match="nic_gbps must be a positive number of Gb/s a NIC, "
                                         "got -180; nearest good: 100"):
        tgc.plan_training(TINY, A100, nic_gbps=-180, **LAYOUT)
    with pytest.raises(ValueError, match="nics_per_node must be a positive integer, got 0; "
                                         "nearest good: 1"):
        tgc.plan_training(TINY, A100, nics_per_node=0, nic_gbps=200, **LAYOUT)
    with pytest.raises(ValueError, match="nics_per_node=4 needs nic_gbps"):
        tgc.search_training_plans(TINY, A100, gpus=32, global_batch=32, seq=64,
                                  nics_per_node=4)
    with pytest.raises(ValueError, match="did you mean 'fitted'"):
        tgc.plan_llm(LLAMA, device="h100_sxm5_80gb", prompt=64, gen=4, batches=[1], tp=2,
                     comm_host="fited")
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    assert main(["train-plan", "--hf-config", str(config), "--device", A100, "--seq", "64",
                 "--comm-host", "dgx"]) == 2
    assert "unknown comm_host 'dgx'" in capsys.readouterr().err


def test_serving_plans_take_the_stated_class(tmp_path: Path, capsys) -> None:
    # a decode step of batch 1 at tp 2: (2 all-reduces a layer · 2 layers + 1) of 1 token ·
    # 256 hidden · 2 bytes = 512 B, and the all-gather of 1 · 1024 (padded) vocab · 2 B
    h100 = "h100_sxm5_80gb"
    kw = {"device": h100, "dtype": "bf16", "prompt": 512, "gen": 64, "batches": [1], "tp": 2}
    p = tgc.plan_llm(LLAMA, comm_host="reference", **kw)
    reduce = host_collective_ms(h100, "all_reduce", host="reference", size_bytes=512.0,
                                num_gpus=2)
    gather = host_collective_ms(h100, "all_gather", host="reference", size_bytes=2048.0,
                                num_gpus=2)
    assert p.rows[0].decode_comm_ms == pytest.approx(5 * reduce + gather)
    assert reduce != predict_collective_ms(h100, "all_reduce", size_bytes=512.0, num_gpus=2)
    assert "host class 'reference'" in next(a for a in p.assumptions
                                            if a.startswith("Collectives:"))
    config = tmp_path / "llama.json"
    config.write_text(json.dumps(LLAMA))
    args = ["--hf-config", str(config), "--tp", "2", "--prompt", "512", "--gen", "64",
            "--comm-host", "reference"]
    assert main(["llm", *args, "--batch", "1", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"][0]["decode_comm_ms"] == pytest.approx(p.rows[0].decode_comm_ms)
    sim = tgc.simulate_serving(LLAMA, h100, concurrency=1, prompt=64, gen=4, num_requests=1,
                               tp=2, token_budget=1024, comm_host="reference")
    assert any("host class 'reference'" in a for a in sim.assumptions)


def _benchmark():
    spec = importlib.util.spec_from_file_location("train_plan_bench",
                                                  ROOT / "benchmarks" / "train_plan.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_plan_bench"] = module
    spec.loader.exec_module(module)
    return module


def test_the_megatron_benchmark_prices_the_plan_a_user_runs(tmp_path: Path, capsys) -> None:
    # the benchmark's headline column is the command line's plan with the class the paper
    # states (a tiny GPT at Table 1's 7.5B layout: tp 4 within a node, dp across nodes)
    bench = _benchmark()
    assert bench.MEGATRON_COMM_HOST == "reference"
    kw = bench.megatron_kwargs(4, 1, 32, 8) | {"seq": 64}
    config = bench.megatron_config(64, 4, 2) | {"n_positions": 64}
    ours = bench.megatron_plan(config, kw)
    path = tmp_path / "gpt.json"
    path.write_text(json.dumps(config))
    argv = bench.megatron_command(64, 4, 2, kw).split()[1:]
    argv[argv.index("--hf-config") + 1] = str(path)
    assert main([*argv, "--json", "-"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["comm_host"] == "reference"
    assert cli["step_ms"] == pytest.approx(ours.step_ms, rel=1e-12)
    assert bench.megatron_plan(config, kw, comm_host="fitted").step_ms > ours.step_ms
