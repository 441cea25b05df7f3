"""Padding advice: hand-worked savings under an alignment-aware roofline, config-field mapping,
grouping of repeated layers, and the invariant that advice is never predicted slower."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_report import gpt2_sites, linear_site, make_report

from torch_gemm_cost import get_device
from torch_gemm_cost.advise import PaddingAdvice, padded_size, padding_advice
from torch_gemm_cost.capture.core import config_dims
from torch_gemm_cost.predict import GemmBatch, Prediction, RooflinePredictor
from torch_gemm_cost.predict.base import bound_of
from torch_gemm_cost.records import alignment_bytes


class AlignmentRoofline:
    """Test double: the roofline, with compute slowed by 16 / (narrowest operand load in bytes).

    A 2-byte-aligned operand runs compute 8× slower; a 16-byte-aligned one at the dtype peak.
    """

    name = "alignment-roofline"
    version = "test"

    def predict(self, gemms: GemmBatch, device) -> Prediction:
        base = RooflinePredictor().predict(gemms, device)
        align = torch.minimum(torch.minimum(gemms.a_align_bytes, gemms.b_align_bytes),
                              gemms.c_align_bytes)  # (N,)
        compute = base.details["compute_ms"] * 16.0 / align
        memory = base.details["memory_ms"]
        return Prediction(torch.maximum(compute, memory), bound=bound_of(compute, memory),
                          details={"compute_ms": compute, "memory_ms": memory})


class WaveRoofline:
    """Test double: 128×128 tiles, one per SM per wave; a wave costs a full tile's FLOPs at peak."""

    name = "wave-roofline"
    version = "test"

    def predict(self, gemms: GemmBatch, device) -> Prediction:
        tiles = gemms.batch * torch.ceil(gemms.m / 128) * torch.ceil(gemms.n / 128)  # (N,)
        waves = tiles / device.sm_count
        full = torch.ceil(waves)
        per_sm = 312e12 / device.sm_count
        wave_ms = 2 * 128 * 128 * gemms.k / per_sm * 1e3
        time = full * wave_ms
        return Prediction(time, bound=("compute",) * len(time),
                          details={"waves": waves, "last_wave_fill": waves - full + 1.0})


@pytest.fixture(scope="module")
def gpt2_advice() -> list[PaddingAdvice]:
    return make_report(gpt2_sites(), AlignmentRoofline()).padding_advice()


def test_gpt2_vocab_advice_by_hand(gpt2_advice):
    top = gpt2_advice[0]
    assert top.config_field == "vocab_size" and top.current == 50257
    assert top.modules == ("lm_head",) and top.dim == "out_features (n)"
    # 50257·2 B = 100514 B: C rows allow 2-byte loads -> compute 8× slower:
    #   8 · 2·8192·50257·768 / 312e12 = 8 · 2.026857 ms = 16.214856 ms
    # 50264 = 8·6283 -> 16-byte loads: 2·8192·50264·768 / 312e12 = 2.027139 ms
    assert top.suggested == 50264 and top.multiple == 8
    assert top.gemm_ms_before == pytest.approx(16.214856, rel=1e-6)
    assert top.gemm_ms_after == pytest.approx(2.027139, rel=1e-6)
    assert top.saving_ms == pytest.approx(16.214856 - 2.027139, rel=1e-6)
    # extra FLOPs: 7 / 50257 = 0.01393 %
    assert top.extra_flops_pct == pytest.approx(100 * 7 / 50257, rel=1e-9)
    assert top.cause_kind == "alignment"
    assert "2-byte" in top.cause and "16-byte" in top.cause and "100514" in top.cause


def test_padded_model_is_predicted_faster(gpt2_advice):
    top = gpt2_advice[0]
    padded = make_report(gpt2_sites(vocab=top.suggested), AlignmentRoofline())
    before = make_report(gpt2_sites(), AlignmentRoofline())
    assert padded.gpu_ms == pytest.approx(top.model_ms_after, rel=1e-9)
    assert padded.gpu_ms < before.gpu_ms


def test_roofline_never_advises_padding():
    # pure roofline: padding only adds FLOPs and bytes, so nothing can be faster
    assert make_report(gpt2_sites(), RooflinePredictor()).padding_advice() == []


def test_repeated_layers_are_grouped():
    sites = []
    for i in range(4):
        sites.append(linear_site(f"model.layers.{i}.mlp.down_proj", 4096, 4096, 11001))
    report = make_report(sites, AlignmentRoofline(), config={})
    [advice] = report.padding_advice()
    assert advice.modules == ("4 × mlp.down_proj",)
    assert advice.config_field is None and advice.dim == "in_features (k)"
    assert advice.gemms == 4 and advice.current == 11001 and advice.suggested % 8 == 0


