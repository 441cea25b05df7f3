"""Every model family from the command line: full-size vision, speech, image-text and diffusion
models through ``torch-gemm-cost estimate``, each timed, checked for unmodelled ops, and its GEMM
FLOPs checked against ``torch.utils.flop_counter.FlopCounterMode`` on the same inputs.

    python benchmarks/reach.py        # writes benchmarks/results/reach.md

Each config is built from its HF (or diffusers) config class with the published sizes written
out below, saved as JSON, and handed to the command line in a fresh process (``python -m
torch_gemm_cost estimate ... --json``), so the wall time holds the imports, the build on the
meta device, the capture, the prediction on an A100 in bf16 and the padding advice. CPU time
(user + system of the child process) is given beside it: the machine is shared, and the wall
time moves with its load. The oracle builds the same model and inputs in this process with the
builders the command line uses (``cli.tasks.build``, ``cli.diffusion.build``) and runs it under
FlopCounterMode on fake tensors; convolutions count as their implicit GEMMs on both sides.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

import torch_gemm_cost
from torch_gemm_cost.cli import diffusion, tasks
from torch_gemm_cost.cli.estimate import _load_hf_config

RESULTS = Path(__file__).resolve().parent / "results" / "reach.md"
DEVICE = "a100_sxm4_80gb"
DTYPE = "bf16"
LIMIT_S = 10.0


def resnet50() -> dict[str, Any]:
    """microsoft/resnet-50: bottleneck stages of 3, 4, 6, 3 blocks, 256 to 2048 channels."""
    from transformers import ResNetConfig

    config = ResNetConfig(embedding_size=64, hidden_sizes=[256, 512, 1024, 2048],
                          depths=[3, 4, 6, 3], layer_type="bottleneck",
                          architectures=["ResNetForImageClassification"])
    config.num_labels = 1000
    return config.to_dict()


def vit_b16() -> dict[str, Any]:
    """google/vit-base-patch16-224: 12 layers of 768, 12 heads, MLP 3072, 16-pixel patches."""
    from transformers import ViTConfig

    config = ViTConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                       intermediate_size=3072, image_size=224, patch_size=16,
                       architectures=["ViTForImageClassification"])
    config.num_labels = 1000
    return config.to_dict()


def whisper_small() -> dict[str, Any]:
    """openai/whisper-small: 12 + 12 layers of 768, 12 heads, MLP 3072, 80 mel bins, 1500
    encoder positions (30 s), 448 decoder positions, vocabulary 51865."""
    from transformers import WhisperConfig

    return WhisperConfig(d_model=768, encoder_layers=12, decoder_layers=12,
                         encoder_attention_heads=12, decoder_attention_heads=12,
                         encoder_ffn_dim=3072, decoder_ffn_dim=3072, num_mel_bins=80,
                         max_source_positions=1500, max_target_positions=448, vocab_size=51865,
                         architectures=["WhisperForConditionalGeneration"]).to_dict()


def clip_vit_l14() -> dict[str, Any]:
    """openai/clip-vit-large-patch14: a text tower of 12 layers of 768 (12 heads, MLP 3072, 77
    positions, vocabulary 49408) and a vision tower of 24 layers of 1024 (16 heads, MLP 4096,
    224-pixel images in 14-pixel patches), both projected to 768."""
    from transformers import CLIPConfig, CLIPTextConfig, CLIPVisionConfig

    text = CLIPTextConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                          num_attention_heads=12, max_position_embeddings=77, vocab_size=49408,
                          projection_dim=768, hidden_act="quick_gelu")
    vision = CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                              num_attention_heads=16, image_size=224, patch_size=14,
                              projection_dim=768, hidden_act="quick_gelu")
    return CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(),
                      projection_dim=768,
                      architectures=["CLIPModel"]).to_dict()


def sd15_unet() -> dict[str, Any]:
    """runwayml/stable-diffusion-v1-5's UNet: 320, 640, 1280, 1280 channels, two layers per
    block, cross-attention on CLIP's 768-wide text states, 8 heads, 64-pixel latents (512² at
    the VAE's factor of 8); 859.5M parameters."""
    return {  # UNet2DConditionModel's config is its constructor's arguments; defaults fill the rest
        "_class_name": "UNet2DConditionModel",
        "sample_size": 64, "in_channels": 4, "out_channels": 4, "layers_per_block": 2,
        "block_out_channels": [320, 640, 1280, 1280], "cross_attention_dim": 768,
        "attention_head_dim": 8, "norm_num_groups": 32, "act_fn": "silu",
        "down_block_types": ["CrossAttnDownBlock2D"] * 3 + ["DownBlock2D"],
        "up_block_types": ["UpBlock2D"] + ["CrossAttnUpBlock2D"] * 3,
    }


@dataclass(frozen=True)
class Case:
    """One model: its config, the flag that reads it, and the command line's size flags."""

    name: str
    file: str
    config: Callable[[], dict[str, Any]]
    source: str  # "--hf-config" or "--diffusers-config"
    flags: tuple[str, ...]
    inputs: str  # in words, for the table


CASES = (
    Case("ResNet-50", "resnet50.json", resnet50, "--hf-config", ("--batch", "64", "--image-size", "224"),
         "64 images of 224²"),
    Case("ViT-B/16", "vit_b16.json", vit_b16, "--hf-config", ("--batch", "64"), "64 images of 224²"),
    Case("Whisper-small", "whisper_small.json", whisper_small, "--hf-config",
         ("--batch", "8", "--audio-s", "30", "--seq", "448"),
         "8 × (30 s of audio, 448 decoder tokens)"),
    Case("CLIP ViT-L/14", "clip_vit_l14.json", clip_vit_l14, "--hf-config", ("--batch", "64"),
         "64 images of 224² and 64 texts of 77 tokens"),
    Case("SD-1.5 UNet step", "sd15_unet.json", sd15_unet, "--diffusers-config",
         ("--batch", "1", "--image-size", "512", "--seq", "77"),
         "1 latent of 64² (512² image), 77 text tokens"),
)


