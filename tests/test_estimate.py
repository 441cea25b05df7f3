"""estimate(), annotate() and compare() on real model families, against FlopCounterMode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

import torch_gemm_cost as tgc
from torch_gemm_cost import api
from torch_gemm_cost.capture.core import capture
from torch_gemm_cost.predict import HybridPredictor, RooflinePredictor
from torch_gemm_cost.records import META_KEY, GemmBatch, extract

transformers = pytest.importorskip("transformers")


def ids(batch: int, seq: int) -> torch.Tensor:
    return torch.ones(batch, seq, dtype=torch.long, device="meta")


def gpt2(vocab_size: int = 1000) -> nn.Module:
    cfg = transformers.GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=4,
        vocab_size=vocab_size,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,  # inside the vocabulary: no config warning
    )
    return transformers.GPT2LMHeadModel(cfg)


def bert() -> nn.Module:
    cfg = transformers.BertConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=1000,
    )
    return transformers.BertForSequenceClassification(cfg)


def llama() -> nn.Module:
    cfg = transformers.LlamaConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=1000,
    )
    return transformers.LlamaForCausalLM(cfg)


def t5() -> nn.Module:
    cfg = transformers.T5Config(
        num_layers=2,
        num_decoder_layers=2,
        d_model=64,
        d_kv=16,
        num_heads=4,
        d_ff=128,
        vocab_size=1000,
    )
    return transformers.T5ForConditionalGeneration(cfg)


MODELS: dict[str, tuple[Callable[[], nn.Module], dict[str, Any]]] = {
    "gpt2": (gpt2, {}),
    "bert": (bert, {}),
    "llama": (llama, {}),
    "t5": (t5, {"decoder_input_ids": ids(2, 8)}),
}


def build(name: str) -> tuple[nn.Module, dict[str, Any]]:
    make, kwargs = MODELS[name]
    with torch.device("meta"):
        model = make()
    return model.eval(), dict(kwargs)


def flop_counter_total(model: nn.Module, args: tuple, kwargs: dict) -> int:
    """The oracle: FlopCounterMode over the same meta model (fake tensors, so library code that
    skips value checks while tracing does so here too). It counts every GEMM densely, SDPA as
    its two batched GEMMs."""
    with FakeTensorMode(allow_non_fake_inputs=True), FlopCounterMode(display=False) as counter:
        model(*args, **kwargs)
    return counter.get_total_flops()


@pytest.mark.parametrize("method", ["dispatch", "export"])
@pytest.mark.parametrize("name", list(MODELS))
def test_gemm_flops_equal_flop_counter(name: str, method: str) -> None:
    model, kwargs = build(name)
    kwargs["use_cache"] = False  # export refuses transformers' cache objects as outputs
    args = (ids(2, 16),)
    sites, _ = extract(capture(model, args, kwargs, method=method), "float32")
    assert sum(s.dense_flops for s in sites) == flop_counter_total(model, args, kwargs)
    assert {"linear" if name != "gpt2" else "conv1d", "sdpa_qk", "sdpa_pv"} <= {s.op for s in sites}


@pytest.mark.parametrize("method", ["dispatch", "export"])
@pytest.mark.parametrize("name", list(MODELS))
def test_train_gemm_flops_equal_flop_counter_with_backward(name: str, method: str) -> None:
    model, kwargs = build(name)
    model.train()
    kwargs["use_cache"] = False
    args = (ids(2, 16),)
    with FakeTensorMode(allow_non_fake_inputs=True), FlopCounterMode(display=False) as counter:
        model(*args, **kwargs).logits.sum().backward()  # autograd's dX/dW GEMMs, counted
    sites, _ = extract(
        capture(model, args, kwargs, train=True, method=method), "float32", mode="train"
    )
    assert sum(s.dense_flops for s in sites) == counter.get_total_flops()
    assert sum(s.phase != "forward" for s in sites) > sum(s.phase == "forward" for s in sites)


@pytest.mark.parametrize("name", list(MODELS))
def test_estimate_runs_with_default_kwargs(name: str) -> None:
    model, kwargs = build(name)
    report = tgc.estimate(model, (ids(2, 16),), kwargs, device="a100_sxm4_80gb")
    assert report.model == type(model).__name__ and report.dtype == "float32"
    assert report.gemm_ms > 0 and report.total_ms >= report.gemm_ms
    rows = report.to_dict()["rows"]
    assert rows and {"module", "op", "batch", "m", "n", "k", "dtype", "flops", "time_ms"} <= set(
        rows[0]
    )
    assert "% total" in str(report)
    assert {"elementwise", "view"} <= {o.op.op_class for o in report.others}
    assert {o.op.phase for o in report.others} == {"forward"}
    assert not report.unmodelled
    model.train()
    train = tgc.estimate(model, (ids(2, 16),), kwargs, device="a100_sxm4_80gb", mode="train")
    assert not train.unmodelled and train.total_ms > report.total_ms


def test_causal_attention_flops_halved_in_llama() -> None:
    model, _ = build("llama")
    report = tgc.estimate(model, (ids(1, 16),), {"use_cache": False}, device="h100_sxm5_80gb")
    qk = [g.site for g in report.gemms if g.site.op == "sdpa_qk"]
    # 16×16 causal scores keep 16·17/2 = 136; batch 1·4 heads, head dim 16: 2·4·16·136
    assert all(s.causal and s.flops == 2 * 4 * 16 * 136 for s in qk)
    bert_model, _ = build("bert")
    report = tgc.estimate(bert_model, (ids(1, 16),), device="h100_sxm5_80gb")
    assert not any(g.site.causal for g in report.gemms)  # an encoder attends both ways


def test_train_mode_adds_backward_gemms() -> None:
    model, kwargs = build("gpt2")
    report = tgc.estimate(model, (ids(2, 16),), kwargs, device="h100_sxm5_80gb", mode="train")
    phases = {g.site.phase for g in report.gemms}
    assert phases == {"forward", "backward_dx", "backward_dw"}
    fwd = sum(g.site.dense_flops for g in report.gemms if g.site.phase == "forward")
    bwd = sum(g.site.dense_flops for g in report.gemms if g.site.phase != "forward")
    # every A needs grad (even the first GEMM's input, the sum of trainable embeddings) and
    # every B is a trainable weight or such an activation: dA and dB each cost one forward
    assert bwd == 2 * fwd
    assert any(o.op.phase == "backward" for o in report.others)


class CountingPredictor(RooflinePredictor):
    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def predict(self, gemms, device):  # type: ignore[no-untyped-def]
        self.calls += 1
        return super().predict(gemms, device)


def test_compare_captures_once_and_predicts_in_one_batch_per_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, kwargs = build("bert")
    captures = []

    def counting_capture(*a: Any, **kw: Any) -> Any:
        captures.append(1)
        return capture(*a, **kw)

    monkeypatch.setattr(api, "capture", counting_capture)
    predictor = CountingPredictor()
    reports = tgc.compare(
        model,
        (ids(2, 16),),
        kwargs,
        devices=["h100_sxm5_80gb", "l4"],
        dtypes=[torch.bfloat16, "fp8"],
        predictor=predictor,
    )
    # per report, one batch of its GEMMs and one of their padded shapes (the padding advice)
    assert len(captures) == 1 and predictor.calls == 2 * 4
    assert [(r.device.id, r.dtype) for r in reports] == [
        ("h100_sxm5_80gb", "bfloat16"),
        ("h100_sxm5_80gb", "float8_e4m3fn"),
        ("l4", "bfloat16"),
        ("l4", "float8_e4m3fn"),
    ]
    assert reports[0].predictor == "counting"
    # fp8 halves the bytes, and on the same GPU the total cannot grow
    assert reports[1].total_ms <= reports[0].total_ms


def test_printing_and_explaining_a_report_predict_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The report renders what estimate() handed it: explain() reads the details kept from the
    one batched prediction, and neither it nor printing calls a predictor again."""
    with torch.device("meta"):
        model = gpt2(vocab_size=1001)  # 1001 fp16 logits a row: off the 16-byte loads
    report = tgc.estimate(model, (ids(2, 63),), device="a100_sxm4_80gb", dtype="fp16")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the report predicted again")

    monkeypatch.setattr(HybridPredictor, "predict", refuse)
    text = str(report)
    explained = report.explain("lm_head")
    lm_head = next(g for g in report.gemms if g.site.module == "lm_head")
    assert explained.details == dict(lm_head.details) and "waves" in explained.details
    assert explained.time_ms == lm_head.time_ms
    assert "padding advice (predicted):" in text  # vocab 1001: padding it saves time
    assert report.to_dict()["padding_advice"]