def test_padding_that_only_adds_work_is_not_advised():
    # WaveRoofline, 130 tokens × 128 out features on 108 SMs: ⌈130/128⌉·⌈128/128⌉ = 2 tiles, one
    # wave. Padding 130 to 136, 144, 160, 192 or 256 keeps 2 tiles and one wave: no saving.
    sites = [linear_site("fc", 130, 128, 4096)]
    report = make_report(sites, WaveRoofline(), config={})
    assert report.padding_advice() == []


def test_config_dims_from_hf_configs():
    transformers = pytest.importorskip("transformers")
    gpt2 = config_dims(transformers.GPT2Config())
    assert gpt2 == {"vocab_size": 50257, "hidden_size": 768, "intermediate_size": 3072,
                    "num_attention_heads": 12, "head_dim": 64}
    llama = config_dims(transformers.LlamaConfig(num_key_value_heads=8))
    assert llama["intermediate_size"] == 11008
    assert llama["num_key_value_heads × head_dim"] == 8 * 128
    convnext = config_dims(transformers.ConvNextConfig(hidden_sizes=[40, 80, 100, 200]))
    assert {k: v for k, v in convnext.items() if k.startswith("hidden_sizes")} == {
        "hidden_sizes[0]": 40, "hidden_sizes[1]": 80, "hidden_sizes[2]": 100,
        "hidden_sizes[3]": 200}
    assert config_dims(transformers.ResNetConfig())["embedding_size"] == 64
    assert config_dims({"hidden_sizes": [64, True, -1, "x"]}) == {"hidden_sizes[0]": 64}


def test_padded_size():
    assert padded_size(50257, 64) == 50304  # 64 · 786
    assert padded_size(50257, 8) == 50264  # 8 · 6283
    assert padded_size(4096, 128) == 4096


dims = st.integers(min_value=8, max_value=3000)


@settings(max_examples=40, deadline=None)
@given(m=dims, n=dims, k=dims, predictor=st.sampled_from([AlignmentRoofline(), WaveRoofline()]))
def test_advice_is_never_predicted_slower(m, n, k, predictor):
    sites = [linear_site("a", m, n, k), linear_site("b", m, k, n)]
    report = make_report(sites, predictor, config={})
    for a in report.padding_advice():
        # re-predict the padded model independently of advise's batched path; a dim that is no
        # config field (nor the token count) is padded in the advised modules only
        scope = {s.module for s in sites} if a.config_field else set(a.modules)
        padded = [
            dataclasses.replace(
                s,
                m=a.suggested if s.m == a.current else s.m,
                n=a.suggested if s.n == a.current else s.n,
                k=a.suggested if s.k == a.current else s.k,
            ) if s.module in scope else s
            for s in sites
        ]
        padded = [
            dataclasses.replace(s, a_align_bytes=alignment_bytes(s.k, 2),
                                b_align_bytes=alignment_bytes(s.k, 2),
                                c_align_bytes=alignment_bytes(s.n, 2),
                                flops=2 * s.m * s.n * s.k,
                                dram_bytes=2 * (s.m * s.k + s.n * s.k + s.m * s.n))
            for s in padded
        ]
        again = make_report(padded, predictor, config={})
        assert again.gpu_ms == pytest.approx(a.model_ms_after, rel=1e-9)
        assert again.gpu_ms < report.gpu_ms
        # the advice's own GEMM figures are the re-predicted times of the GEMMs it pads
        changed = [i for i, (s, t) in enumerate(zip(sites, padded))
                   if (s.m, s.n, s.k) != (t.m, t.n, t.k)]
        before = sum(report.gemms[i].time_ms for i in changed)
        after = sum(again.gemms[i].time_ms for i in changed)
        assert (before, after) == pytest.approx((a.gemm_ms_before, a.gemm_ms_after), rel=1e-9)
        assert after < before


def test_advice_of_no_gemm_is_empty():
    assert padding_advice((), RooflinePredictor(), get_device("l4"), model_ms=1.0) == []


