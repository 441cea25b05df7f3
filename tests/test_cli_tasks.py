"""``estimate --hf-config --task`` for every task, ``--diffusers-config``, and a vision model from
a local ``pkg.module:function``: each builds a tiny config on the meta device and estimates it
with no unmodelled op; ResNet-50, ViT-B/16, Whisper-tiny and a tiny UNet, built from their
configs with the inputs the command line makes, have FlopCounterMode's GEMM FLOPs."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from test_cli_estimate import run
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

import torch_gemm_cost as tgc
from torch_gemm_cost.cli import UsageError, tasks

transformers = pytest.importorskip("transformers")


def write(tmp_path: Path, name: str, config: Any) -> str:
    """An HF config (or a plain dict, for diffusers) as the JSON file a user would hand over."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config if isinstance(config, dict) else config.to_dict()))
    return str(path)


TEXT = {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64,
        "num_attention_heads": 2, "vocab_size": 128, "max_position_embeddings": 64}
VISION = {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64,
          "num_attention_heads": 2, "image_size": 32, "patch_size": 8}


def whisper(**sizes: int) -> Any:
    return transformers.WhisperConfig(**{
        "encoder_layers": 1, "decoder_layers": 1, "d_model": 32, "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
        "vocab_size": 128, "num_mel_bins": 16, "max_source_positions": 50,
        "max_target_positions": 32, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
        "decoder_start_token_id": 1, **sizes})


def llava() -> Any:
    return transformers.LlavaConfig(
        vision_config=transformers.CLIPVisionConfig(**VISION).to_dict(),
        text_config=transformers.LlamaConfig(**TEXT).to_dict(), image_token_id=127,
        architectures=["LlavaForConditionalGeneration"])


# task -> (config, extra flags, the model class built, a B×M×N×K the table must hold)
CASES: dict[str, tuple[Any, tuple[str, ...], str, str]] = {
    # 2 × 16 tokens through the 128-word head: B×M×N×K = 1×32×128×32
    "causal-lm": (transformers.LlamaConfig(**TEXT), ("--seq", "16"), "LlamaForCausalLM",
                  "1×32×128×32"),
    "masked-lm": (transformers.BertConfig(**TEXT), ("--seq", "16"), "BertForMaskedLM",
                  "1×32×128×32"),
    # BERT's token classifier: 2 labels per token
    "token-cls": (transformers.BertConfig(**TEXT), ("--seq", "16"), "BertForTokenClassification",
                  "1×32×2×32"),
    "seq-cls": (transformers.BertConfig(**TEXT), ("--seq", "16"),
                "BertForSequenceClassification", "1×2×2×32"),
    "pretraining": (transformers.BertConfig(**TEXT), ("--seq", "16"), "BertForPreTraining",
                    "1×32×128×32"),
    # encoder and decoder of 16 tokens each: the decoder's 2 heads of 16 attend to 16 keys
    "seq2seq": (transformers.T5Config(num_layers=1, num_decoder_layers=1, d_model=32, d_kv=16,
                                      num_heads=2, d_ff=64, vocab_size=128),
                ("--seq", "16"), "T5ForConditionalGeneration", "4×16×16×16"),
    # 1 s of audio is 2·50 = 100 log-mel frames: Whisper's conv1 is an implicit GEMM of
    # 2·100 positions × 32 filters over 16 mel bins × 3 taps = 48
    "speech-seq2seq": (whisper(max_source_positions=50), ("--audio-s", "1", "--seq", "8"),
                       "WhisperForConditionalGeneration", "1×200×32×48"),
    # 2 images of 32² in 8-pixel patches: 2·16 patches × 32 channels over 3·8·8 = 192 taps
    "image-cls": (transformers.ViTConfig(**VISION), (), "ViTForImageClassification",
                  "1×32×32×192"),
    "image-text": (transformers.CLIPConfig(text_config=TEXT, vision_config=VISION),
                   ("--seq", "16"), "CLIPModel", "1×32×32×192"),
    # LLaVA: (32/8)² = 16 image tokens then 16 text tokens, 32 in all through the 128-word head
    "vision2seq": (llava(), ("--seq", "16"), "LlavaForConditionalGeneration", "1×64×128×32"),
}


@pytest.mark.parametrize("task", list(CASES))
def test_every_task_builds_and_estimates(capsys, tmp_path, task: str) -> None:
    config, flags, model, shape = CASES[task]
    path = write(tmp_path, task, config)
    rc, out, err = run(capsys, "estimate", "--hf-config", path, "--task", task, "--batch", "2",
                       *flags, "--predictor", "roofline", "--device", "a100_sxm4_80gb")
    assert rc == 0, err
    assert f"{model} on A100 SXM4 80GB" in out and "; 0 unmodelled ops" in out
    assert shape in out