def test_annotate_returns_the_graph_with_records() -> None:
    model, _ = build("llama")
    gm = tgc.annotate(
        model, (ids(1, 8),), {"use_cache": False}, device="h100_sxm5_80gb", dtype="bf16"
    )
    assert isinstance(gm, torch.fx.GraphModule)
    linear = [n for n in gm.graph.nodes if "linear" in str(n.target)]
    site = linear[0].meta[META_KEY][0]
    assert isinstance(site, tgc.GemmSite) and site.dtype == "bfloat16"
    assert site.module == "model.layers.0.self_attn.q_proj"


def test_dtype_defaults_to_the_models() -> None:
    with torch.device("meta"):
        model = nn.Linear(16, 16).to(torch.float16)
    report = tgc.estimate(model, (torch.ones(4, 16, dtype=torch.float16),), device="t4")
    assert report.dtype == "float16"


def test_arguments_checked_at_the_boundary() -> None:
    model = nn.Linear(4, 4)
    x = (torch.ones(1, 4),)
    with pytest.raises(ValueError, match="h100"):
        tgc.estimate(model, x, device="h100_sxm")
    with pytest.raises(ValueError, match="'bf61'"):
        tgc.estimate(model, x, device="t4", dtype="bf61")
    with pytest.raises(ValueError, match="'training'.*did you mean 'train'"):
        tgc.estimate(model, x, device="t4", mode="training")
    with pytest.raises(ValueError, match="capture_method"):
        tgc.estimate(model, x, device="t4", capture_method="fx")
    with pytest.raises(ValueError, match="Tesla T4.*cannot run float8_e4m3fn GEMMs; nearest"):
        tgc.estimate(model, x, device="t4", dtype="fp8")  # before any capture
    with pytest.raises(ValueError, match="devices is empty"):
        tgc.compare(model, x, devices=[])