class TileChoiceRoofline:
    """Test double for wave quantization: 128×64 tiles when n is a multiple of 64, else 128×16
    tiles at a quarter of the efficiency (16/64); one tile per SM per wave, time = full waves."""

    name = "tile-choice"
    version = "test"

    def predict(self, gemms: GemmBatch, device) -> Prediction:
        tile_n = torch.where(gemms.n % 64 == 0, 64.0, 16.0).to(torch.float64)  # (N,)
        tiles = gemms.batch * torch.ceil(gemms.m / 128) * torch.ceil(gemms.n / tile_n)
        waves = tiles / device.sm_count
        eff = tile_n / 64
        wave_ms = 2 * 128 * tile_n * gemms.k / (312e12 / device.sm_count * eff) * 1e3
        time = torch.ceil(waves) * wave_ms
        return Prediction(time, bound=("compute",) * len(time), details={
            "waves": waves, "last_wave_fill": waves - torch.ceil(waves) + 1.0,
            "tile_m": torch.full_like(waves, 128.0), "tile_n": tile_n})


def test_wave_quantization_cause_by_hand():
    # n = 1000 on 108 SMs: 128×16 tiles, ⌈4096/128⌉·⌈1000/16⌉ = 32·63 = 2016 tiles = 18.67 waves,
    # 19 waves × (2·128·16·4096 / (312e12/108 · 0.25)) = 19 · 0.0232 ms = 0.4412 ms.
    # n = 1024 (next multiple of 32): 128×64 tiles, 32·16 = 512 tiles = 4.74 waves,
    # 5 × (2·128·64·4096 / (312e12/108)) = 5 · 0.0232 ms = 0.1161 ms. 1008 (multiple of 8, 16)
    # keeps 16-wide tiles and 2016 tiles: no saving.
    sites = [linear_site("proj", 4096, 1000, 4096)]
    [advice] = make_report(sites, TileChoiceRoofline(), config={}).padding_advice()
    wave_ms = 2 * 128 * 64 * 4096 / (312e12 / 108) * 1e3
    assert (advice.suggested, advice.multiple) == (1024, 32)
    assert advice.gemm_ms_before == pytest.approx(19 * wave_ms, rel=1e-9)
    assert advice.gemm_ms_after == pytest.approx(5 * wave_ms, rel=1e-9)
    assert advice.cause_kind == "wave quantization"
    assert "18.67 waves: the last wave is 67% full" in advice.cause
    assert "at 1024: 4.74 waves, the last 74% full" in advice.cause


class WholeWaves(TileChoiceRoofline):
    """The same, with waves counted whole, as the hybrid reports them (⌈tiles / slots⌉)."""

    def predict(self, gemms: GemmBatch, device) -> Prediction:
        pred = super().predict(gemms, device)
        pred.details["waves"] = torch.ceil(pred.details["waves"])
        return pred


def test_wave_cause_reads_whole_wave_counts_as_tiles_per_slot():
    # 19 whole waves with the last 67% full is 18.67 waves of tiles; 5 with 74% is 4.74
    sites = [linear_site("proj", 4096, 1000, 4096)]
    [advice] = make_report(sites, WholeWaves(), config={}).padding_advice()
    assert "18.67 waves: the last wave is 67% full; at 1024: 4.74 waves, the last 74% full" \
        in advice.cause
    assert "4.74 waves, the last 74% full" in advice.cause
    assert "(tile n 16 -> 64)" in advice.cause  # the stage the padding moved
    # 1000 -> 1024: 2.4% more FLOPs
    assert advice.extra_flops_pct == pytest.approx(2.4)


def test_training_pads_every_phase_of_the_vocab_gemm():
    transformers = pytest.importorskip("transformers")
    import torch_gemm_cost as tgc

    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1))
    ids = torch.ones(1, 128, dtype=torch.long, device="meta")
    predictor = AlignmentRoofline()
    report = tgc.estimate(model, (ids,), kwargs={"use_cache": False}, device="a100_sxm4_80gb",
                          dtype="fp16", mode="train", predictor=predictor)
    top = next(a for a in report.padding_advice() if a.config_field == "vocab_size")
    # forward (n = vocab), dX (k = vocab) and dW (m = vocab) of lm_head all change
    assert top.gemms == 3 and top.current == 50257
    phases = {g.site.phase for g in report.gemms if 50257 in g.site.shape}
    assert phases == {"forward", "backward_dx", "backward_dw"}


