"""Memory: the activations the capture says autograd saves equal what
``torch.autograd.graph.saved_tensors_hooks`` packs on real CPU models; weights, gradients,
optimizer states, the peak and the largest batch by hand; the KV cache; the report's memory in
its dict, its text and the command line."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

import torch_gemm_cost as tgc
from torch_gemm_cost.capture.core import capture
from torch_gemm_cost.cli import main
from torch_gemm_cost.hardware.catalog import get_device, list_devices
from torch_gemm_cost.hardware.datasheet import catalog_record, datasheet_record
from torch_gemm_cost.records import sgd_ops
from torch_gemm_cost.records.memory import kv_cache_bytes
from torch_gemm_cost.records.saved import checkpointed_modules, graph_memory

ROOT = Path(__file__).resolve().parents[1]
GPT2 = str(ROOT / "examples" / "gpt2.json")
KEYS = {"weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "kv_cache_bytes",
        "peak_bytes", "device_bytes", "fits"}


def packed_bytes(model: nn.Module, args: tuple, kwargs: dict | None = None) -> int:
    """The oracle: unique storage bytes that autograd packs in a real forward pass, the model's
    parameters and buffers left out (they are its weights, not its activations)."""
    state = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in state:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(*args, **(kwargs or {}))
    return sum(seen.values())


def counted_bytes(model: nn.Module, args: tuple, kwargs: dict | None = None) -> int:
    """The capture's count, in the model's own dtype (fp32 here: 4 bytes an element)."""
    facts = graph_memory(capture(model, args, kwargs, train=True), checkpointed_modules(model))
    return sum(s.elems * s.dtype.itemsize for s in facts.saved if not s.region)


class ResBlock(nn.Module):
    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))


def tiny_llama(layers: int = 2, hidden: int = 64, checkpointing: dict | None = None) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden,
                                      num_hidden_layers=layers, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=256)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).train()
    if checkpointing is not None:  # transformers 5 renames gradient_checkpointing_enable
        enable = getattr(model, "activation_checkpointing_enable", None)
        if enable is not None:
            enable(activation_checkpointing_kwargs=checkpointing)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpointing)
    return model


def test_saved_activations_of_an_mlp_equal_what_autograd_packs():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.ReLU(),
                        nn.Linear(256, 10))
    x = torch.randn(32, 64)
    assert counted_bytes(mlp, (x,)) == pytest.approx(packed_bytes(mlp, (x,)), rel=0.05)


def test_saved_activations_of_a_resnet_block_equal_what_autograd_packs():
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), ResBlock(), ResBlock()).train()
    x = torch.randn(4, 3, 32, 32)
    assert counted_bytes(model, (x,)) == pytest.approx(packed_bytes(model, (x,)), rel=0.05)


def test_saved_activations_of_a_small_llama_equal_what_autograd_packs():
    # GQA (4 query heads over 2 K/V heads) and SDPA: the capture's repeat_kv copies and causal
    # mask are counted as a GPU's FlashAttention kernel saves them, K and V unexpanded
    model = tiny_llama()
    ids = torch.randint(0, 256, (2, 32))
    kwargs = {"use_cache": False}
    assert counted_bytes(model, (ids,), kwargs) == pytest.approx(
        packed_bytes(model, (ids,), kwargs), rel=0.05)


def test_checkpointed_llama_holds_its_layers_inputs_only():
    ids = torch.randint(0, 256, (2, 64))
    kwargs = {"use_cache": False}
    reentrant = tiny_llama(4, 128, {"use_reentrant": True})
    oracle = packed_bytes(reentrant, (ids,), kwargs)
    counted = counted_bytes(reentrant, (ids,), kwargs)
    # the oracle misses the rotary cos and sin (1·64 tokens·32 head dims, fp32 each) that the
    # layers take as keywords: the checkpoint's closure holds them, save_for_backward does not
    assert counted == oracle + 2 * 64 * 32 * 4
    assert counted == pytest.approx(oracle, rel=0.05)
    # the non-reentrant checkpoint (transformers' default) holds the same
    assert counted_bytes(tiny_llama(4, 128, {"use_reentrant": False}), (ids,), kwargs) == counted
    plain = tiny_llama(4, 128)
    assert counted < counted_bytes(plain, (ids,), kwargs) / 4
    assert checkpointed_modules(reentrant) == {f"model.layers.{i}" for i in range(4)}
    assert checkpointed_modules(plain) == frozenset()


def test_linear_in_bf16_with_adamw_mixed_precision_by_hand():
    with torch.device("meta"):
        lin = nn.Linear(1024, 1024)
    x = torch.ones(64, 1024, device="meta")
    small = replace(get_device("h100_sxm5_80gb"), mem_bytes=21_000_000.0)
    mem = tgc.estimate(lin, (x,), device=small, dtype="bf16", mode="train",
                       optimizer="adamw").memory
    assert mem is not None
    params = 1024 * 1024 + 1024  # 1,049,600
    assert mem.weights_bytes == 2 * params  # bf16 weights: 2,099,200
    assert mem.grads_bytes == 2 * params  # bf16 gradients: 2,099,200
    # AdamW's exp_avg and exp_avg_sq in fp32 (8 B) and the fp32 master weights (4 B):
    # 8,396,800 + 4,198,400 = 12,595,200
    assert mem.master_weights_bytes == 4 * params
    assert mem.optimizer_bytes == 12 * params
    assert mem.activations_bytes == 64 * 1024 * 2  # the input, saved for dW in bf16: 131,072
    # the step holds weights, gradients, states, master and foreach sqrt(exp_avg_sq) (4 B):
    # 2,099,200 + 2,099,200 + 12,595,200 + 4,198,400 = 20,992,000; the backward pass peaks
    # lower, at 2,099,200 + 12,595,200 + 2,099,200 + 131,072 = 16,924,672
    assert mem.peak_bytes == 20_992_000
    assert mem.fits and mem.device_bytes == 21_000_000
    # batch b fits while 16,793,600 + 2,048·b <= 21,000,000: b <= 2053.9
    assert mem.max_batch == 2053 and mem.batch == 64


def test_sgd_and_no_optimizer_by_hand():
    with torch.device("meta"):
        lin = nn.Linear(1024, 1024)
    x = torch.ones(64, 1024, device="meta")
    params = 1024 * 1024 + 1024
    sgd = tgc.estimate(lin, (x,), device="h100_sxm5_80gb", dtype="bf16", mode="train",
                       optimizer="sgd").memory
    assert sgd is not None and sgd.optimizer_bytes == (4 + 4) * params  # momentum + master
    fp32 = tgc.estimate(lin, (x,), device="h100_sxm5_80gb", dtype="float32", mode="train",
                        optimizer=torch.optim.SGD(lin.parameters(), lr=0.1)).memory
    assert fp32 is not None and fp32.optimizer_bytes == 0  # no momentum, no master in fp32
    assert fp32.weights_bytes == fp32.grads_bytes == 4 * params
    none = tgc.estimate(lin, (x,), device="h100_sxm5_80gb", dtype="bf16", mode="train",
                        optimizer="none").memory
    assert none is not None and none.optimizer_bytes == 0 and none.grads_bytes == 2 * params
    # SGD's step: b *= momentum (2 passes), b += g (3), p -= lr·b (3), 4 B each, fp32
    assert sum(o.dram_bytes for o in sgd_ops(params, 2, "float32")) == 8 * 4 * params
    with pytest.raises(ValueError, match="unknown optimizer 'adamm'; did you mean 'adam', 'adamw'"):
        tgc.estimate(lin, (x,), device="h100_sxm5_80gb", mode="train", optimizer="adamm")


def test_inference_holds_the_live_peak_by_hand():
    with torch.device("meta"):
        mlp = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    x = torch.ones(32, 64, device="meta")
    small = replace(get_device("tesla_t4"), mem_bytes=10_000_000.0)
    mem = tgc.estimate(mlp, (x,), device=small, dtype="float32").memory
    assert mem is not None and mem.mode == "inference"
    # fp32: at the ReLU the first layer's output and the ReLU's are live, 2·32·256·4 = 65,536
    # (the input, 8,192, died at the first layer; the output, 1,280, comes after)
    assert mem.activations_bytes == 65_536
    weights = (64 * 256 + 256 + 256 * 10 + 10) * 4
    assert mem.weights_bytes == weights and mem.grads_bytes == mem.optimizer_bytes == 0
    assert mem.peak_bytes == weights + 65_536 and mem.kv_cache_bytes == 0
    # 2,048 B a sample: (10,000,000 - 76,840) / 2,048 = 4845.3
    assert mem.max_batch == 4845


def test_kv_cache_of_a_generating_llama():
    with torch.device("meta"):
        model = tiny_llama()
    ids = torch.ones(3, 40, dtype=torch.long, device="meta")
    mem = tgc.estimate(model, (ids,), device="l4", dtype="bf16").memory
    # 2 (K, V) · 2 layers · 2 K/V heads · 16 head dims · 40 tokens · 3 sequences · 2 B
    assert mem is not None and mem.kv_cache_bytes == 2 * 2 * 2 * 16 * 40 * 3 * 2 == 30_720
    assert mem.kv_cache_bytes == kv_cache_bytes([0, 0], 2, 16, 40, 3, 2)
    off = tgc.estimate(model, (ids,), {"use_cache": False}, device="l4", dtype="bf16").memory
    assert off is not None and off.kv_cache_bytes == 0
    assert mem.peak_bytes == mem.weights_bytes + mem.activations_bytes + 30_720


def test_a_70b_training_step_does_not_fit_one_h100(caplog):
    transformers = pytest.importorskip("transformers")
    # 8 of Llama-2-70B's 80 layers, its embedding and lm_head: 8.95e9 parameters
    config = transformers.LlamaConfig(hidden_size=8192, intermediate_size=28672,
                                      num_hidden_layers=8, num_attention_heads=64,
                                      num_key_value_heads=8, vocab_size=128256)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    ids = torch.ones(1, 512, dtype=torch.long, device="meta")
    with caplog.at_level(logging.WARNING, logger="torch_gemm_cost.api"):
        report = tgc.estimate(model, (ids,), {"use_cache": False}, device="h100_sxm5_80gb",
                              dtype="bf16", mode="train", optimizer="adamw")
    mem = report.to_dict()["memory"]
    assert KEYS <= set(mem) and mem["device_bytes"] == 80 * 2**30
    # 16 B a parameter (bf16 weights and gradients, fp32 master and Adam's two states):
    # 143 GB before a single activation, against the H100's 85.9 GB
    params = sum(p.numel() for p in model.parameters())
    assert mem["weights_bytes"] + mem["grads_bytes"] + mem["optimizer_bytes"] == 16 * params
    assert mem["peak_bytes"] > 16 * params > mem["device_bytes"]
    assert mem["fits"] is False and mem["max_batch"] == 0
    assert "DOES NOT FIT; not even a batch of 1 fits" in str(report)
    assert [r.getMessage() for r in caplog.records if "does not fit" in r.getMessage()] == [
        (f"LlamaForCausalLM does not fit h100_sxm5_80gb in bfloat16: its train peak is "
         f"{mem['peak_bytes'] / 2**30:.1f} GiB of the device's 80.0 GiB; not even a batch of 1 "
         "fits (batch 1 now)")]


def test_catalog_memory_is_in_the_unit_the_vendor_means():
    # an "80 GB" H100 is 80 GiB of HBM3: 85,899,345,920 bytes (torch.cuda reports 79.2 GiB of
    # it, the rest held by the driver), as AMD's "192 GB" MI300X is 192 GiB
    assert get_device("h100_sxm5_80gb").mem_bytes == 80 * 2**30 == 85_899_345_920
    assert get_device("mi300x").mem_bytes == 192 * 2**30
    assert get_device("h200_sxm_141gb").mem_bytes == 141 * 2**30
    for dev in list_devices():
        assert dev.mem_bytes is not None and dev.mem_bytes % 2**30 == 0, dev.id
        named = re.search(r"_(\d+)gb$", dev.id)
        if named:
            assert dev.mem_bytes == int(named.group(1)) * 2**30, dev.id
    # a spec file's mem_gb reads the same way, and a catalog GPU's record gives its GB back
    record = datasheet_record(get_device("l40s"))
    assert record["mem_gb"] == 48
    record.update(id="my_l40s", name="My L40S", aliases=[], mem_gb=96)
    assert catalog_record(record)[0]["mem_bytes"] == 96 * 2**30


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as e:
        rc = int(e.code)
    out, err = capsys.readouterr()
    return rc, out, err


def test_command_line_optimizer_and_memory(capsys, tmp_path):
    cfg = json.loads(Path(GPT2).read_text())
    cfg["n_layer"] = 2
    path = tmp_path / "gpt2_tiny.json"
    path.write_text(json.dumps(cfg))
    small = ["--hf-config", str(path), "--batch", "1", "--seq", "128", "--predictor", "roofline"]
    rc, out, _ = run(capsys, "estimate", *small, "--mode", "train", "--optimizer", "sgd", "-q",
                     "--json")
    assert rc == 0
    mem = json.loads(out)["memory"]
    assert KEYS <= set(mem) and mem["optimizer"] == "sgd" and mem["fits"] is True
    rc, out, _ = run(capsys, "estimate", *small, "--mode", "train", "-q")
    assert rc == 0 and "memory (train, mixed precision)" in out and "adamw states" in out
    rc, _, err = run(capsys, "estimate", *small, "--optimizer", "adamw")
    assert rc == 2 and "--optimizer adamw applies to --mode train only" in err
