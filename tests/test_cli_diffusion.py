"""``estimate --diffusers-config``: one denoising step of a tiny UNet (SD-style and SDXL-style)
and a tiny DiT, built from a diffusers config on the meta device; the UNet's GEMM FLOPs equal
FlopCounterMode's. Needs the ``diffusion`` extra; without it these tests skip, and the command
says what to install."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

import torch_gemm_cost as tgc
from torch_gemm_cost.cli import UsageError, diffusion, main
from torch_gemm_cost.cli.tasks import Sizes

UNET: dict[str, Any] = {
    "_class_name": "UNet2DConditionModel", "sample_size": 8, "in_channels": 4,
    "out_channels": 4, "layers_per_block": 1, "block_out_channels": [32, 64],
    "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"], "cross_attention_dim": 32,
    "attention_head_dim": 8, "norm_num_groups": 8,
}
# SDXL's conditioning: a pooled text embedding of 16 and six size ids of 8 each, 16 + 6·8 = 64
SDXL = {**UNET, "addition_embed_type": "text_time", "addition_time_embed_dim": 8,
        "projection_class_embeddings_input_dim": 64}
DIT = {"_class_name": "DiTTransformer2DModel", "num_attention_heads": 2, "attention_head_dim": 8,
       "in_channels": 4, "num_layers": 1, "sample_size": 8, "patch_size": 2}


def config_file(tmp_path: Path, config: dict[str, Any]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_without_diffusers_the_error_names_the_extra(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "diffusers", None)  # import diffusers raises ImportError
    # no index has torch-gemm-cost: the hint installs diffusers, or the extra from a checkout
    with pytest.raises(UsageError, match=r"pip install diffusers \(from a checkout of "
                       r"torch_gemm_cost: pip install -e '\.\[diffusion\]'\)"):
        diffusion.build(config_file(tmp_path, UNET), Sizes(1))


@pytest.fixture
def diffusers() -> Any:
    return pytest.importorskip(
        "diffusers", reason="diffusers is not installed (from a checkout: pip install -e '.[diffusion]')")


@pytest.mark.parametrize(("config", "shapes"), [
    # --image-size 64 at the VAE's factor 8 is an 8² latent. conv_in, a 3×3 Conv2d(4 -> 32):
    # 2·8·8 = 128 positions × 32 filters over 4·9 = 36 taps. Cross-attention: 8 heads of
    # 32/8 = 4 over 77 text tokens, 2·8 = 16 (batch × heads) GEMMs of 64 × 77 × 4
    (UNET, ("1×128×32×36", "16×64×77×4")),
    # SDXL's add_embedding.linear_1: 2 × (16 + 6·8 = 64) in, 4·32 = 128 time channels out
    (SDXL, ("1×128×32×36", "1×2×128×64")),
    # DiT's 2×2 patch embedding on the 8² latent: 2·16 patches × 16 channels over 4·2·2 = 16
    (DIT, ("1×32×16×16",)),
], ids=["unet", "sdxl", "dit"])
def test_a_denoising_step_estimates(capsys, tmp_path, diffusers, config, shapes) -> None:
    rc, out, err = run(capsys, "estimate", "--diffusers-config", config_file(tmp_path, config),
                       "--batch", "2", "--image-size", "64", "--predictor", "roofline")
    assert rc == 0, err
    assert "; 0 unmodelled ops" in out
    for shape in shapes:
        assert shape in out


def test_tiny_unet_flops_equal_flop_counter(tmp_path, diffusers) -> None:
    model, args, kwargs = diffusion.build(config_file(tmp_path, UNET), Sizes(2))
    # the config's own sample_size (8) is the latent when no --image-size is given
    assert args[0].shape == (2, 4, 8, 8) and kwargs["encoder_hidden_states"].shape == (2, 77, 32)
    report = tgc.estimate(model, args, kwargs, device="a100_sxm4_80gb", dtype="bf16")
    assert not report.unmodelled
    with FakeTensorMode(allow_non_fake_inputs=True), FlopCounterMode(display=False) as counter:
        model(*args, **kwargs)
    # convolutions as implicit GEMMs and SDPA as its two GEMMs on both sides
    assert report.total_flops == counter.get_total_flops()


@pytest.mark.parametrize(("config", "sizes", "message"), [
    (UNET, Sizes(1, image_size=500),
     "--image-size 500 is not a multiple of the VAE factor 8; use 496 or 504"),
    ({**UNET, "_class_name": "UNet2DConditionModle"}, Sizes(1),
     "did you mean 'UNet2DConditionModel'?"),
    (DIT, Sizes(1, seq=77), "--seq does not apply to a DiT"),
    (DIT, Sizes(1, image_size=8), "a latent of 1 pixels a side does not split into patches"),
    (UNET, Sizes(1, audio_s=30), "--audio-s does not apply to --diffusers-config"),
])
def test_bad_sizes_say_what_fits(tmp_path, diffusers, config, sizes, message) -> None:
    with pytest.raises(UsageError, match=message):
        diffusion.build(config_file(tmp_path, config), sizes)
