"""Inductor's attention rewrite: which hand-written attentions ``torch.compile`` runs as one SDPA
call (against inductor's own count on the CPU), and what a compiled estimate makes of them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_gemm_cost as tgc
from torch_gemm_cost.capture.core import capture
from torch_gemm_cost.compiled.attention_rewrite import find_attention, rewrite_attention

H100 = tgc.get_device("h100_sxm5_80gb")
B, S, HEADS, D = 2, 16, 4, 8


class _Attention(nn.Module):
    """A QKV projection split into (batch, heads, seq, head_dim) views; subclasses spell the rest."""

    def __init__(self, seq: int = S) -> None:
        super().__init__()
        self.qkv = nn.Linear(HEADS * D, 3 * HEADS * D)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq, dtype=torch.bool))[None, None])

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, s, _ = x.shape
        return tuple(t.view(b, s, HEADS, D).permute(0, 2, 1, 3)
                     for t in self.qkv(x).split(HEADS * D, dim=-1))


class Timm(_Attention):  # scaled by a multiply, no mask: pattern 2
    def forward(self, x, mask):
        q, k, v = self.heads(x)
        return ((q @ k.transpose(-2, -1)) * D ** -0.5).softmax(dim=-1) @ v


class BertOld(_Attention):  # transformers' BERT before its attention refactor: pattern 14
    def forward(self, x, mask):
        q, k, v = self.heads(x)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)
        probs = F.dropout(F.softmax(scores + mask, dim=-1), 0.1, training=self.training)
        return torch.matmul(probs, v)


class BertToday(_Attention):  # multiply, then mask: no pattern
    def forward(self, x, mask):
        q, k, v = self.heads(x)
        scores = torch.matmul(q, k.transpose(2, 3)) * D ** -0.5 + mask
        return torch.matmul(F.softmax(scores, dim=-1), v)


class Gpt2Old(_Attention):  # GPT-2's torch.where causal mask: pattern 18
    def forward(self, x, mask):
        q, k, v = self.heads(x)
        s = x.shape[1]
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        low = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype).to(w.device)
        w = torch.where(self.bias[:, :, :s, :s], w, low)
        w = F.dropout(F.softmax(w, dim=-1).type(v.dtype), 0.1, training=self.training)
        return torch.matmul(w, v)


class Plain(_Attention):  # no scale, no mask: pattern 23
    def forward(self, x, mask):
        q, k, v = self.heads(x)
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


class MaskOnly(_Attention):  # pattern 21
    def forward(self, x, mask):
        q, k, v = self.heads(x)
        return torch.softmax(q @ k.transpose(-2, -1) + mask, dim=-1) @ v


class MaskThenScale(_Attention):  # no pattern
    def forward(self, x, mask):
        q, k, v = self.heads(x)
        return torch.softmax((q @ k.transpose(-2, -1) + mask) / math.sqrt(D), dim=-1) @ v


class Bmm3d(_Attention):  # pattern 13
    def forward(self, x, mask):
        q, k, v = (t.reshape(B * HEADS, -1, D) for t in self.heads(x))
        return torch.bmm(torch.bmm(q, k.transpose(1, 2)).softmax(dim=-1), v)


class WeightsReturned(_Attention):  # the probabilities are read outside: no match
    def forward(self, x, mask):
        q, k, v = self.heads(x)
        p = (torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)).softmax(dim=-1)
        return p @ v, p


SPELLINGS = (Timm, BertOld, BertToday, Gpt2Old, Plain, MaskOnly, MaskThenScale, Bmm3d,
             WeightsReturned)


def _inputs(device: str = "cpu", b: int = B, s: int = S) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ones(b, s, HEADS * D, device=device), torch.zeros(b, 1, 1, s, device=device)


@pytest.mark.parametrize("spelling", SPELLINGS, ids=lambda c: c.__name__)
def test_rewrites_match_what_inductor_rewrites_on_the_cpu(spelling: type[nn.Module]):
    """inductor counts each replacement (``counters["inductor"]["fuse_attention"]``); on the CPU
    its fp32 check does not apply, so the count is the patterns' alone."""
    import torch._inductor.config as inductor_config
    from torch._dynamo.utils import counters

    model = spelling().eval()
    counters.clear()
    torch._dynamo.reset()
    with torch.no_grad(), inductor_config.patch(fx_graph_cache=False):
        torch.compile(model)(*_inputs())
    theirs = counters["inductor"].get("fuse_attention", 0)
    ours = len(find_attention(capture(model, _inputs()).graph_module.graph))
    assert ours == theirs
    assert theirs == (0 if spelling in (BertToday, MaskThenScale, WeightsReturned) else 1)


def _hf_model(name: str) -> tuple[nn.Module, tuple, dict]:
    import transformers as tf

    ids = torch.ones(2, 16, dtype=torch.long)
    small = {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4,
             "intermediate_size": 128}
    configs = {
        "bert": (tf.BertConfig(**small), tf.BertModel, {}),
        "bart": (tf.BartConfig(d_model=64, encoder_attention_heads=4, decoder_attention_heads=4,
                               encoder_layers=1, decoder_layers=1, encoder_ffn_dim=128,
                               decoder_ffn_dim=128), tf.BartModel, {"decoder_input_ids": ids}),
        "t5": (tf.T5Config(d_model=64, num_heads=4, d_kv=16, d_ff=128, num_layers=1,
                           num_decoder_layers=1), tf.T5Model, {"decoder_input_ids": ids}),
        "llama": (tf.LlamaConfig(**small, num_key_value_heads=2), tf.LlamaModel, {}),
    }
    config, cls, kwargs = configs[name]
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return cls(config).eval(), (ids,), kwargs