def cli(case: Case, config: Path, out: Path) -> tuple[float, float, dict[str, Any], str]:
    """Run the command line once in a fresh process: (wall s, CPU s, its JSON report,
    stderr)."""
    argv = [sys.executable, "-m", "torch_gemm_cost", "estimate", case.source, str(config),
            *case.flags, "--device", DEVICE, "--dtype", DTYPE, "--json", str(out), "--quiet"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{case.name}: {' '.join(argv)} failed:\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(out.read_text()), proc.stderr


def oracle(case: Case, config: Path) -> tuple[int, int]:
    """(FlopCounterMode's FLOPs, parameters) of the model and inputs the command line builds."""
    flags = dict(zip(case.flags[::2], case.flags[1::2]))

    def size(flag: str, kind: type) -> Any:
        return kind(flags[flag]) if flag in flags else None

    sizes = tasks.Sizes(int(flags["--batch"]), size("--seq", int), size("--image-size", int),
                        size("--audio-s", float))
    if case.source == "--diffusers-config":
        model, args, kwargs = diffusion.build(str(config), sizes)
    else:
        hf_config, _ = _load_hf_config(str(config))
        task, _ = tasks.pick(hf_config)
        model, args, kwargs = tasks.build(hf_config, task, sizes)
    with FakeTensorMode(allow_non_fake_inputs=True), FlopCounterMode(display=False) as counter:
        model.eval()(*args, **kwargs)
    return counter.get_total_flops(), sum(p.numel() for p in model.parameters())


def dense_flops(rows: list[dict[str, Any]]) -> int:
    """2·batch·m·n·k summed over the report's GEMMs: a causal SDPA call's masked pairs counted
    as computed, as FlopCounterMode counts them (the report's ``flops`` counts only the pairs
    the mask keeps).

    >>> dense_flops([{"batch": 2, "m": 3, "n": 4, "k": 5}, {"batch": 1, "m": 1, "n": 1, "k": 1}])
    242
    """
    return sum(2 * r["batch"] * r["m"] * r["n"] * r["k"] for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each command (median)")
    args = parser.parse_args(argv)
    rows, failed, slow_wall = [], [], []
    predictors: set[str] = set()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            config = Path(tmp) / case.file
            config.write_text(json.dumps(case.config()))
            runs = [cli(case, config, Path(tmp) / "report.json") for _ in range(args.repeats)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            _, _, report, stderr = runs[-1]
            flops, params = oracle(case, config)
            dense = dense_flops(report["rows"])
            if not (report["unmodelled_ops"] == 0 and dense == flops and cpu < LIMIT_S):
                failed.append(case.name)
            if wall >= LIMIT_S:
                slow_wall.append(case.name)
            rows.append([case.name, report["model"], f"{params / 1e6:.1f}", case.inputs,
                         f"{wall:.1f}", f"{cpu:.1f}", report["unmodelled_ops"],
                         f"{report['total_flops'] / 1e9:,.1f}", f"{dense / 1e9:,.1f}",
                         f"{flops / 1e9:,.1f}", "yes" if dense == flops else "NO",
                         f"{report['total_ms']:.2f}"])
            predictors.add(f"{report['predictor']} v{report['predictor_version']}")
            print(f"{case.name}: {wall:.1f} s wall, {cpu:.1f} s CPU; {stderr.strip()}",
                  file=sys.stderr)
    predicted_by = ", ".join(sorted(predictors))
    headers = ["model", "class", "params M", "inputs", "wall s", "CPU s", "unmodelled",
               "GEMM GFLOP", "dense GFLOP", "FlopCounterMode GFLOP", "equal", "predicted ms"]
    commands = "\n".join(
        f"    torch-gemm-cost estimate {c.source} {c.file} "
        f"{' '.join(c.flags)} --device {DEVICE} --dtype {DTYPE}" for c in CASES)
    text = f"""# Every model family from the command line

`{"" if not os.nice(0) else f"nice -n {os.nice(0)} "}python benchmarks/reach.py` on \
{datetime.date.today()}: {platform.processor() or platform.machine()}, \
{torch.get_num_threads()} torch threads, torch {torch.__version__},
torch_gemm_cost {torch_gemm_cost.__version__}. Each model's config is built from its config class
with the published sizes (`benchmarks/reach.py`), written to JSON and estimated by the command
line in a fresh process, on {DEVICE} in {DTYPE}:

{commands}

Wall time is the whole command (imports, the build on the meta device, capture, prediction,
padding advice), the median of {args.repeats} runs; CPU time is the child process's user + system
time (median), the figure to trust on this shared machine: its one-minute load average was
{load:.1f} on {os.cpu_count()} cores when the runs began. "GEMM GFLOP" is the report's `total_flops`, which leaves out the pairs a causal SDPA
call's mask drops; "dense GFLOP" is 2·batch·m·n·k over the report's GEMMs, those pairs counted as
computed, which is what FlopCounterMode counts on the same model and inputs (fake tensors),
convolutions as their implicit GEMMs; "equal" compares those two. "predicted ms" is the
report's total, from the shipped predictor ({predicted_by}).

Under {LIMIT_S:g} s of CPU time with no unmodelled op and equal FLOPs: {"met by every model"
if not failed else "NOT met by " + ", ".join(failed)}. Under {LIMIT_S:g} s of wall time on this
machine at that load: {"met by every model" if not slow_wall else "NOT met by "
+ ", ".join(slow_wall)}.

{tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)}
"""
    args.out.write_text(text)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
