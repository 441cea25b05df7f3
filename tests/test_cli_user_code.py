"""Errors that help: an exception in the user's builder or model is said as theirs (their
function and file), exits 2, and shows its traceback under -v; hints name the options of the
entry point in use; --version names the package's and the shipped weights' versions; install
hints say what works from a checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_gemm_cost as tgc
from torch_gemm_cost.capture.core import CaptureError
from torch_gemm_cost.cli import main
from torch_gemm_cost.predict.registry import SHIPPED, shipped_path

ROOT = Path(__file__).resolve().parents[1]

BUILDERS = '''\
import torch


def raises(batch=1):
    raise RuntimeError("my builder broke")


def wrong_signature(n):
    return None


class Reshapes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x).view(3, 7)


def bad_shape(batch=1):
    with torch.device("meta"):
        model = Reshapes()
    return model, (torch.ones(batch, 8, device="meta"),)
'''
LINE_RAISE = 5  # the line of `raise RuntimeError` above
LINE_SIGNATURE = 8  # def wrong_signature
LINE_VIEW = 18  # the .view(3, 7) in Reshapes.forward


class Reshapes(torch.nn.Module):  # the API's copy of the model bad_shape builds
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).view(3, 7)


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "my_builders.py").write_text(BUILDERS)
    return subprocess.run([sys.executable, "-m", "torch_gemm_cost", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_builder_that_raises_is_reported_as_the_users_with_its_traceback_under_v(tmp_path):
    proc = _cli(tmp_path, "estimate", "my_builders:raises", "--quiet")
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("torch-gemm-cost estimate: error in your code: my_builders:raises "
                           "raised RuntimeError: my builder broke (in raises at ")
    assert f"my_builders.py:{LINE_RAISE})" in line and "run with -v for the traceback" in line
    # -v, before or after the subcommand: the traceback, through the builder's own line
    for argv in (["-v", "estimate", "my_builders:raises"], ["estimate", "my_builders:raises",
                                                            "-v"]):
        proc = _cli(tmp_path, *argv, "--quiet")
        assert proc.returncode == 2
        assert "Traceback (most recent call last)" in proc.stderr
        assert f'my_builders.py", line {LINE_RAISE}, in raises' in proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith(
            "torch-gemm-cost estimate: error in your code: my_builders:raises raised")


def test_a_builder_with_a_wrong_signature_is_a_usage_error_naming_it(tmp_path, monkeypatch,
                                                                     capsys):
    (tmp_path / "sig_builders.py").write_text(BUILDERS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["estimate", "sig_builders:wrong_signature", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "internal error" not in err
    assert (f"sig_builders:wrong_signature (defined at {tmp_path / 'sig_builders.py'}:"
            f"{LINE_SIGNATURE}) cannot be called with no arguments: missing a required "
            "argument: 'n'") in err


def test_a_model_that_fails_to_capture_gets_the_hint_of_the_entry_point_in_use(tmp_path):
    # the command line: its own flag, the model's file and line, exit 2 as the user's error
    proc = _cli(tmp_path, "estimate", "my_builders:bad_shape", "--quiet")
    assert proc.returncode == 2
    # a meta model that fails on fake tensors is run for real on CPU tensors (said in a
    # warning), where the user's own error shows
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("torch-gemm-cost estimate: error in your code: could not capture "
                           "Reshapes")
    assert f"(forward at {tmp_path / 'my_builders.py'}:{LINE_VIEW})" in line
    assert "stage 'eager' failed" in line and "shape '[3, 7]' is invalid" in line
    assert "check that model(*args, **kwargs) runs as given" in line
    assert "capture_method=" not in line
    # the flag exists and says the same for a model the command line builds on meta
    proc = _cli(tmp_path, "estimate", "--hf-config", str(ROOT / "examples" / "gpt2.json"),
                "--capture-method", "eager")
    assert proc.returncode == 2
    assert "--capture-method eager runs the model for real" in proc.stderr
    # the API: a method left untried is spelled as its keyword, the command line's as its flag
    with torch.device("meta"):
        model = Reshapes()
    with pytest.raises(CaptureError) as info:
        tgc.estimate(model, (torch.ones(1, 8, device="meta"),), device="t4",
                     capture_method="dispatch")
    assert "capture_method='export'" in str(info.value)
    assert "--capture-method" not in str(info.value)
    assert "--capture-method export" in info.value.message(lambda m: f"--capture-method {m}")


def test_version_names_the_package_and_each_shipped_file(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"torch-gemm-cost {tgc.__version__}"
    for name, entry in SHIPPED.items():  # oracle: each file's own format and version fields
        doc = json.loads(shipped_path(name).read_text())
        assert f"  {entry.what}: {doc['format']} version {doc['version']} ({entry.path})" in out


def test_install_hints_say_what_installs_from_a_checkout(monkeypatch, capsys, tmp_path):
    from torch_gemm_cost.report.roofline import pyplot

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    with pytest.raises(ImportError, match=r"pip install -e '\.\[plot\]'"):
        pyplot("plot_roofline")
    assert main(["estimate", "--hf-config", str(ROOT / "examples" / "gpt2.json"), "--plot",
                 str(tmp_path / "r.png")]) == 2
    assert "--plot needs matplotlib: pip install matplotlib (from a checkout of " \
        "torch_gemm_cost: pip install -e '.[plot]')" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "diffusers", None)
    config = tmp_path / "unet.json"
    config.write_text("{}")
    assert main(["estimate", "--diffusers-config", str(config)]) == 2
    assert "pip install -e '.[diffusion]'" in capsys.readouterr().err
    # no hint names a package that no index has
    for path in [*(ROOT / "torch_gemm_cost").rglob("*.py"), ROOT / "README.md"]:
        assert "torch-gemm-cost[" not in path.read_text(), path