def test_vision_encoder_decoder(capsys, tmp_path) -> None:
    config = transformers.VisionEncoderDecoderConfig(
        encoder=transformers.ViTConfig(**VISION).to_dict(),
        decoder=transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=128,
                                        n_positions=64, add_cross_attention=True,
                                        is_decoder=True).to_dict())
    rc, out, err = run(capsys, "estimate", "--hf-config", write(tmp_path, "ved", config),
                       "--batch", "2", "--seq", "8", "--predictor", "roofline")
    assert rc == 0, err
    assert "--task auto: vision2seq" in err
    # the decoder's head: 2·8 tokens × 128 words over 32; the encoder's patches as above
    assert "1×16×128×32" in out and "1×32×32×192" in out and "; 0 unmodelled ops" in out


@pytest.mark.parametrize(("config", "task", "why"), [
    (transformers.ViTConfig(architectures=["ViTForImageClassification"]), "image-cls",
     "the config's architectures name ViTForImageClassification"),
    (transformers.BertConfig(architectures=["BertForMaskedLM"]), "masked-lm",
     "architectures name BertForMaskedLM"),
    # no architectures: the first task that builds the type, encoder-decoder tasks first for
    # an encoder-decoder config (BART also has a causal-LM head)
    (transformers.BartConfig(), "seq2seq", "the first task that builds 'bart'"),
    (transformers.WhisperConfig(), "speech-seq2seq", "the first task that builds 'whisper'"),
    (transformers.CLIPConfig(), "image-text", "the config names no architectures"),
    (transformers.GPT2Config(architectures=["GPT2Model"]), "causal-lm", "names GPT2Model"),
])
def test_auto_picks_from_architectures_then_the_model_type(config: Any, task: str,
                                                           why: str) -> None:
    picked, reason = tasks.pick(config)
    assert picked == task and why in reason


def test_auto_says_what_it_picked_and_quiet_does_not(capsys, tmp_path) -> None:
    config = transformers.ViTConfig(**VISION, architectures=["ViTForImageClassification"])
    path = write(tmp_path, "vit", config)
    base = ["estimate", "--hf-config", path, "--batch", "1", "--predictor", "roofline"]
    rc, _, err = run(capsys, *base)
    assert rc == 0 and err.splitlines() == [
        "--task auto: image-cls (the config's architectures name ViTForImageClassification)"]
    rc, _, err = run(capsys, *base, "--quiet")
    assert rc == 0 and err == ""


def test_task_errors_name_the_tasks_that_fit(tmp_path) -> None:
    config = transformers.ViTConfig(**VISION)
    with pytest.raises(UsageError, match="--task causal-lm does not fit ViTConfig; tasks that "
                                         "fit: image-cls$"):
        tasks.build(config, "causal-lm", tasks.Sizes(1))
    with pytest.raises(UsageError, match="--seq does not apply to --task image-cls; it takes "
                                         "--image-size"):
        tasks.build(config, "image-cls", tasks.Sizes(1, seq=16))


def test_whisper_takes_exactly_its_window() -> None:
    # 1500 positions after conv2's stride of 2: 3000 frames of 10 ms, 30 s
    config = whisper(max_source_positions=1500)
    with pytest.raises(UsageError, match=r"--audio-s 10: WhisperConfig's encoder takes exactly "
                                         r"30 s \(3000 log-mel frames.*use --audio-s 30"):
        tasks.build(config, "speech-seq2seq", tasks.Sizes(1, audio_s=10))
    _, _, kwargs = tasks.build(config, "speech-seq2seq", tasks.Sizes(3))
    # decoder ids default to the 32 positions the decoder has
    assert kwargs["input_features"].shape == (3, 16, 3000)
    assert kwargs["decoder_input_ids"].shape == (3, 32)


def test_image_size_reaches_the_pixels_and_vit_interpolates() -> None:
    config = transformers.ViTConfig(**VISION)
    model, args, kwargs = tasks.build(config, "image-cls", tasks.Sizes(2, image_size=64))
    assert args[0].shape == (2, 3, 64, 64) and kwargs == {"interpolate_pos_encoding": True}
    report = tgc.estimate(model, args, kwargs, device="a100_sxm4_80gb",
                          predictor=tgc.predict.RooflinePredictor())
    # (64/8)² = 64 patches per image, 2 images: 128 rows of 3·8·8 = 192 taps
    assert report.gemms[0].site.shape == (1, 128, 32, 192)
    # ResNet's config names no image size: ImageNet's 224
    _, args, _ = tasks.build(transformers.ResNetConfig(), "image-cls", tasks.Sizes(1))
    assert args[0].shape == (1, 3, 224, 224)


def flop_counter_total(model: torch.nn.Module, args: tuple, kwargs: dict) -> int:
    with FakeTensorMode(allow_non_fake_inputs=True), FlopCounterMode(display=False) as counter:
        model(*args, **kwargs)
    return counter.get_total_flops()


RESNET_50 = {"embedding_size": 64, "hidden_sizes": [256, 512, 1024, 2048], "depths": [3, 4, 6, 3],
             "layer_type": "bottleneck", "num_labels": 1000}
