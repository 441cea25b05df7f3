"""GEMM extraction: every spelling with hand-worked shapes, layouts, bytes and the backward pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers.pytorch_utils import Conv1D

from torch_gemm_cost.capture.core import capture
from torch_gemm_cost.records import (
    META_KEY,
    ForwardGemm,
    causal_kept_entries,
    einsum_gemms,
    extract,
    gemm_handler,
    handlers,
    matrix_layout,
    register_gemm_handler,
)

METHODS = ("dispatch", "export")


class AllSpellings(nn.Module):
    """Uses every GEMM spelling once; x is (2, 4, 8)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 16)
        self.w2 = nn.Parameter(torch.randn(12, 16))
        self.c1d = Conv1D(24, 16)  # HF Conv1D(nf=24, nx=16): addmm with W (16, 24)
        self.w = nn.Parameter(torch.randn(16, 16))
        self.w3 = nn.Parameter(torch.randn(3, 16, 5))
        self.b16 = nn.Parameter(torch.randn(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)  # (2, 4, 16)
        f = F.linear(h, self.w2)  # (2, 4, 12)
        c = self.c1d(h)  # (2, 4, 24)
        h2 = h.reshape(8, 16)
        a = torch.addmm(self.b16, h2, self.w)
        m = torch.mm(h2, self.w.t())
        ht = h.transpose(1, 2)  # (2, 16, 4)
        b = torch.bmm(h, ht)
        bb = torch.baddbmm(b, h, ht)
        m1 = h @ self.w  # ND·2-D
        m2 = torch.matmul(h, ht)  # ND·ND
        m3 = h.unsqueeze(1) @ self.w3  # (2, 1, 4, 16)·(3, 16, 5): broadcast to (2, 3)
        v = h[0, 0]  # (16,)
        m4 = v @ self.w  # 1-D·2-D
        m5 = self.w @ v  # 2-D·1-D
        m6 = v @ v  # dot
        m7 = v @ ht  # 1-D·ND
        e1 = torch.einsum("bik,kj->bij", h, self.w)
        q = h.reshape(2, 4, 2, 8).transpose(1, 2)  # (2, 2, 4, 8)
        e2 = torch.einsum("bhqd,bhkd->bhqk", q, q)
        o = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        outs = (f, c, a, m, bb, m1, m2, m3, m4, m5, m6, m7, e1, e2, o)
        return sum(t.sum() for t in outs)


# (module, op, batch, m, n, k): worked by hand from the shapes in forward()
ALL_EXPECTED = [
    ("lin", "linear", 1, 8, 16, 8),  # (2·4 tokens, 8) · W(16, 8)ᵀ
    ("", "linear", 1, 8, 12, 16),
    ("c1d", "conv1d", 1, 8, 24, 16),  # x.view(8, 16) · W(16, 24)
    ("", "addmm", 1, 8, 16, 16),
    ("", "mm", 1, 8, 16, 16),
    ("", "bmm", 2, 4, 4, 16),
    ("", "baddbmm", 2, 4, 4, 16),
    ("", "matmul", 1, 8, 16, 16),  # leading dims fold into m: 2·4
    ("", "matmul", 2, 4, 4, 16),
    ("", "matmul", 6, 4, 5, 16),  # batch broadcast (2, 1) with (3,) -> 2·3
    ("", "matmul", 1, 1, 16, 16),
    ("", "matmul", 1, 16, 1, 16),
    ("", "matmul", 1, 1, 1, 16),
    ("", "matmul", 2, 1, 4, 16),
    ("", "einsum", 1, 8, 16, 16),  # b, i -> m = 2·4; j -> n; k reduced
    ("", "einsum", 4, 4, 4, 8),  # b, h -> batch 2·2
    ("", "sdpa_qk", 4, 4, 4, 8),  # (B·H, L, S, E)
    ("", "sdpa_pv", 4, 4, 8, 4),  # (B·H, L, Ev, S)
]


@pytest.fixture(scope="module")
def spelling_model() -> AllSpellings:
    torch.manual_seed(0)
    return AllSpellings()


@pytest.mark.parametrize("method", METHODS)
def test_every_spelling_yields_its_gemm(spelling_model: AllSpellings, method: str) -> None:
    captured = capture(spelling_model, (torch.randn(2, 4, 8),), method=method)
    sites, _ = extract(captured, torch.float32)
    got = [(s.module, s.op, s.batch, s.m, s.n, s.k) for s in sites]
    assert got == ALL_EXPECTED
    by_op: dict = {}
    for s in sites:
        by_op.setdefault(s.op, s)  # the first of each op
    assert by_op["linear"].module_type == "Linear" and by_op["conv1d"].module_type == "Conv1D"
    assert by_op["linear"].bias and by_op["conv1d"].bias and by_op["addmm"].bias
    assert by_op["baddbmm"].bias and not by_op["mm"].bias
    # a Linear weight (n, k) is read transposed; mm(h, w.t()) too; Conv1D's (k, n) weight is not
    assert by_op["linear"].b_transposed and not by_op["linear"].a_transposed
    assert by_op["mm"].b_transposed and not by_op["conv1d"].b_transposed
    assert by_op["bmm"].b_transposed  # h.transpose(1, 2)
    assert all(s.phase == "forward" and s.dtype == "float32" for s in sites)


def test_sdpa_is_two_gemms_and_a_softmax_with_causal_flops(spelling_model: AllSpellings) -> None:
    captured = capture(spelling_model, (torch.randn(2, 4, 8),))
    sites, others = extract(captured, torch.float32)
    qk, pv = [s for s in sites if s.op.startswith("sdpa")]
    # causal 4×4 scores keep 1+2+3+4 = 10 of 16; QKᵀ: 2·(B·H=4)·(E=8)·10 = 640 of 2·4·4·4·8 = 1024
    assert qk.causal and pv.causal
    assert (qk.flops, qk.dense_flops) == (640, 1024)
    assert (pv.flops, pv.dense_flops) == (640, 1024)
    soft = [o for o in others if o.op == "aten.scaled_dot_product_attention"]
    assert len(soft) == 1 and soft[0].op_class == "softmax" and soft[0].numel == 4 * 10
    # fused kernel bytes, fp32: QKᵀ reads Q and K = 2·(4·4·8)·4 B = 1024; PV reads V, writes O
    assert qk.dram_bytes == 1024 and pv.dram_bytes == 1024
    node = next(n for n in captured.graph_module.graph.nodes if n.name == qk.node)
    assert node.meta[META_KEY] == (qk, soft[0], pv)


def test_every_gemm_node_is_annotated(spelling_model: AllSpellings) -> None:
    captured = capture(spelling_model, (torch.randn(2, 4, 8),))
    sites, others = extract(captured, "bf16")
    annotated = [r for n in captured.graph_module.graph.nodes for r in n.meta.get(META_KEY, ())]
    assert set(sites) | set(others) == set(annotated)
    assert all(s.dtype == "bfloat16" and s.out_dtype == "bfloat16" for s in sites)


def test_einsum_decomposition_by_hand() -> None:
    # matrix chain, left to right: (2×3)(3×4) then (2×4)(4×5)
    assert einsum_gemms("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]) == [(1, 2, 4, 3), (1, 2, 5, 4)]
    # ellipsis batch dims; implicit output
    assert einsum_gemms("...ij,...jk", [(7, 2, 3), (7, 3, 4)]) == [(7, 2, 4, 3)]
    # a letter only in A and not kept is summed away before the GEMM: m = i only
    assert einsum_gemms("ijx,jk->ik", [(2, 3, 9), (3, 4)]) == [(1, 2, 4, 3)]
    # outer product: no letter is summed, so torch multiplies (a broadcast mul), no GEMM
    assert einsum_gemms("i,j->ij", [(3,), (5,)]) == []


class Mamba2Diagonal(nn.Module):
    """The diagonal-block einsum of Mamba-2's SSD (KernelBench level 3, 48_Mamba2ReturnY)."""

    def forward(self, c, b, decay, x):
        return torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", c, b, decay, x)


@pytest.mark.parametrize("opt_einsum", [False, True])
def test_einsum_is_the_bmm_calls_torch_runs(opt_einsum: bool) -> None:
    if opt_einsum and not torch.backends.opt_einsum.is_available():
        pytest.skip("opt_einsum is not installed: torch contracts left to right")
    from torch.utils.flop_counter import FlopCounterMode

    b, c, l, h, n, p = 2, 4, 8, 3, 5, 6  # s (the source position) runs over l too
    with torch.device("meta"):
        inputs = (torch.ones(b, c, l, h, n), torch.ones(b, c, l, h, n),
                  torch.ones(b, h, c, l, l), torch.ones(b, c, l, h, p))
    model = Mamba2Diagonal()
    with torch.backends.opt_einsum.flags(enabled=opt_einsum):
        sites, others = extract(capture(model, inputs), torch.float32)
        with FlopCounterMode(display=False) as counter:
            model(*inputs)
    # the oracle: FLOPs of the bmm calls torch.einsum makes, as FlopCounterMode counts them
    assert sum(s.flops for s in sites) == counter.get_total_flops() > 0
    if opt_einsum:
        return
    # left to right: C·B over n, batch (b, c, h) = 24, m = l = 8, n = s = 8, k = n = 5; the
    # decay joins by an elementwise mul (nothing to sum); then ·X over s: m = l, n = p, k = s.
    # NB: contracting pair by pair as written would give a 1×1×1 GEMM of batch b·c·h·l·s
    assert [(s.op, s.batch, s.m, s.n, s.k) for s in sites] == [
        ("einsum", 24, 8, 8, 5), ("einsum", 24, 8, 6, 8)]
    kernels = [o for o in others if ".einsum_kernel." in o.node]
    assert {o.op for o in kernels} == {"aten.clone", "aten.mul"}
    (mul,) = [o for o in kernels if o.op == "aten.mul"]
    # the (b, c, l, h, s) scores times the decay: 2·4·8·3·8 = 1536 fp32 elements each,
    # two read and one written: 3·1536·4 B
    assert (mul.op_class, mul.numel, mul.dram_bytes) == ("elementwise", 1536, 18_432)


def test_causal_kept_entries() -> None:
    assert causal_kept_entries(3, 3) == 6  # 1 + 2 + 3
    assert causal_kept_entries(4, 2) == 7  # 1 + 2 + 2 + 2
    assert causal_kept_entries(2, 4) == 3  # top-left: 1 + 2
    assert causal_kept_entries(2, 4, bottom_right=True) == 7  # 3 + 4


class Misaligned(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(64, 50257, bias=False)  # GPT-2's unpadded vocabulary
        self.odd = nn.Linear(63, 8)
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        a = self.head(x)  # x (4, 64)
        b = self.odd(y)  # y (4, 63)
        c = z[:, 8:16] @ self.w  # z (4, 24): rows 24 apart, starts 8 elements in
        d = z[:, 1:9] @ self.w  # starts 1 element in
        return a.sum() + b.sum() + c.sum() + d.sum()


def test_alignment_bytes_of_each_operand() -> None:
    with torch.device("meta"):
        model = Misaligned()
    args = (
        torch.ones(4, 64, device="meta"),
        torch.ones(4, 63, device="meta"),
        torch.ones(4, 24, device="meta"),
    )
    head, odd, c, d = extract(capture(model, args), "bf16")[0]
    # bf16: C row 50257·2 = 100514 B = 2·50257 -> 2-byte loads; W rows 64·2 = 128 B -> 16
    assert (head.a_align_bytes, head.b_align_bytes, head.c_align_bytes) == (16, 16, 2)
    # k = 63: 126 B rows -> 2; the (8, 63) weight too; C rows 8·2 = 16 B -> 16
    assert (odd.a_align_bytes, odd.b_align_bytes, odd.c_align_bytes) == (2, 2, 16)
    # z[:, 8:16]: rows 24·2 = 48 B (16-aligned), offset 8·2 = 16 B -> 16
    assert c.a_align_bytes == 16 and not c.a_transposed
    # z[:, 1:9]: offset 1·2 = 2 B -> 2
    assert d.a_align_bytes == 2
    # compulsory bytes of the head, bf16: (4·64 + 64·50257 + 4·50257)·2
    assert head.dram_bytes == (4 * 64 + 64 * 50257 + 4 * 50257) * 2


def test_requested_dtype_sets_sizes_not_the_models() -> None:
    model = nn.Linear(16, 32)  # float32 weights
    sites32, _ = extract(capture(model, (torch.ones(8, 16),)), torch.float32)
    sites16, _ = extract(capture(model, (torch.ones(8, 16),)), torch.bfloat16)
    # (8·16 + 16·32 + 8·32) elements = 896; 4 B each in fp32, 2 B in bf16
    assert sites32[0].dram_bytes == 896 * 4 and sites16[0].dram_bytes == 896 * 2
    fp8, _ = extract(capture(model, (torch.ones(8, 16),)), "fp8")
    # fp8 in (1 B), 16-bit out: (8·16 + 16·32)·1 + 8·32·2 = 640 + 512
    assert fp8[0].dtype == "float8_e4m3fn" and fp8[0].out_dtype == "bfloat16"
    assert fp8[0].dram_bytes == 1152


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


@pytest.mark.parametrize("method", METHODS)
def test_backward_gemms_of_an_mlp_by_hand(method: str) -> None:
    x = torch.ones(32, 8)  # no grad: fc1 needs no dX
    sites, others = extract(
        capture(Mlp(), (x,), train=True, method=method), "float32", mode="train"
    )
    got = [(s.module, s.phase, s.batch, s.m, s.n, s.k, s.flops) for s in sites]
    assert got == [
        ("fc1", "forward", 1, 32, 16, 8, 8192),  # 2·32·16·8
        ("fc2", "forward", 1, 32, 4, 16, 4096),  # 2·32·4·16
        # backward in reverse order; dX (32, 16) = dY (32, 4) · W2 (4, 16): k = 4
        ("fc2", "backward_dx", 1, 32, 16, 4, 4096),
        # dW2 (4, 16) = dYᵀ (4, 32) · H (32, 16): k = 32 tokens
        ("fc2", "backward_dw", 1, 4, 16, 32, 4096),
        # dW1 (16, 8) = dHᵀ (16, 32) · X (32, 8)
        ("fc1", "backward_dw", 1, 16, 8, 32, 8192),
    ]
    dw2 = sites[3]
    assert dw2.a_transposed and not dw2.b_transposed  # dYᵀ read transposed, H row-major
    back = [(o.module, o.op, o.op_class, o.dram_bytes) for o in others if o.phase == "backward"]
    relu = [o for o in others if o.phase == "forward" and o.op == "aten.relu"]
    assert len(relu) == 1
    # the bias gradients sum dY over the 32 rows: fc2 reads 32·4 and writes 4 fp32 elements,
    # (128 + 4)·4 = 528 B; fc1 (512 + 16)·4 = 2,112 B. ReLU's backward moves 2× its forward.
    assert back == [
        ("fc2", "aten.sum", "reduction", 528),
        ("", "aten.relu", "elementwise", 2 * relu[0].dram_bytes),
        ("fc1", "aten.sum", "reduction", 2_112),
    ]


def test_backward_follows_requires_grad() -> None:
    mlp = Mlp()
    mlp.fc1.requires_grad_(False)
    x = torch.ones(32, 8, requires_grad=True)
    sites, _ = extract(capture(mlp, (x,), train=True), "float32", mode="train")
    # frozen fc1 still passes dX back to the input that wants it; it has no dW
    assert [(s.module, s.phase) for s in sites] == [
        ("fc1", "forward"),
        ("fc2", "forward"),
        ("fc2", "backward_dx"),
        ("fc2", "backward_dw"),
        ("fc1", "backward_dx"),
    ]
    # inference mode: no backward at all
    sites, _ = extract(capture(mlp, (x,)), "float32", mode="inference")
    assert all(s.phase == "forward" for s in sites)


def test_attention_backward_keeps_the_causal_discount() -> None:
    q = torch.ones(1, 2, 4, 8, requires_grad=True)

    class Attn(nn.Module):
        def forward(self, q: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, q, q, is_causal=True)

    sites, _ = extract(capture(Attn(), (q,), train=True), "float32", mode="train")
    back = [(s.op, s.phase, s.batch, s.m, s.n, s.k, s.flops) for s in sites if s.phase != "forward"]
    # every backward GEMM touches the (4, 4) score matrix: 10 kept scores, 2·2·8·10 = 320
    assert back == [
        ("sdpa_pv", "backward_dx", 2, 4, 4, 8, 320),  # dP = dO·Vᵀ
        ("sdpa_pv", "backward_dw", 2, 4, 8, 4, 320),  # dV = Pᵀ·dO
        ("sdpa_qk", "backward_dx", 2, 4, 8, 4, 320),  # dQ = dS·K
        ("sdpa_qk", "backward_dw", 2, 8, 4, 4, 320),  # dKᵀ (8, 4) = Qᵀ·dS, as bmm's backward
    ]


def test_other_ops_classes_and_bytes() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(100, 16)
            self.norm = nn.LayerNorm(16)
            self.bias = nn.Parameter(torch.zeros(16))

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            h = self.emb(ids)  # (2, 8, 16)
            h = h + self.bias
            h = self.norm(h).view(16, 16)
            return torch.softmax(h, dim=-1)

    _, others = extract(capture(Net(), (torch.zeros(2, 8, dtype=torch.long),)), "float32")
    by_class = {}
    for o in others:
        by_class.setdefault(o.op_class, []).append(o)
    emb = by_class["embedding"][0]
    # ids 2·8·8 B = 128, rows read and written 2·(2·8·16·4 B) = 2048
    assert emb.dram_bytes == 128 + 2048 and emb.module == "emb" and emb.dtype == "float32"
    add = next(o for o in by_class["elementwise"] if o.op == "aten.add")
    # x 2·8·16·4 = 1024, bias 16·4 = 64, out 1024
    assert add.dram_bytes == 2112
    assert by_class["norm"][0].module == "norm"
    assert all(o.dram_bytes == 0 for o in by_class["view"])
    assert by_class["softmax"][0].dram_bytes == 2 * 16 * 16 * 4
    _, others16 = extract(capture(Net(), (torch.zeros(2, 8, dtype=torch.long),)), "bf16")
    emb16 = next(o for o in others16 if o.op_class == "embedding")
    assert emb16.dram_bytes == 128 + 1024 and emb16.dtype == "bfloat16"  # int ids keep 8 B


def test_bad_mode_is_named() -> None:
    captured = capture(nn.Linear(2, 2), (torch.ones(1, 2),))
    with pytest.raises(ValueError, match="'training'"):
        extract(captured, "fp32", mode="training")


class VectorsAndTorchModules(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 2, batch_first=True)
        self.w = nn.Parameter(torch.randn(5, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (2, 5, 16)
        a = self.mha(x, x, x, need_weights=False)[0]
        v = x[0, 0]
        b = torch.mv(self.w, v)  # (5, 16)·(16,)
        c = torch.dot(v, v)
        d = torch.addbmm(torch.zeros(5, 5), x, x.transpose(1, 2))
        return a.sum() + b.sum() + c + d.sum()


@pytest.mark.parametrize("method", METHODS)
def test_vector_spellings_and_multihead_attention(method: str) -> None:
    model = VectorsAndTorchModules().eval()
    sites, _ = extract(capture(model, (torch.randn(2, 5, 16),), method=method), "float32")
    got = [(s.module, s.batch, s.m, s.n, s.k) for s in sites]
    # the recorder sees MHA's projections as t + mm/addmm (F.multi_head_attention_forward is
    # Python and calls linear inside), export as linear: the GEMMs are the same
    assert got == [
        ("mha", 1, 10, 48, 16),  # packed q/k/v projection of 2·5 tokens
        ("mha", 4, 5, 5, 8),  # scores: batch 2·2 heads, head dim 16 / 2
        ("mha", 4, 5, 8, 5),
        ("mha", 1, 10, 16, 16),  # out_proj
        ("", 1, 5, 1, 16),  # mv
        ("", 1, 1, 1, 16),  # dot
        ("", 2, 5, 5, 16),  # addbmm
    ]
    assert [s.op for s in sites][4:] == ["mv", "dot", "addbmm"]


def test_grouped_query_attention_reads_shared_keys_once() -> None:
    class Gqa(nn.Module):
        def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)

    q = torch.ones(1, 8, 16, 4)  # 8 query heads
    kv = torch.ones(1, 2, 16, 4)  # 2 shared key/value heads
    qk, pv = extract(capture(Gqa(), (q, kv)), "bf16")[0]
    assert qk.shape == (8, 16, 16, 4) and pv.shape == (8, 16, 4, 16)
    # bf16: Q 8·16·4 + K 2·16·4 = 640 elements read -> 1280 B; PV reads V (128), writes O (512)
    assert qk.dram_bytes == 1280 and pv.dram_bytes == (128 + 512) * 2


def test_bias_gradient_only_where_a_broadcast_bias_needs_grad() -> None:
    mlp = Mlp()
    mlp.fc2.bias.requires_grad_(False)
    _, others = extract(capture(mlp, (torch.ones(32, 8),), train=True), "float32", mode="train")
    # fc2's frozen bias gets no gradient; fc1's still does
    assert [o.module for o in others if o.op == "aten.sum"] == ["fc1"]

    class Scores(nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
            return torch.baddbmm(bias, q, k)

    q, k = torch.ones(2, 8, 4, requires_grad=True), torch.ones(2, 4, 8, requires_grad=True)
    full = torch.ones(2, 8, 8, requires_grad=True)  # dC's own shape: the gradient passes through
    row = torch.ones(8, requires_grad=True)  # broadcast: summed over 2·8 rows, (128 + 8)·4 B
    for bias, expect in ((full, []), (row, [544])):
        _, others = extract(capture(Scores(), (q, k, bias), train=True), "float32", mode="train")
        assert [o.dram_bytes for o in others if o.op == "aten.sum"] == expect


class Moe(nn.Module):
    """An MoE layer as transformers writes it: 4 experts (8 -> 16), 2 of them per row, one
    ``grouped_mm`` over the rows sorted by expert."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(8, 4, bias=False)
        self.experts = nn.Parameter(torch.randn(4, 16, 8))  # (experts, n, k), Linear weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, top = self.router(x).softmax(-1).topk(2, dim=-1)  # (rows, 2) each
        ids, perm = torch.sort(top.reshape(-1))  # 2·rows picks, by expert
        rows = x[perm // 2]
        counts = torch.histc(ids.float(), bins=4, min=0, max=3)
        offs = torch.cumsum(counts, 0, dtype=torch.int32)
        out = F.grouped_mm(rows, self.experts.transpose(-2, -1), offs=offs)
        return out * weight.reshape(-1)[perm].unsqueeze(-1)


def test_active_groups_by_hand() -> None:
    from torch_gemm_cost.records import active_groups

    # 64 rows over 4 experts: 4·(1 − 0.75^64) = 4.0; 2 rows: 4·(1 − 0.75²) = 1.75 -> 2
    assert active_groups(4, 64) == 4 and active_groups(4, 2) == 2
    assert active_groups(4, 1) == 1 and active_groups(1, 500) == 1 and active_groups(8, 0) == 1


def test_grouped_mm_is_one_gemm_per_routed_expert() -> None:
    # float32 weights on the meta device: the grouped_mm fake kernel takes bf16 only
    with torch.device("meta"):
        moe = Moe()
    x = torch.ones(32, 8, device="meta")
    sites, others = extract(capture(moe, (x,), train=True), "bfloat16", mode="train")
    got = [(s.module, s.op, s.phase, s.shape, s.flops) for s in sites]
    # 32 rows × 2 picks = 64 rows over 4 experts, all of them hit: 4 GEMMs of 16 rows.
    # forward (16, 8)·(8, 16) per expert: 2·4·16·16·8 = 16,384 = 2·64·16·8
    # dW (8, 16) per expert = rowsᵀ (8, 16) · dY (16, 16): k = 16 rows, 16,384 FLOPs; the
    # input needs no grad, so no dX. The router's weight gets its gradient through the
    # routing weights: dW (4, 8) = dLogitsᵀ (4, 32) · X (32, 8).
    assert got == [
        ("router", "linear", "forward", (1, 32, 4, 8), 2_048),  # 2·32·4·8
        ("", "grouped_mm", "forward", (4, 16, 16, 8), 16_384),
        ("", "grouped_mm", "backward_dw", (4, 8, 16, 16), 16_384),
        ("router", "linear", "backward_dw", (1, 4, 8, 32), 2_048),
    ]
    fwd = sites[1]
    assert fwd.b_transposed and not fwd.a_transposed  # the experts are stored (n, k)
    # A, B and C each once, bf16: (4·16·8 + 4·8·16 + 4·16·16)·2 = 4,096 B
    assert fwd.dram_bytes == 4_096
    assert {o.op for o in others} >= {"aten.histc", "aten.topk", "aten.sort"}
    assert all(o.op_class != "other" for o in others if o.op in ("aten.histc", "aten.sort"))
    # one token (decode): 2 rows reach 4·(1 − 0.75²) = 1.75 -> 2 experts, one row each
    sites, _ = extract(capture(moe, (torch.ones(1, 8, device="meta"),)), "bfloat16")
    assert [s.shape for s in sites if s.op == "grouped_mm"] == [(2, 1, 16, 8)]


def test_mixtral_experts_are_costed() -> None:
    import transformers

    from torch_gemm_cost.api import estimate

    cfg = transformers.MixtralConfig(
        num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, num_local_experts=4, num_experts_per_tok=2,
    )
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    ids = torch.ones(2, 16, dtype=torch.long, device="meta")
    report = estimate(model, (ids,), device="h100_sxm5_80gb", dtype="bf16")
    assert not report.unmodelled
    experts = [g.site for g in report.gemms if g.site.op == "grouped_mm"]
    # 32 tokens × 2 picks = 64 rows; gate and up fused (64 -> 2·128), then down (128 -> 64):
    # 2·64·256·64 + 2·64·64·128 = 2,097,152 + 1,048,576 FLOPs over 4 experts of 16 rows
    assert [(s.shape, s.flops) for s in experts] == [
        ((4, 16, 256, 64), 2_097_152),
        ((4, 16, 64, 128), 1_048_576),
    ]


class Convs(nn.Module):
    """Every convolution flavour once: strided, padded, dilated, grouped, 3-D, transposed, 'same'."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv1d(6, 12, 5, stride=2, padding=1)
        self.c2 = nn.Conv2d(12, 24, 3, stride=2, padding=2, dilation=2, groups=3)
        self.c3 = nn.Conv3d(4, 8, (2, 3, 3), stride=(1, 2, 2), bias=False)
        self.t2 = nn.ConvTranspose2d(24, 10, 4, stride=2, padding=1, output_padding=1)
        self.same = nn.Conv2d(10, 10, 3, padding="same")

    def forward(self, x1: torch.Tensor, x3: torch.Tensor) -> torch.Tensor:
        h = self.c1(x1)  # (2, 12, 30)
        h = self.c2(h.unsqueeze(-1).expand(-1, -1, -1, 16).contiguous())  # (2, 24, 8, 15)
        h = self.same(self.t2(h))  # (2, 10, 17, 31)
        return h.sum() + self.c3(x3).sum()


@pytest.mark.parametrize("method", METHODS)
def test_convolution_flops_match_the_flop_counter(method: str) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    model, x1, x3 = Convs(), torch.randn(2, 6, 61), torch.randn(2, 4, 5, 9, 9)
    with FlopCounterMode(display=False) as counter:
        model(x1, x3)
    want = {k.removeprefix("Convs."): sum(v.values())
            for k, v in counter.get_flop_counts().items() if k.startswith("Convs.")}
    sites, others = extract(capture(model, (x1, x3), method=method), "float32")
    assert {s.module: s.flops for s in sites} == want
    assert not [o for o in others if o.op_class == "other"]


def test_transposed_convolution_flops_match_the_flop_counter() -> None:
    # grouped, strided, dilated and padded transposed convolutions in 1, 2 and 3 dims: the
    # records' FLOPs are the needed ones, as FlopCounterMode counts them, while their dims are
    # the dgrad GEMM over the output that cuDNN runs (which multiplies the stride's zeros)
    from torch.utils.flop_counter import FlopCounterMode

    class Transposed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.t1 = nn.ConvTranspose1d(6, 4, 3, stride=2, padding=1, dilation=2)
            self.t2 = nn.ConvTranspose2d(8, 12, (3, 5), stride=(2, 3), padding=(1, 2),
                                         dilation=(2, 1), groups=4)
            self.t3 = nn.ConvTranspose3d(8, 8, (3, 2, 2), stride=2, padding=1,
                                         output_padding=1, groups=2)

        def forward(self, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor) -> torch.Tensor:
            return self.t1(x1).sum() + self.t2(x2).sum() + self.t3(x3).sum()

    model = Transposed()
    xs = (torch.randn(2, 6, 9), torch.randn(2, 8, 5, 7), torch.randn(1, 8, 3, 4, 5))
    with FlopCounterMode(display=False) as counter:
        model(*xs)
    want = {k.removeprefix("Transposed."): sum(v.values())
            for k, v in counter.get_flop_counts().items() if k.startswith("Transposed.")}
    sites, _ = extract(capture(model, xs), "float32")
    assert {s.module: s.flops for s in sites} == want
    # each runs more than it needs: stride 2 in 1-D, 2·3 in 2-D, 2·2·2 in 3-D, about
    assert all(s.dense_flops > s.flops for s in sites)


def test_convolution_gemm_and_backward_by_hand() -> None:
    x1 = torch.randn(2, 6, 61, requires_grad=True)
    sites, _ = extract(capture(Convs(), (x1, torch.randn(2, 4, 5, 9, 9)), train=True),
                       "float32", mode="train")
    c1 = [(s.phase, s.shape, s.flops, s.dram_bytes) for s in sites if s.module == "c1"]
    # Conv1d(6 -> 12, kernel 5, stride 2, padding 1) on (2, 6, 61): (61 + 2 − 5) // 2 + 1 = 30
    # outputs per image, so m = 2·30 = 60 rows, n = 12 filters, k = 6·5 = 30 taps:
    # 2·60·12·30 = 43,200 FLOPs. Bytes are the tensors': X 2·6·61 = 732, W 12·6·5 = 360 and
    # Y 2·12·30 = 720 elements, (732 + 360 + 720)·4 = 7,248 B, in each direction.
    assert c1 == [
        ("forward", (1, 60, 12, 30), 43_200, 7_248),
        ("backward_dx", (1, 60, 30, 12), 43_200, 7_248),  # dX = dY·W: reads dY, W; writes dX
        ("backward_dw", (1, 12, 30, 60), 43_200, 7_248),  # dW = dYᵀ·X: reads X, dY; writes dW
    ]
    # the grouped conv is 3 GEMMs of (2·8·15) rows × 24/3 filters × 12/3·3·3 taps
    c2 = next(s for s in sites if s.module == "c2" and s.phase == "forward")
    assert c2.shape == (3, 240, 8, 36) and c2.op == "convolution"
    t2 = next(s for s in sites if s.module == "t2" and s.phase == "forward")
    # transposed, as cuDNN's dgrad kernel runs it: output positions (8 − 1)·2 − 2 + 4 + 1 = 17
    # by (15 − 1)·2 − 2 + 4 + 1 = 31, so m = 2·17·31 = 1,054 rows × 10 filters, reducing over
    # 24·4·4 = 384: 2·1,054·10·384 = 8,094,720 FLOPs run, stride 2 multiplying zeros; the
    # needed FLOPs are 240 input positions (2·8·15) × 160 (10·4·4) × 24 × 2 = 1,843,200
    assert t2.shape == (1, 1054, 10, 384) and t2.op == "conv_transpose"
    assert t2.dense_flops == 8_094_720 and t2.flops == 1_843_200


def test_strided_3d_transposed_convolution_runs_its_depth_phases_by_hand() -> None:
    # ConvTranspose3d(16 -> 32, 3×3×3, stride 2, padding 1) on (1, 16, 4, 5, 6): outputs
    # (i − 1)·2 − 2 + 2 + 1 = 2i − 1, so 7·9·11 = 693 rows × 32 filters. Each depth phase meets
    # 3/2 of the 3 depth taps and all 3·3 height and width ones: 13.5 taps, run as 14, so
    # k = 16·14 = 224. Needed FLOPs: 120 input positions × 32 × 27 taps × 16 × 2 = 3,317,760.
    # With 8 input channels the same conv runs every tap: k = 8·27 = 216
    class Up(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wide = nn.ConvTranspose3d(16, 32, 3, stride=2, padding=1)
            self.narrow = nn.ConvTranspose3d(8, 32, 3, stride=2, padding=1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.wide(x).sum() + self.narrow(y).sum()

    sites, _ = extract(capture(Up(), (torch.randn(1, 16, 4, 5, 6), torch.randn(1, 8, 4, 5, 6))),
                       "float32")
    by = {s.module: s for s in sites}
    assert by["wide"].shape == (1, 693, 32, 224) and by["wide"].flops == 3_317_760
    assert by["narrow"].shape == (1, 693, 32, 216) and by["narrow"].flops == 3_317_760 // 2


@pytest.mark.parametrize(("cudnn", "matmul"), [(True, False), (False, True)])
def test_fp32_runs_tf32_where_torch_flags_allow_it(cudnn: bool, matmul: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # PyTorch's defaults: cuDNN convolutions may use TF32, cuBLAS matmuls may not; the flags
    # are read when records are made, so a user who flips them gets what they set
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", cudnn)
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = matmul  # not an attribute monkeypatch can set
    try:
        _check_tf32_sites(cudnn, matmul)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _check_tf32_sites(cudnn: bool, matmul: bool) -> None:

    class ConvThenLinear(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.fc = nn.Conv2d(4, 8, 3), nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.conv(x).mean((2, 3)))

    sites, _ = extract(capture(ConvThenLinear(), (torch.ones(2, 4, 6, 6),), train=True),
                       "float32", mode="train")
    want = {"conv": "tf32" if cudnn else "float32", "fc": "tf32" if matmul else "float32"}
    assert {(s.module, s.dtype) for s in sites} == set(want.items())  # backward as forward
    assert all(s.out_dtype == "float32" for s in sites)
    # bf16 asked stays bf16 whatever the flags
    assert {s.dtype for s in extract(capture(ConvThenLinear(), (torch.ones(2, 4, 6, 6),)),
                                     "bfloat16")[0]} == {"bfloat16"}


def test_tensor_core_convolutions_write_their_nchw_output_through_a_transform(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = nn.Sequential(nn.Conv2d(4, 8, 3), nn.Conv2d(8, 8, 1),
                          nn.ConvTranspose2d(8, 4, 3, stride=2))
    x = torch.ones(2, 4, 9, 9)

    def transforms(m: nn.Module, x: torch.Tensor, dtype: str = "float32") -> list[int]:
        _, others = extract(capture(m, (x,)), dtype)
        return [o.dram_bytes for o in others if o.node.endswith(".nchw_layout")]

    # TF32 (PyTorch's default for convolutions): the 3x3 conv's (2, 8, 7, 7) output, 784
    # elements, read and written once more: 2·784·4 = 6,272 B; the 1x1 conv writes NCHW itself;
    # the transposed conv's (2, 4, 15, 15) output ((7 − 1)·2 + 3 = 15): 2·1,800·4 = 14,400 B
    assert transforms(model, x) == [6_272, 14_400]
    assert transforms(model, x, "bfloat16") == [3_136, 7_200]  # 2-byte elements
    cl = torch.channels_last
    assert transforms(model.to(memory_format=cl), x.to(memory_format=cl)) == []
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # fp32 SIMT kernels
    assert transforms(model, x) == []


def test_fused_attention_keeps_its_score_rows_off_the_load_path() -> None:
    # 197 tokens (ViT-B/16 on 224 px), head dim 64, bf16. Eagerly, S = QKᵀ is stored with rows
    # of 197·2 = 394 B, which admit only 2-byte loads; the fused kernel never stores S or P.
    class Fused(nn.Module):
        def forward(self, q: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, q, q)

    class Eager(nn.Module):
        def forward(self, q: torch.Tensor) -> torch.Tensor:
            return (q @ q.transpose(-2, -1)).softmax(-1) @ q

    q = torch.ones(2, 12, 197, 64, requires_grad=True)
    fused, _ = extract(capture(Fused(), (q,), train=True), "bf16", mode="train")
    aligns = [(s.op, s.phase, s.a_align_bytes, s.b_align_bytes, s.c_align_bytes) for s in fused]
    # Q, K, V, O and their gradients have 64·2 = 128 B rows: 16-byte loads everywhere
    assert aligns == [
        ("sdpa_qk", "forward", 16, 16, 16),
        ("sdpa_pv", "forward", 16, 16, 16),
        ("sdpa_pv", "backward_dx", 16, 16, 16),  # dP = dO·Vᵀ stays on chip
        ("sdpa_pv", "backward_dw", 16, 16, 16),  # dV = Pᵀ·dO
        ("sdpa_qk", "backward_dx", 16, 16, 16),  # dQ = dS·K, dS on chip
        ("sdpa_qk", "backward_dw", 16, 16, 16),
    ]
    eager, _ = extract(capture(Eager(), (q,)), "bf16")
    qk, pv = eager
    assert qk.c_align_bytes == 2 and pv.a_align_bytes == 2  # S and P stored, 394-byte rows


def test_pooling_masks_rope_and_random_ops_are_costed() -> None:
    class Ops(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (2, 4, 8, 8)
            p = F.max_pool2d(x, 2)  # (2, 4, 4, 4)
            a = F.adaptive_avg_pool2d(x, 1)  # (2, 4, 1, 1)
            t = torch.tril(x)
            z = torch.view_as_real(torch.polar(x, x))  # rotary embeddings written with complex
            r = torch.rand_like(x)
            return p.sum() + a.sum() + t.sum() + z.sum() + r.sum()

    _, others = extract(capture(Ops(), (torch.ones(2, 4, 8, 8),)), "float32")
    by_op = {o.op: o for o in others}
    classes = {op: o.op_class for op, o in by_op.items()}
    assert classes["aten.tril"] == classes["aten.polar"] == classes["aten.rand_like"] == (
        "elementwise")
    assert classes["aten.view_as_real"] == "view"
    assert "other" not in classes.values()
    # max pooling reads x (512 floats) and writes its maxima and their int64 indices:
    # 512·4 + 128·4 + 128·8 = 3,584 B
    pool = next(o for o in others if o.op.startswith("aten.max_pool2d"))
    assert pool.op_class == "reduction" and pool.dram_bytes == 3_584


def test_resampling_permutations_and_mask_ops_are_costed() -> None:
    """The ops a diffusion UNet and a DiT run besides their GEMMs (LLaVA's mask ops: its test
    in tests/test_cli_tasks.py)."""
    class Ops(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (2, 4, 8, 8)
            up = F.interpolate(x, scale_factor=2.0, mode="nearest")  # (2, 4, 16, 16)
            perm = torch.einsum("nchw->nhwc", x)  # DiT's unpatchify: a permuted view
            total = torch.einsum("nchw->n", x)  # sums letters away
            return up.sum() + perm.sum() + total.sum()

    _, others = extract(capture(Ops(), (torch.ones(2, 4, 8, 8),)), "float32")
    classes = {o.op: o.op_class for o in others}
    assert "other" not in classes.values(), classes
    einsums = [o.op_class for o in others if o.op == "aten.einsum"]
    assert einsums == ["view", "reduction"]
    # nearest upsampling reads x (512 floats) and writes 4 times as many: 5·512·4 = 10,240 B
    up = next(o for o in others if o.op == "aten.upsample_nearest2d")
    assert up.op_class == "copy" and up.dram_bytes == 10_240


def test_depthwise_convolution_is_a_memory_bound_op() -> None:
    dw = nn.Conv2d(4, 4, 3, groups=4, padding=1)  # one input channel per group
    sites, others = extract(capture(dw, (torch.ones(2, 4, 8, 8),)), "float32")
    assert sites == ()
    (conv,) = [o for o in others if o.op == "aten.convolution"]
    # reads x (2·4·8·8 = 512), the 4·1·3·3 = 36 weights and 4 biases, writes 512 outputs:
    # (512 + 36 + 4 + 512)·4 B = 4,256 B
    assert conv.op_class == "elementwise" and conv.dram_bytes == 4_256


def test_every_grouped_mm_layout_by_hand() -> None:
    class Layouts(nn.Module):
        def forward(self, a3: torch.Tensor, b2: torch.Tensor, a2: torch.Tensor,
                    b3: torch.Tensor) -> torch.Tensor:
            offs = torch.tensor([16, 32, 48, 64], dtype=torch.int32)  # 4 groups of 16
            cols = torch._grouped_mm(a3, b2, offs=offs)  # (4, 8, 16)·(16, Σn = 64) -> (8, 64)
            depth = torch._grouped_mm(a2, b2.t(), offs=offs)  # (8, Σk = 64)·(64, 16) -> (4, 8, 16)
            bmm = torch._grouped_mm(a3, b3)  # (4, 8, 16)·(4, 16, 16) -> (4, 8, 16)
            return cols.sum() + depth.sum() + bmm.sum()

    args = (torch.ones(4, 8, 16), torch.ones(16, 64), torch.ones(8, 64), torch.ones(4, 16, 16))
    sites, _ = extract(capture(Layouts(), args), "bfloat16")
    # all 64 columns, reduction rows or batches reach the 4 groups: 4·(1 − 0.75^64) = 4.0,
    # 16 each; every layout is 4 GEMMs of 8×16×16, 2·4·8·16·16 = 16,384 FLOPs
    assert [(s.op, s.shape, s.flops) for s in sites] == [("grouped_mm", (4, 8, 16, 16), 16_384)] * 3


@torch.library.custom_op("tgc_test::linear_nt", mutates_args=())
def linear_nt(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A custom GEMM op: x (m, k) times w (n, k) transposed."""
    return x @ w.t()


@linear_nt.register_fake
def _(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], w.shape[0])


def _linear_nt_backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = ctx.saved_tensors
    return grad @ w, grad.t() @ x


linear_nt.register_autograd(
    _linear_nt_backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs))


def _linear_nt_gemms(args, ctx):  # (args by schema name, HandlerContext) -> forward GEMMs
    x, w = ctx.tensor(args["x"]), ctx.tensor(args["w"])
    return [ForwardGemm("linear_nt", 1, int(x.shape[0]), int(w.shape[0]), int(x.shape[1]),
                        matrix_layout(x, ctx.elem_bytes),
                        matrix_layout(w, ctx.elem_bytes, swap=True),
                        grad_a=ctx.requires_grad(args["x"]), grad_b=ctx.requires_grad(args["w"]),
                        weight_b=True)]


class CustomGemm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(24, 40))  # (n, k), k off a multiple of 8 fp16 elements

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear_nt(x, self.w)


def test_a_custom_op_takes_a_registered_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handlers, "_HANDLERS", dict(handlers._HANDLERS))  # undone after the test
    x = torch.randn(6, 40)
    before, _ = extract(capture(CustomGemm(), (x,)), "float16")
    assert before == ()  # no handler: the op is no GEMM
    register_gemm_handler(torch.ops.tgc_test.linear_nt, _linear_nt_gemms)
    (site,), _ = extract(capture(CustomGemm(), (x,)), "float16")
    assert site.op == "linear_nt" and site.module_type == "CustomGemm"
    # export sees the op's autograd (the recorder sees its forward run with grad disabled)
    sites, _ = extract(capture(CustomGemm(), (x,), train=True, method="export"), "float16",
                       mode="train")
    # forward y (6, 24) = x (6, 40)·Wᵀ; backward dW (24, 40) = dYᵀ (24, 6)·X (6, 40) (x needs no
    # grad, so no dX); fp16 rows of 40 elements are 80 bytes: 16-byte loads
    assert [(s.phase, s.shape, s.b_transposed, s.flops) for s in sites] == [
        ("forward", (1, 6, 24, 40), True, 2 * 6 * 24 * 40),
        ("backward_dw", (1, 24, 40, 6), False, 2 * 24 * 40 * 6),
    ]
    assert sites[0].a_align_bytes == sites[0].b_align_bytes == 16


def test_one_op_takes_one_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handlers, "_HANDLERS", dict(handlers._HANDLERS))
    with pytest.raises(ValueError, match="op 'linear' already has a GEMM handler"):
        register_gemm_handler("linear", _linear_nt_gemms)
    register_gemm_handler("tgc_test_gemm", _linear_nt_gemms)
    with pytest.raises(ValueError, match="op 'tgc_test_gemm' already has a GEMM handler"):
        register_gemm_handler("tgc_test_gemm", _linear_nt_gemms)
    assert gemm_handler("tgc_test_gemm") is _linear_nt_gemms
    assert gemm_handler(torch.ops.aten.addmm.default) is gemm_handler("addmm")
