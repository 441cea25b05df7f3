"""``torch-gemm-cost estimate --hf-config ... --json`` writes what ``estimate()`` returns for the
model a user builds from the same config with transformers' defaults: one answer from both entry
points. Llama, ViT and Whisper from the bundled configs, cut to one or two layers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from test_cli_estimate import run

import torch_gemm_cost as tgc

transformers = pytest.importorskip("transformers")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DEVICE, DTYPE = "h100_sxm5_80gb", "bf16"


# the task --task auto builds for each case
TASKS = {"llama": "causal-lm", "vit": "image-cls", "whisper": "speech-seq2seq"}


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.ones(*shape, dtype=dtype, device="meta")


# (bundled config, layer fields cut to keep the run to seconds, the command line's sizes,
#  the Auto class a user builds, the inputs of those sizes as a user writes them)
CASES: dict[str, tuple[str, dict[str, int], list[str], str, Any]] = {
    "llama": ("llama3_8b.json", {"num_hidden_layers": 1}, ["--batch", "2", "--seq", "64"],
              "AutoModelForCausalLM",
              lambda: ((meta(2, 64, dtype=torch.long),), {"use_cache": False})),
    "vit": ("vit_b16.json", {"num_hidden_layers": 2}, ["--batch", "2"],
            "AutoModelForImageClassification", lambda: ((meta(2, 3, 224, 224),), {})),
    "whisper": ("whisper_small.json", {"encoder_layers": 1, "decoder_layers": 1},
                ["--batch", "1", "--seq", "16"], "AutoModelForSpeechSeq2Seq",
                lambda: ((), {"input_features": meta(1, 80, 3000),  # 30 s of log-mel frames
                              "decoder_input_ids": meta(1, 16, dtype=torch.long),
                              "use_cache": False})),
}


@pytest.mark.parametrize("name", list(CASES))
def test_cli_json_is_the_api_report(name: str, capsys, tmp_path: Path) -> None:
    example, cut, sizes, auto, inputs = CASES[name]
    config = {**json.loads((EXAMPLES / example).read_text()), **cut}
    (tmp_path / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out.json"
    rc, _, err = run(capsys, "estimate", "--hf-config", str(tmp_path / "config.json"), *sizes,
                     "--device", DEVICE, "--dtype", DTYPE, "--json", str(out), "--quiet")
    assert rc == 0, err
    cli = json.loads(out.read_text())

    # the user's way: the config from its directory, the model as transformers builds it
    hf_config = transformers.AutoConfig.from_pretrained(tmp_path)
    with torch.device("meta"):
        model = getattr(transformers, auto).from_config(hf_config)
    assert model.config._attn_implementation == "sdpa"  # what the CLI now builds too
    args, kwargs = inputs()
    api = tgc.estimate(model, args, kwargs, device=DEVICE, dtype=DTYPE).to_dict()
    # the same dict, float for float: JSON writes a float's shortest repr, which reads back as
    # the same double, so only tuples (read back as lists) need the round trip
    api = json.loads(json.dumps(api))
    # the same question too; the command line also names the task --task auto built
    assert cli.pop("inputs") == {**api.pop("inputs"), "task": TASKS[name]}
    assert cli == api
    assert cli["total_ms"] > 0 and cli["rows"]
    # both priced SDPA: every attention call one flash attention kernel on the H100
    assert any(k["kernel"].startswith("flash_attention_") for k in cli["kernels"])