# BERT without a padding mask: both attentions scale by a multiply (pattern 2); BART's encoder
# and cross attention match, its causal decoder (multiply, then mask) does not; T5's cross
# attention adds a zeros position bias, which inductor drops as a no-op first; Llama's
# attention multiplies, then adds its causal mask
@pytest.mark.parametrize(("name", "count"), [("bert", 1), ("bart", 2), ("t5", 1), ("llama", 0)])
def test_rewrites_of_transformers_models_match_inductor(name: str, count: int):
    import torch._inductor.config as inductor_config
    from torch._dynamo.utils import counters

    model, args, kwargs = _hf_model(name)
    counters.clear()
    torch._dynamo.reset()
    with torch.no_grad(), inductor_config.patch(fx_graph_cache=False):
        torch.compile(model)(*args, **kwargs)
    theirs = counters["inductor"].get("fuse_attention", 0)
    ours = len(find_attention(capture(model, args, kwargs).graph_module.graph))
    assert ours == theirs == count


def _estimate(dtype: str, compiled: bool, spelling: type[nn.Module] = BertOld):
    with torch.device("meta"):
        model = spelling(seq=512).eval()
    return tgc.estimate(model, _inputs("meta", b=8, s=512), device=H100, dtype=dtype,
                        compiled=compiled)


def test_compiled_bf16_prices_the_rewritten_attention_as_one_flash_kernel():
    eager, compiled = _estimate("bf16", False), _estimate("bf16", True)
    assert [g.site.op for g in eager.gemms] == ["linear", "matmul", "matmul"]
    assert [g.site.op for g in compiled.gemms] == ["linear", "sdpa_qk", "sdpa_pv"]
    assert [g.bound for g in compiled.gemms][1:] == ["fused", "fused"]
    # the same FLOPs: 2·(8·4)·512·512·8 = 134,217,728 per product
    assert [g.site.flops for g in compiled.gemms][1:] == [134_217_728] * 2
    (att,) = [o for o in compiled.others if o.op.attention is not None]
    a = att.op.attention
    assert (a.batch, a.heads, a.kv_heads, a.q_len, a.kv_len, a.head_dim) == (8, 4, 4, 512, 512, 8)
    # the added (8, 1, 1, 512) mask: 4,096 elements of 2 bytes
    assert not a.causal and a.mask_bytes == 8_192
    assert att.kernel.startswith("flash_attention_")
    # no scale, mask or softmax kernel of its own: they are inside the attention kernel
    assert not [o for o in compiled.others if o.op.op in ("aten.div", "aten.add", "aten._softmax")]
    assert {o.op.op for o in eager.others} >= {"aten.div", "aten.add", "aten._softmax"}
    assert compiled.gpu_ms < eager.gpu_ms
    assert sum(r["time_ms"] for r in compiled.module_rows(1)) == pytest.approx(compiled.gpu_ms)
    assert ("1 SDPA calls as flash attention kernels, 1 of them hand-written attention that "
            "inductor rewrites") in compiled.footer()
    assert "rewrites" not in eager.footer()


def test_a_compiled_training_step_keeps_its_attention_as_written():
    """inductor's training patterns match the joint graph: a scale by a multiply without dropout
    is not rewritten there (its own count on the CPU is 0), so the estimate keeps it too."""
    import torch._inductor.config as inductor_config
    from torch._dynamo.utils import counters

    model = Timm().train()
    x, mask = _inputs()
    x.requires_grad_(True)
    counters.clear()
    torch._dynamo.reset()
    with inductor_config.patch(fx_graph_cache=False):
        torch.compile(model)(x, mask).sum().backward()
    assert counters["inductor"].get("fuse_attention", 0) == 0
    with torch.device("meta"):
        meta = Timm(seq=512)
    xm = torch.ones(8, 512, HEADS * D, device="meta", requires_grad=True)
    report = tgc.estimate(meta, (xm, torch.zeros(8, 1, 1, 512, device="meta")), device=H100,
                          dtype="bf16", mode="train", compiled=True)
    assert "sdpa_qk" not in {g.site.op for g in report.gemms}


def test_fp32_attention_is_not_rewritten_for_a_gpu():
    """inductor's ``_sfdp_params_check`` refuses fp32 on CUDA unless fp32 matmuls may use TF32."""
    compiled = _estimate("float32", True)
    assert [g.site.op for g in compiled.gemms] == ["linear", "matmul", "matmul"]
    assert any(o.op.op == "aten._softmax" for o in compiled.others)
    tf32 = _estimate("tf32", True)
    assert [g.site.op for g in tf32.gemms] == ["linear", "sdpa_qk", "sdpa_pv"]


def test_causal_where_mask_becomes_the_sdpa_mask():
    compiled = _estimate("bf16", True, Gpt2Old)
    (att,) = [o for o in compiled.others if o.op.attention is not None]
    # the (1, 1, 512, 512) bool mask the kernel reads: 262,144 bytes
    assert att.op.attention.mask_bytes == 262_144


def test_rewrite_works_on_a_copy():
    captured = capture(BertOld().eval(), _inputs())
    before = [n.target for n in captured.graph_module.graph.nodes]
    rewritten, count = rewrite_attention(captured, "bfloat16")
    assert count == 1 and rewritten is not captured
    assert [n.target for n in captured.graph_module.graph.nodes] == before
    targets = [n.target for n in rewritten.graph_module.graph.nodes]
    assert targets.count(torch.ops.aten.scaled_dot_product_attention.default) == 1
    assert torch.ops.aten._softmax.default not in targets
    assert rewrite_attention(captured, "float32") == (captured, 0)