VIT_B_16 = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
            "intermediate_size": 3072, "image_size": 224, "patch_size": 16, "num_labels": 1000}
WHISPER_TINY = {"d_model": 384, "encoder_layers": 4, "decoder_layers": 4,
                "encoder_attention_heads": 6, "decoder_attention_heads": 6,
                "encoder_ffn_dim": 1536, "decoder_ffn_dim": 1536, "num_mel_bins": 80,
                "max_source_positions": 1500, "max_target_positions": 448, "vocab_size": 51865}


@pytest.mark.parametrize(("config", "task", "sizes", "params"), [
    (transformers.ResNetConfig(**RESNET_50), "image-cls", tasks.Sizes(1), 25_557_032),
    (transformers.ViTConfig(**VIT_B_16), "image-cls", tasks.Sizes(1), 86_567_656),
    (transformers.WhisperConfig(**WHISPER_TINY), "speech-seq2seq", tasks.Sizes(1, seq=8),
     37_760_640),
], ids=["resnet-50", "vit-b16", "whisper-tiny"])
def test_published_models_have_flop_counter_flops(config: Any, task: str, sizes: tasks.Sizes,
                                                  params: int) -> None:
    model, args, kwargs = tasks.build(config, task, sizes)
    # the published parameter counts (torchvision's resnet50, google/vit-base-patch16-224,
    # openai/whisper-tiny): the configs are the published sizes
    assert sum(p.numel() for p in model.parameters()) == params
    report = tgc.estimate(model, args, kwargs, device="a100_sxm4_80gb", dtype="bf16")
    assert not report.unmodelled
    # convolutions count as their implicit GEMMs on both sides; a transformer runs SDPA (the
    # default; ResNet has no attention to choose), whose FLOPs FlopCounterMode counts dense,
    # causal mask or not
    assert model.config._attn_implementation == ("eager" if config.model_type == "resnet"
                                                 else "sdpa")
    dense = sum(g.site.dense_flops for g in report.gemms)
    assert dense == flop_counter_total(model, args, kwargs)


def test_callable_vision_model_takes_image_size(capsys, tmp_path, monkeypatch) -> None:
    """A local module in the form a torchvision or timm builder takes."""
    (tmp_path / "cnn_models.py").write_text(textwrap.dedent("""
        import torch

        def build(batch=1, image_size=224):
            with torch.device("meta"):
                model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 7, stride=2, padding=3),
                                            torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                            torch.nn.Flatten(), torch.nn.Linear(64, 10))
                return model, (torch.ones(batch, 3, image_size, image_size),)

        def no_size(batch=1):
            return build(batch)
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    rc, out, err = run(capsys, "estimate", "cnn_models:build", "--batch", "2", "--image-size",
                       "64", "--predictor", "roofline")
    assert rc == 0, err
    # the 7×7 stride-2 stem on 64²: 2·32·32 = 2048 positions × 64 filters over 3·49 = 147 taps
    assert "1×2048×64×147" in out and "; 0 unmodelled ops" in out
    rc, _, err = run(capsys, "estimate", "cnn_models:no_size", "--image-size", "64")
    assert rc == 2 and "--image-size 64: cnn_models:no_size takes no image_size argument" in err


def test_the_bundled_vit_example_is_vit_b16() -> None:
    from torch_gemm_cost.cli.estimate import _load_hf_config

    config, _ = _load_hf_config(str(Path(__file__).resolve().parents[1] / "examples"
                                     / "vit_b16.json"))
    assert tasks.pick(config)[0] == "image-cls"
    model, args, _ = tasks.build(config, "image-cls", tasks.Sizes(64))
    assert sum(p.numel() for p in model.parameters()) == 86_567_656  # as VIT_B_16 above
    assert args[0].shape == (64, 3, 224, 224)


def test_speech2text_takes_audio_s_of_frames() -> None:
    config = transformers.Speech2TextConfig(
        encoder_layers=1, decoder_layers=1, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
        encoder_attention_heads=2, decoder_attention_heads=2, vocab_size=128,
        input_feat_per_channel=16, conv_channels=32, max_source_positions=100,
        max_target_positions=32)
    # 2.5 s at 100 frames a second: 250 frames of 16 mel bins × 1 channel
    model, args, kwargs = tasks.build(config, "speech-seq2seq", tasks.Sizes(2, audio_s=2.5))
    assert kwargs["input_features"].shape == (2, 250, 16)
    report = tgc.estimate(model, args, kwargs, device="a100_sxm4_80gb",
                          predictor=tgc.predict.RooflinePredictor())
    assert not report.unmodelled
    # two stride-2 convolutions leave 4·100 frames for the 100 positions: 4 s at most
    with pytest.raises(UsageError, match="takes 0.04 to 4 s of audio"):
        tasks.build(config, "speech-seq2seq", tasks.Sizes(1, audio_s=5))
