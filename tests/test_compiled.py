"""Models as they run today: ``torch.compile``'s fused kernels (hand-worked bytes, and the
kernel count of what inductor really generates on the CPU), SDPA as one flash attention kernel
on a GPU (hand-worked bytes, causal and not), and compiled against eager totals."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_gemm_cost as tgc
from torch_gemm_cost.capture.core import capture
from torch_gemm_cost.compiled.fusion import REMOVED, fuse_kernels
from torch_gemm_cost.predict.attention import (
    AttentionBatch,
    AttentionPredictor,
    attention_bytes,
    attention_geometry,
    kernel_tiles,
    pack_gqa,
)
from torch_gemm_cost.predict.attention.sdpa import sdpa_calls, sdpa_times_ms
from torch_gemm_cost.predict.ops import OP_CLASSES, OpBatch, OpCostModel
from torch_gemm_cost.records import extract

V100 = tgc.get_device("tesla_v100_pcie_32gb")  # 900 GB/s DRAM
A100 = tgc.get_device("a100_sxm4_80gb")

# round constants: every class at η 0.9 but norms at 0.5, a fused LayerNorm at η 0.5 with an
# SM side too fast to matter, 5 µs a launch
TABLE = OpCostModel.from_dict({
    "classes": {c: {"eta": 0.9, "floor_ms": 0.03} for c in OP_CLASSES
                if c not in ("view", "other")} | {"norm": {"eta": 0.5, "floor_ms": 0.045}},
    "launch_ms": 0.005,
    "fused_ops": {"roof_p": 4.0, "eta": 0.5, "ops": {
        "layer_norm": {"sm_bytes_per_cycle": 1e12, "floor_ms": 0.004}}},
})


class LayerNormGeluAdd(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.ln(x)) + r


def _fused(model: nn.Module, args: tuple, dtype: str = "float32", mode: str = "inference"):
    captured = capture(model, args, train=mode == "train")
    _, others = extract(captured, dtype, mode=mode)
    return fuse_kernels(captured, others, dtype, mode=mode)


def test_layer_norm_gelu_add_is_one_kernel_of_its_outside_bytes():
    with torch.device("meta"):
        model = LayerNormGeluAdd(1024)
    x = torch.ones(4096, 1024, device="meta")
    ops, kernels = _fused(model, (x, x.clone()))
    (k,) = [k for k in kernels if k.launches]
    assert sorted(ops[i].op for i in k.ops) == ["aten.add", "aten.gelu", "aten.native_layer_norm"]
    assert k.op_class == "layer_norm" and k.launches == 1
    # reads x and r, 2 · 4096·1024·4 = 33,554,432 B, and the weight and bias, 2·1024·4 = 8,192 B;
    # writes the sum, 16,777,216 B: 50,339,840 B. The normalized and GELU'd tensors, and the
    # mean and rstd nothing reads, stay on chip
    assert k.dram_bytes == 50_339_840
    # 50,339,840 / (0.5 · 900e9) = 0.111866 ms + one launch of 0.005 ms, shared by its ops
    # (by the bytes each moves alone), each naming the kernel
    pred = TABLE.predict(OpBatch(tuple(ops), tuple(kernels)), V100)
    times = pred.times_or_none()
    assert sum(times[i] or 0.0 for i in k.ops) == pytest.approx(0.116866, rel=1e-5)
    assert {pred.kernel[i] for i in k.ops} == {k.name}
    # eager: three kernels, 33,595,392 (the norm, with its mean and rstd) + 33,554,432 (GELU)
    # + 50,331,648 (add) = 117,481,472 B: 0.074656 + 0.041425 + 0.062138 ms, and 3 launches
    # of 0.005 ms: 0.193219 ms
    eager = TABLE.predict(OpBatch(tuple(ops)), V100).times_or_none()
    assert sum(o.dram_bytes for o in ops) == 117_481_472
    assert sum(t for t in eager if t) == pytest.approx(0.193219, rel=1e-5)


def test_unused_statistics_are_removed_and_views_are_free():
    with torch.device("meta"):
        model = nn.Sequential(nn.LayerNorm(64), nn.Flatten(0))
    ops, kernels = _fused(model, (torch.ones(8, 64, device="meta"),))
    # the norm is one kernel: 8·64·4 in, 64·4·2 for weight and bias, 8·64·4 out = 4,608 B
    (k,) = [k for k in kernels if k.launches]
    assert k.dram_bytes == 4_608 and [ops[i].op for i in k.ops] == ["aten.native_layer_norm"]
    assert all(k.name != REMOVED or k.dram_bytes == 0 for k in kernels)


class _RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


class _Block(nn.Module):
    """Pre-norm attention (eager: scores materialised, scaled, masked, softmaxed) and a SiLU·mul
    MLP under an RMSNorm."""

    def __init__(self, d: int = 32, heads: int = 2, ff: int = 64) -> None:
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.norm = _RMSNorm(d)
        self.gate, self.up = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
        self.down = nn.Linear(ff, d, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5 + mask
        att = torch.softmax(scores, dim=-1) @ v
        x = x + self.o(att.transpose(1, 2).reshape(b, s, d))
        y = self.norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class _Tiny(nn.Module):
    def __init__(self, vocab: int = 64, d: int = 32, seq: int = 16) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.block = _Block(d)
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        s = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(s, device=ids.device))
        x = self.block(x, self.mask[:s, :s])
        return self.head(F.gelu(self.ln_f(x), approximate="tanh"))


# the ops that tell inductor's kernels apart, as its kernel names spell them. NB: inductor
# names a kernel after every ATen op its nodes came from, so the softmax kernel that also
# writes the batched GEMM's contiguous operand is named "clone" too: copies are matched apart
_MARKS = ("embedding", "native_layer_norm", "_softmax", "rsqrt", "silu", "gelu")


def _marks(names: str) -> tuple[str, ...]:
    return tuple(m for m in _MARKS if re.search(rf"(^|_){m}(_|$)", names))


def test_kernels_match_what_torch_compile_generates_on_the_cpu():
    """inductor's own output code on the CPU: one ``cpp_fused_*`` call per kernel, one
    ``extern_kernels.*`` call per GEMM. The fusion decisions are the scheduler's, so the GPU
    kernels the model predicts line up with them one for one (compiled.fusion: where the CPU
    backend decides otherwise, and why the counts agree for these chains)."""
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    model = _Tiny().eval()
    ids = torch.ones(2, 16, dtype=torch.long)
    torch._dynamo.reset()
    with torch.no_grad():
        _, (code, *_) = run_and_get_code(torch.compile(model), ids)
    calls = re.findall(r"^\s+(cpp_fused_\w+|extern_kernels\.\w+)\(", code, re.MULTILINE)
    cpu_kernels = [c.removeprefix("cpp_fused_") for c in calls if c.startswith("cpp_fused_")]
    cpu_externs = [c for c in calls if c.startswith("extern_kernels.")]

    with torch.device("meta"):
        meta = _Tiny().eval()
    captured = capture(meta, (torch.ones(2, 16, dtype=torch.long, device="meta"),))
    sites, others = extract(captured, "float32")
    _, kernels = fuse_kernels(captured, others, "float32")
    ours = [k for k in kernels if k.launches]
    # 7 kernels: embeddings + LayerNorm, the q/k/v copies for the batched GEMM, the scaled and
    # masked softmax, the head merge copy, residual add + RMSNorm, SiLU·mul, add + LayerNorm + GELU
    assert len(ours) == len(cpu_kernels) == 7
    assert len(sites) == len(cpu_externs) == 8
    assert [_marks(k.name.split("fused_", 1)[1]) for k in ours] == [
        _marks(name) for name in cpu_kernels]
    assert all("clone" in name for k, name in zip(ours, cpu_kernels) if k.op_class == "copy")


class _Heads(nn.Module):
    """Attention on heads split from a (batch, seq, heads·d) tensor: permuted views."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.view(2, 16, 2, 8).transpose(1, 2) for t in (q, k, v))
        return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v