SEVEN_B = """
import json, resource, sys, time, torch, transformers, torch_gemm_cost as tgc
with torch.device("meta"):
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig())
ids = torch.ones(1, 2048, dtype=torch.long, device="meta")
start = time.perf_counter()
report = tgc.estimate(model, (ids,), {"use_cache": False}, device="h100_sxm5_80gb",
                      dtype=torch.bfloat16)
elapsed_s = time.perf_counter() - start
sites = [dict(op=g.site.op, flops=g.site.flops, causal=g.site.causal) for g in report.gemms]
# Linux keeps ru_maxrss across exec, so a child of a large pytest process would report the
# parent's peak; VmHWM belongs to this process's own address space
try:
    with open("/proc/self/status") as f:
        peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
except OSError:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
json.dump(dict(elapsed_s=elapsed_s, sites=sites, peak_rss_bytes=peak), sys.stdout)
"""


@pytest.mark.slow
def test_llama_7b_geometry() -> None:
    """Llama-2-7B geometry (LlamaConfig() defaults) on meta, 2048 tokens, in a fresh process
    so its peak memory is its own."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", SEVEN_B], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    sites = result["sites"]
    cfg = transformers.LlamaConfig()  # 32 layers, hidden 4096, MLP 11008, vocab 32000
    tokens = 2048
    projections = [s for s in sites if s["op"] == "linear"]
    attention = [s for s in sites if s["op"].startswith("sdpa")]
    assert len(projections) == 7 * 32 + 1 == 225  # q, k, v, o, gate, up, down per layer; lm_head
    h, f, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    proj_params = 32 * (4 * h * h + 3 * h * f) + h * v
    assert sum(s["flops"] for s in projections) == pytest.approx(2 * tokens * proj_params, rel=0.01)
    assert len(attention) == 64 and all(s["causal"] for s in attention)  # QKᵀ and PV per layer
    # NB: its wall time is measured by benchmarks/speed.py, not asserted here
    assert result["peak_rss_bytes"] < 4 * 2**30


def test_causal_attention_pays_for_its_unmasked_tiles_only() -> None:
    q = torch.ones(2, 4, 256, 64)

    class Attn(torch.nn.Module):
        def __init__(self, causal: bool) -> None:
            super().__init__()
            self.causal = causal

        def forward(self, q: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=self.causal)

    a100 = tgc.get_device("a100_sxm4_80gb")
    for predictor in (tgc.predict.RooflinePredictor(), tgc.predict.default_predictor()):
        dense = tgc.estimate(Attn(False), (q,), device=a100, predictor=predictor)
        causal = tgc.estimate(Attn(True), (q,), device=a100, predictor=predictor)
        for d, c in zip(dense.gemms, causal.gemms):
            # 256 queries keep 256·257/2 = 32,896 of 65,536 scores: a 0.50195 share of the work
            assert c.site.flops / c.site.dense_flops == pytest.approx(32896 / 65536)
            # priced as GEMMs (as on a CPU), the kept share scales the time
            t_dense, t_causal = predictor.predict(
                GemmBatch.from_sites([d.site, c.site]), a100).time_ms.tolist()
            assert t_causal == pytest.approx(t_dense * 32896 / 65536)
    # on the GPU each call is one attention kernel, which skips the masked key blocks: at 4096
    # tokens (32 query tiles of 128) a causal call runs 528 of 1,024 blocks per head
    long_q = torch.ones(2, 4, 4096, 64)
    dense = tgc.estimate(Attn(False), (long_q,), device=a100)
    causal = tgc.estimate(Attn(True), (long_q,), device=a100)
    (att_dense,) = [o.time_ms for o in dense.others if o.kernel]
    (att_causal,) = [o.time_ms for o in causal.others if o.kernel]
    assert 0.4 * att_dense < att_causal < 0.7 * att_dense


def test_fused_attention_keeps_its_scores_on_chip() -> None:
    q = torch.ones(1, 32, 4096, 64, dtype=torch.float16)
    report = tgc.estimate(
        lambda_module(lambda q: torch.nn.functional.scaled_dot_product_attention(q, q, q)),
        (q,),
        device="h100_sxm5_80gb",
        dtype="fp16",
        predictor=tgc.predict.RooflinePredictor(),
    )
    h100 = tgc.get_device("h100_sxm5_80gb")
    sites = [g.site for g in report.gemms]
    pred = RooflinePredictor().predict(GemmBatch.from_sites(sites), h100)
    for site, t, compute in zip(sites, pred.time_ms.tolist(), pred.bound):
        # the 32·4096·4096·2 B = 1 GiB score matrix never reaches DRAM: the fused kernel moves
        # Q, K, V and O once, 4 · 32·4096·64·2 B = 64 MiB, so each GEMM is compute-bound:
        # 2·32·4096·4096·64 = 68.7 GFLOP at 989.4 TFLOP/s = 0.0695 ms
        assert site.dram_bytes <= 64 * 2**20
        assert compute == "compute"
        assert t == pytest.approx(68.719476736e9 / h100.peak_flops_per_s("fp16") * 1e3)
    # in the report the two GEMMs are one attention kernel's, priced on its record
    assert [g.bound for g in report.gemms] == ["fused", "fused"]
    (kernel,) = [o for o in report.others if o.kernel]
    assert report.gpu_ms == pytest.approx(kernel.time_ms)


def lambda_module(fn):
    class Fn(torch.nn.Module):
        def forward(self, *args):
            return fn(*args)

    return Fn()


SMALL = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
         "num_attention_heads": 4}
EXPERTS = {"num_key_value_heads": 2, "vocab_size": 256, "num_experts_per_tok": 2}


def vit() -> nn.Module:
    return transformers.ViTForImageClassification(
        transformers.ViTConfig(**SMALL, image_size=32, patch_size=8)
    )


def resnet() -> nn.Module:
    return transformers.ResNetForImageClassification(transformers.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32, 48, 63], depths=[1, 1, 1, 1], num_labels=10))


def convnext() -> nn.Module:
    return transformers.ConvNextForImageClassification(transformers.ConvNextConfig(
        hidden_sizes=[16, 32, 40, 100], depths=[1, 1, 1, 1], num_labels=10))


def image(size: int) -> Callable[[], tuple[tuple, dict]]:
    return lambda: ((torch.ones(2, 3, size, size, device="meta"),), {})


REACH: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple[tuple, dict]]]] = {
    "mixtral": (lambda: transformers.MixtralForCausalLM(transformers.MixtralConfig(
        **SMALL, **EXPERTS, num_local_experts=4)), lambda: ((ids(2, 16),), {})),
    "qwen3_moe": (lambda: transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
        **SMALL, **EXPERTS, num_experts=4, moe_intermediate_size=32)), lambda: ((ids(2, 16),), {})),
    "gpt_oss": (lambda: transformers.GptOssForCausalLM(transformers.GptOssConfig(
        **SMALL, **EXPERTS, num_local_experts=4, head_dim=16)), lambda: ((ids(2, 16),), {})),
    "vit": (vit, image(32)),
    "resnet": (resnet, image(64)),
    "convnext": (convnext, image(64)),
    "whisper": (lambda: transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(
        encoder_layers=1, decoder_layers=1, d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128,
        encoder_attention_heads=4, decoder_attention_heads=4, vocab_size=256, num_mel_bins=16,
        max_source_positions=20, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        decoder_start_token_id=1)),
        lambda: ((), {"input_features": torch.ones(2, 16, 40, device="meta"),
                      "decoder_input_ids": ids(2, 8)})),
}


@pytest.mark.parametrize("mode", ["inference", "train"])
@pytest.mark.parametrize("name", list(REACH))
def test_moe_and_convolution_models_leave_no_op_unmodelled(name: str, mode: str) -> None:
    make, inputs = REACH[name]
    with torch.device("meta"):
        model = make()
    args, kwargs = inputs()
    report = tgc.estimate(model, args, kwargs, device="h100_sxm5_80gb", dtype="bf16", mode=mode)
    assert not report.unmodelled
    ops = {g.site.op for g in report.gemms}
    assert ("grouped_mm" in ops) == (name in ("mixtral", "qwen3_moe", "gpt_oss"))
    assert ("convolution" in ops) == (name in ("vit", "whisper", "resnet", "convnext"))
    # advice re-predicts every padded shape of every model; where it names a config field,
    # the model rebuilt with that field padded is estimated afresh and must come out faster,
    # by the GEMM time the advice predicted
    for a in report.padding_advice():
        if a.config_field is None or not hasattr(model, "config"):
            continue
        cfg = model.config.to_dict()
        field, _, index = a.config_field.partition("[")
        if index:
            cfg[field] = list(cfg[field])
            cfg[field][int(index.rstrip("]"))] = a.suggested
        else:
            cfg[field] = a.suggested
        with torch.device("meta"):
            padded = type(model)(type(model.config).from_dict(cfg))
        again = tgc.estimate(padded, args, kwargs, device="h100_sxm5_80gb", dtype="bf16",
                             mode=mode)
        assert again.gpu_ms < report.gpu_ms, a
        assert again.gemm_ms == pytest.approx(
            report.gemm_ms - a.gemm_ms_before + a.gemm_ms_after, rel=0.02), a
        break  # the first such advice of each model keeps the test fast


@pytest.mark.parametrize(("make", "depthwise_taps"), [(resnet, 0), (convnext, 7 * 7)],
                         ids=["resnet", "convnext"])
def test_cnn_flops_equal_flop_counter(make: Callable[[], nn.Module], depthwise_taps: int) -> None:
    # the GEMMs are every convolution (stem, strided, 1x1 shortcuts, ConvNeXt's patchify and
    # downsampling) and the Linear layers. ConvNeXt's 7x7 depthwise convolutions are no GEMM
    # but stencils (memory-bound records); FlopCounterMode counts them as 2 FLOPs per tap per
    # output element
    with torch.device("meta"):
        model = make().eval()
    x = torch.ones(2, 3, 64, 64, device="meta")
    sites, others = extract(capture(model, (x,)), "float32")
    stencils = [o for o in others if o.op == "aten.convolution"]
    assert bool(stencils) == bool(depthwise_taps)
    depthwise = sum(2 * depthwise_taps * o.numel for o in stencils)
    assert sum(s.dense_flops for s in sites) + depthwise == flop_counter_total(model, (x,), {})


def test_vit_flops_equal_flop_counter() -> None:
    with torch.device("meta"):
        model = vit().eval()
    x = torch.ones(2, 3, 32, 32, device="meta")
    sites, _ = extract(capture(model, (x,)), "float32")
    # the patch embedding is a Conv2d(3 -> 64, 8×8, stride 8): 2·16 patches × 64 × 3·8·8 taps
    patch = next(s for s in sites if s.op == "convolution")
    assert patch.shape == (1, 32, 64, 192)
    assert sum(s.dense_flops for s in sites) == flop_counter_total(model, (x,), {})


def test_progress_shows_on_stderr_only_when_asked(capsys, monkeypatch) -> None:
    from tqdm import tqdm

    model, kwargs = build("gpt2")
    run = {"devices": ["a100_sxm4_80gb", "l4"], "predictor": RooflinePredictor()}
    tgc.compare(model, (ids(2, 16),), kwargs, **run)
    assert capsys.readouterr().err == ""
    # shown from the first step rather than after a second, so this short run shows it
    monkeypatch.setattr(api, "tqdm", lambda *a, **k: tqdm(*a, **{**k, "delay": 0,
                                                                  "mininterval": 0}))
    tgc.compare(model, (ids(2, 16),), kwargs, progress=True, **run)
    # the capture, then pricing and padding advice on each of 2 devices: 1 + 2·2 = 5 steps
    err = capsys.readouterr().err
    assert "estimating" in err and "5/5" in err