def test_convolutions_are_padded_along_their_channels_only():
    import torch_gemm_cost as tgc

    class Stem(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.conv2 = torch.nn.Conv2d(64, 100, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv2(self.conv1(x))

    with torch.device("meta"):
        model = Stem()
    x = torch.ones(8, 3, 64, 64, device="meta")
    for mode in ("inference", "train"):
        report = tgc.estimate(model, (x,), device="a100_sxm4_80gb", dtype="fp16", mode=mode,
                              predictor=AlignmentRoofline())
        advice = report.padding_advice()
        # conv1's k is 3 channels × 7·7 taps = 147, misaligned but not a size anyone sets;
        # conv2's 100 filters are, and every phase of conv2 holds them
        assert [(a.dim, a.current, a.suggested) for a in advice] == [
            ("out_channels (n)", 100, 104)]
        assert advice[0].gemms == (1 if mode == "inference" else 3)


def test_a_conv_width_is_padded_in_the_out_channels_and_the_next_convs_in_channels():
    import torch_gemm_cost as tgc

    class Pair(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(64, 63, 3, padding=1, bias=False)
            self.conv2 = torch.nn.Conv2d(63, 64, 3, padding=1, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv2(self.conv1(x))

    with torch.device("meta"):
        model = Pair()
    x = torch.ones(8, 64, 32, 32, device="meta")
    report = tgc.estimate(model, (x,), device="a100_sxm4_80gb", dtype="fp16",
                          predictor=AlignmentRoofline())
    [advice] = report.padding_advice()
    # m = 8·32·32 = 8192 positions. conv1: n = 63 filters, k = 64 channels · 9 taps = 576; its
    # C rows of 63·2 B allow 2-byte loads. conv2: n = 64, k = 63 · 9 = 567; A and B rows of
    # 567·2 B likewise. Both run 2·8192·63·576 = 2·8192·64·567 = 594,542,592 FLOPs, 8x slow at
    # 312 TFLOP/s: 8 · 1.90558523e-3 ms = 1.52446818e-2 ms each (compute-bound: 2,153,344 B at
    # 2.039 TB/s is 1.056e-3 ms). With 64 channels both are 16-byte aligned:
    # 2·8192·64·576 / 312e12 = 1.93583261e-3 ms each.
    assert advice.modules == ("conv1", "conv2") and advice.gemms == 2
    assert advice.dim == "out_channels (n) / in_channels (k)"
    assert (advice.current, advice.suggested) == (63, 64)
    assert advice.gemm_ms_before == pytest.approx(2 * 1.52446818e-2, rel=1e-6)
    assert advice.gemm_ms_after == pytest.approx(2 * 1.93583261e-3, rel=1e-6)
    assert advice.gemm_ms_before == pytest.approx(sum(g.time_ms for g in report.gemms), rel=1e-9)
    # the cause quotes the costliest padded GEMM's own axis (conv1's 63 filters)
    assert advice.cause.startswith("alignment: 63 × 2 B = 126 B rows allow only 2-byte loads")
    # training pads every phase of both: conv1 forward and dW (its input needs no grad),
    # conv2 forward, dX and dW
    train = tgc.estimate(model, (x,), device="a100_sxm4_80gb", dtype="fp16", mode="train",
                         predictor=AlignmentRoofline())
    [advice] = train.padding_advice()
    assert (advice.current, advice.suggested, advice.gemms) == (63, 64, 5)


def test_numbered_layers_of_a_sequential_are_named_not_grouped():
    # nn.Sequential(Linear, GELU, Linear) records its GEMMs under "0" and "2": the same
    # template "*" as repeats, but with no name a "2 × *" label would say nothing
    sites = [linear_site("0", 8192, 4097, 1024), linear_site("2", 8192, 1024, 4097)]
    [advice] = make_report(sites, AlignmentRoofline(), config={}).padding_advice()
    assert advice.modules == ("0", "2")
    many = [linear_site(str(i), 8192, 4097 if i % 2 else 1024, 1024 if i % 2 else 4097)
            for i in range(6)]
    [advice] = make_report(many, AlignmentRoofline(), config={}).padding_advice()
    assert advice.modules == ("0, …, 5 (6 layers)",)


def test_a_width_one_layer_writes_and_its_sibling_reads_is_padded_in_both():
    # mlp.fc1 writes 4097 features that mlp.fc2 reads: padding one alone would not fit the
    # other, so the advice pads both. AlignmentRoofline on the A100 (312 TFLOP/s fp16):
    #   fc1: C rows 4097·2 B allow 2-byte loads; fc2: A and B rows (k = 4097) likewise, so each
    #   runs 8× slow: 8 · 2·8192·4097·1024 / 312e12 = 8 · 0.2203085 = 1.7624680 ms
    #   at 4104 (= 8·513) both are 16-byte aligned: 2·8192·4104·1024 / 312e12 = 0.2206849 ms
    sites = [linear_site("mlp.fc1", 8192, 4097, 1024), linear_site("mlp.fc2", 8192, 1024, 4097)]
    report = make_report(sites, AlignmentRoofline(), config={})
    [advice] = report.padding_advice()
    assert advice.modules == ("mlp.fc1", "mlp.fc2") and advice.gemms == 2
    assert advice.dim == "out_features (n) / in_features (k)"
    assert (advice.current, advice.suggested) == (4097, 4104)
    assert advice.gemm_ms_before == pytest.approx(2 * 1.7624680, rel=1e-6)
    assert advice.gemm_ms_after == pytest.approx(2 * 0.2206849, rel=1e-6)
    # the two rows of the report are the padded GEMMs' time before
    assert advice.gemm_ms_before == pytest.approx(sum(g.time_ms for g in report.gemms), rel=1e-9)
    assert advice.saving_ms == pytest.approx(advice.gemm_ms_before - advice.gemm_ms_after, rel=1e-9)


def test_fp8_pads_to_a_multiple_of_16_and_names_its_bf16_output():
    import torch_gemm_cost as tgc

    # lm_head: x (8192, 1024) · Wᵀ with W (50257, 1024). In bf16, C's 50257·2 B rows are the
    # only misaligned operand and 50264 = 8·6283 aligns them. fp8 kernels take no dim off a
    # multiple of 16, so fp8 pads to 50272 = 16·3142; its C is written in bf16 (2 B), so the
    # cause quotes 2-byte elements, not the 1-byte inputs
    with torch.device("meta"):
        head = torch.nn.Linear(1024, 50257, bias=False)
    x = torch.ones(8192, 1024, device="meta")
    suggested = {}
    for dtype in ("bf16", "fp8"):
        report = tgc.estimate(head, (x,), device="h100_sxm5_80gb", dtype=dtype,
                              predictor=AlignmentRoofline())
        [advice] = report.padding_advice()
        suggested[dtype] = advice.suggested
        assert advice.cause.startswith("alignment: 50257 × 2 B = 100514 B rows allow only "
                                       "2-byte loads (1 of 8 elements per 16-byte vector")
    assert suggested == {"bf16": 50264, "fp8": 50272}


@pytest.mark.parametrize("mode", ["inference", "train"])
def test_eager_attention_sequence_padding_is_marked_and_sdpa_gets_none(mode):
    transformers = pytest.importorskip("transformers")
    import torch_gemm_cost as tgc
    from torch_gemm_cost.advise import EAGER_ONLY, SEQUENCE

    # one ViT layer on 224² images in 16-pixel patches: 14² + 1 = 197 tokens, 2 heads of 32.
    # Eager attention writes its scores as rows of 197 keys: 197 × 2 B = 394 B allow 2-byte
    # loads, which AlignmentRoofline runs 8× slow; 200 × 2 B = 400 B allow 16-byte ones. Every
    # other dim (64, 32, 128, 768, 2 labels) is aligned or too small to pad.
    config = transformers.ViTConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=128, num_labels=2)
    pixels = torch.ones(2, 3, 224, 224, device="meta")
    advice = {}
    for attention in ("eager", "sdpa"):
        config._attn_implementation = attention
        with torch.device("meta"):
            model = transformers.ViTForImageClassification(config)
        report = tgc.estimate(model, (pixels,), device="a100_sxm4_80gb", dtype="fp16",
                              mode=mode, predictor=AlignmentRoofline())
        advice[attention] = report.padding_advice()
        attention_gemms = [g for g in report.gemms if 197 in g.site.shape[1:]]
        if attention == "eager":
            [a] = advice["eager"]
            assert a.eager_attention_only and a.config_field == SEQUENCE
            # dKᵀ = Qᵀ·dS holds the keys on n
            assert (a.current, a.suggested, a.dim) == (197, 200, "sequence (m)" if mode ==
                                                       "inference" else "sequence (m) / sequence (n)")
            assert a.modules == ("vit.layers.0.attention",)
            assert a.cause.startswith(EAGER_ONLY + "alignment: 197 × 2 B = 394 B rows")
            # QKᵀ and PV, and in training the two backward GEMMs of each
            assert a.gemms == len(attention_gemms) == (2 if mode == "inference" else 6)
            assert a.gemm_ms_before == pytest.approx(
                sum(g.time_ms for g in attention_gemms), rel=1e-9)
        else:
            # a GPU runs the SDPA call as one fused kernel: its GEMM records hold 197 but have
            # no time of their own, and no sequence length is advised
            assert {g.bound for g in attention_gemms if g.site.phase == "forward"} == {"fused"}
            assert advice["sdpa"] == []