def test_matmul_copies_operands_whose_heads_do_not_fold_eager_and_compiled():
    x = torch.ones(2, 16, 16, device="meta")
    captured = capture(_Heads(), (x, x.clone(), x.clone()))
    _, others = extract(captured, "float32")
    # aten.matmul reshapes each (2, 2, 16, 8) head view to one batch dim of 4: the (batch,
    # head) strides (256, 8) do not fold, so q, kᵀ and v are copied; the probabilities are
    # contiguous. A copy reads and writes 2·2·16·8 = 512 fp32 elements: 4,096 B
    copies = [o for o in others if o.op_class == "copy"]
    assert [o.op for o in copies] == ["aten.clone"] * 3
    assert [o.dram_bytes for o in copies] == [4_096] * 3
    assert all(".operand_copy." in o.node for o in copies)
    # compiled, each is a pointwise copy kernel of its own, the same records
    ops, kernels = fuse_kernels(captured, others, "float32")
    copy_kernels = [k for k in kernels if k.launches and k.op_class == "copy"]
    assert len(copy_kernels) == 3
    assert sorted(ops[i].node for k in copy_kernels for i in k.ops) == sorted(
        o.node for o in copies)


def test_compiled_and_eager_totals_of_a_tiny_model():
    with torch.device("meta"):
        model = _Tiny().eval()
    ids = torch.ones(8, 16, dtype=torch.long, device="meta")
    eager = tgc.estimate(model, (ids,), device=A100)
    compiled = tgc.estimate(model, (ids,), device=A100, compiled=True)
    assert compiled.compiled and not eager.compiled
    # the GEMMs are the same library calls; the ops between them become 7 kernels
    assert [g.time_ms for g in compiled.gemms] == [g.time_ms for g in eager.gemms]
    kernels = compiled.kernels()
    assert len(kernels) == 7 and compiled.other_ms < eager.other_ms
    # every op of a kernel names it; the kernels' times are their ops' times
    assert sum(k["time_ms"] for k in kernels) == pytest.approx(
        sum(o.time_ms or 0.0 for o in compiled.others if o.kernel))
    for report in (eager, compiled):
        for depth in (None, 1, 2):
            rows = report.module_rows(depth)
            assert sum(r["time_ms"] for r in rows) == pytest.approx(report.gpu_ms)
    assert "7 fused kernels" in compiled.footer()
    assert compiled.to_dict()["kernels"] == kernels
    assert "triton_red_fused" in compiled.kernel_table()


def test_compiled_training_step_adds_a_backward_kernel_per_forward_kernel():
    with torch.device("meta"):
        model = LayerNormGeluAdd(256)
    x = torch.ones(64, 256, device="meta", requires_grad=True)
    ops, kernels = _fused(model, (x, x.clone()), mode="train")
    fwd = [k for k in kernels if k.phase == "forward" and k.launches]
    bwd = [k for k in kernels if k.phase == "backward"]
    assert len(fwd) == 1 and len(bwd) == 1
    # reads x, r (2 · 65,536 B), weight and bias (2,048 B); writes the sum (65,536 B):
    # the backward reads R = 133,120 B again and the output's gradient, writes R's gradients
    assert fwd[0].dram_bytes == 198_656
    assert bwd[0].launches == 2  # and the weight gradients, a column reduction
    assert all(ops[i].phase == "backward" for i in bwd[0].ops)
    report = tgc.estimate(model, (x, x.clone()), device=A100, mode="train", compiled=True)
    assert sum(r["time_ms"] for r in report.module_rows(1)) == pytest.approx(report.gpu_ms)


# ------------------------------------------------------------------ SDPA as one flash kernel

class _GQA(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, kv, kv, is_causal=self.causal, enable_gqa=True)


class _Dropped(nn.Module):
    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, q, q, dropout_p=self.p, is_causal=True)


@pytest.mark.parametrize("p", [0.0, 0.1])
def test_sdpa_with_dropout_never_splits(p: float):
    # 8 heads x 256 tokens, d = 128, batch 1 on an A100: PyTorch's FlashAttention 2 splits the
    # keys 2 ways (tests/test_attention.py works it by hand), unless the call drops
    # probabilities: set_params_splitkv leaves a call with dropout_p > 0 unsplit
    q = torch.ones(1, 8, 256, 128, dtype=torch.bfloat16, device="meta")
    report = tgc.estimate(_Dropped(p), (q,), device=A100, dtype="bf16")
    (rec,) = [o for o in report.others if o.op.attention is not None]
    assert rec.op.attention.dropout == (p > 0)
    (call,) = sdpa_calls([rec.op], A100)
    assert call.dropout == (p > 0)
    pred = AttentionPredictor.shipped().predict(AttentionBatch.from_calls([call]), A100)
    assert pred.details["splits"].item() == (1.0 if p > 0 else 2.0)


def _attention_record(causal: bool):
    q = torch.ones(2, 8, 1024, 128, dtype=torch.bfloat16, device="meta")
    kv = torch.ones(2, 2, 1024, 128, dtype=torch.bfloat16, device="meta")
    report = tgc.estimate(_GQA(causal), (q, kv), device=A100, dtype="bf16")
    (rec,) = [o for o in report.others if o.op.attention is not None]
    return report, rec


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_on_a_gpu_is_one_flash_kernel_of_hand_worked_bytes(causal: bool):
    report, rec = _attention_record(causal)
    a = rec.op.attention
    assert (a.batch, a.heads, a.kv_heads, a.q_len, a.kv_len, a.head_dim) == (2, 8, 2, 1024,
                                                                            1024, 128)
    assert a.causal == causal and a.mask_bytes == 0
    calls = AttentionBatch.from_calls(sdpa_calls([rec.op], A100))
    # Q and O: 2·8·1024·128·2 B = 4,194,304 B each; K and V per KV head: 2·2·1024·128·2 B =
    # 1,048,576 B each; the scores never reach DRAM: 10,485,760 B, causal or not
    traffic = attention_bytes(calls)
    assert traffic["q_bytes"].item() == traffic["o_bytes"].item() == 4_194_304
    assert traffic["k_bytes"].item() == traffic["v_bytes"].item() == 1_048_576
    assert traffic["compulsory_bytes"].item() == 10_485_760
    # the tiles re-read K/V from the L2: PyTorch's FlashAttention 2 tiles d = 128 on an A100
    # (sm80) as 128 rows by 64 keys: 8 query tiles per head, each running 16 key blocks (128
    # per head) or, causal, the 2t + 2 its mask reaches, 2·(1 + 2 + … + 8) = 72; a block holds
    # K and V of 64 keys, 2·64·128·2 = 32,768 B; FlashAttention 2 does not pack GQA heads in
    # prefill: 2·8 heads · blocks · 32,768 B
    q_tile, kv_tile, _ = kernel_tiles("torch_fa2", 128, 2, causal=causal, windowed=False,
                                      single=False, smem_bytes_per_sm=A100.smem_bytes_per_sm)
    assert (q_tile, kv_tile) == (128, 64)
    geo = attention_geometry(calls, torch.tensor([108.0], dtype=torch.float64),
                             pack_gqa(calls, ("torch_fa2",)), q_tile=q_tile, kv_tile=kv_tile)
    blocks = 72 if causal else 128
    assert geo.requested_kv_bytes.item() == 2 * 8 * blocks * 32_768
    # priced by the attention model, cold L2, as the kernel PyTorch runs (FlashAttention 2)
    calls = AttentionBatch.from_calls(sdpa_calls([rec.op], A100))
    pred = AttentionPredictor.shipped().predict(calls, A100)
    assert rec.time_ms == pytest.approx(pred.time_ms.item())
    assert rec.kernel == "flash_attention_torch_fa2_0"
    assert report.gpu_ms == pytest.approx(rec.time_ms)  # its GEMMs are fused into it
    assert sum(g.site.flops for g in report.gemms) == pytest.approx(pred.details["flops"].item())


def test_causal_flash_kernel_runs_fewer_blocks_and_is_faster():
    _, dense = _attention_record(False)
    _, causal = _attention_record(True)
    assert causal.time_ms < 0.8 * dense.time_ms
    times, kernels = sdpa_times_ms([dense.op, causal.op], A100)
    assert times == pytest.approx([dense.time_ms, causal.time_ms])
    assert kernels == ["flash_attention_torch_fa2"] * 2


def test_eager_attention_stays_op_by_op():
    with torch.device("meta"):
        model = _Tiny().eval()
    report = tgc.estimate(model, (torch.ones(2, 16, dtype=torch.long, device="meta"),),
                          device=A100)
    assert not any(o.kernel for o in report.others)
    assert {g.bound for g in report.gemms} <= {"compute", "memory"}


def test_each_sdpa_call_is_a_kernel_of_its_own():
    class TwoCalls(nn.Module):
        def forward(self, q: torch.Tensor) -> torch.Tensor:
            h = F.scaled_dot_product_attention(q, q, q, is_causal=True)
            return F.scaled_dot_product_attention(h, h, h, is_causal=True)

    q = torch.ones(1, 4, 256, 64, device="meta")
    report = tgc.estimate(TwoCalls(), (q,), device=A100, dtype="bf16")
    kernels = report.kernels()
    assert [k["kernel"] for k in kernels] == ["flash_attention_torch_fa2_0", "flash_attention_torch_fa2_1"]
    assert "2 SDPA calls as flash attention kernels" in report.footer()
    # the per-GEMM table gives each call a row of its own, and its rows sum to the total
    rows = report.module_rows(None)
    assert [r["op"] for r in rows if r.get("op") == "attention"] == ["attention", "attention"]
    assert sum(r["time_ms"] for r in rows) == pytest.approx(report.gpu_ms)
