"""The command line as a user runs it: bad arguments and files exit 2, one line, no traceback."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

GOOD = "gpu,op,dtype,batch,m,n,k\ntesla_t4,linear,float16,1,128,4096,4096\n"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "torch_gemm_cost", *args],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )


def _files(tmp: Path) -> None:
    (tmp / "good.csv").write_text(GOOD)
    (tmp / "unknown_gpu.csv").write_text(GOOD + "h100_sxm,matmul,bf16,1,8,8,8\n")
    bad_dim = GOOD + GOOD.splitlines()[1] + "\nl4,matmul,fp16,1,8,8,eight\n"
    (tmp / "bad_dim.csv").write_text(bad_dim)
    (tmp / "no_columns.csv").write_text("gpu,op,m\nl4,matmul,8\n")
    (tmp / "fake.csv.gz").write_text(GOOD)  # not gzip inside
    (tmp / "binary.csv").write_bytes(gzip.compress(GOOD.encode()))  # gzip, wrong name
    (tmp / "corrupt.json").write_text('{"format": "torch_gemm_cost.weights", trunc')


# (arguments, what the one-line message must contain)
CASES = [
    (["predict-csv", "unknown_gpu.csv", "--out", "o.csv"],
     ("unknown_gpu.csv line 3: column 'gpu': unknown device 'h100_sxm'; "
      "did you mean 'h100_sxm5_80gb'")),
    (["predict-csv", "bad_dim.csv", "--out", "o.csv"], "bad_dim.csv line 4: column 'k'"),
    (["predict-csv", "no_columns.csv", "--out", "o.csv"], "missing column(s) dtype, batch, n, k"),
    (["predict-csv", "missing.csv", "--out", "o.csv"], "missing.csv: no such file"),
    (["predict-csv", "fake.csv.gz", "--out", "o.csv"], "fake.csv.gz line 1: unreadable"),
    (["predict-csv", "binary.csv", "--out", "o.csv"], "binary.csv line 1: unreadable"),
    (["predict-csv", "good.csv", "--out", "o.csv", "--weights", "corrupt.json"], "corrupt.json"),
    (["predict-csv", "good.csv", "--out", "o.csv", "--weights", "absent.json"], "absent.json"),
    (["predict-csv", "good.csv", "--out", "o.csv", "--device-profile", "corrupt.json"],
     "corrupt.json"),
    (["predict-csv", "good.csv", "--out", "no_dir/o.csv"], "--out no_dir/o.csv: cannot write"),
    (["predict-csv", "good.csv"], "the following arguments are required: --out"),
    (["predict-csvv", "good.csv"], "invalid choice: 'predict-csvv'"),
]


@pytest.mark.parametrize("args, message", CASES, ids=[" ".join(a[1:]) for a, _ in CASES])
def test_bad_input_exits_2_with_one_line(tmp_path, args, message):
    _files(tmp_path)
    proc = _cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert message in lines[-1]
    assert lines[-1].startswith("torch-gemm-cost")
    assert proc.stdout == ""
    assert not (tmp_path / "o.csv").exists()


def test_good_input_exits_0_quietly(tmp_path):
    _files(tmp_path)
    proc = _cli("predict-csv", "good.csv", "--out", "o.csv", cwd=tmp_path)
    assert (proc.returncode, proc.stderr, proc.stdout) == (0, "", "")
    header, row = (tmp_path / "o.csv").read_text().splitlines()
    assert header == "gpu,op,dtype,batch,m,n,k,predicted_ms"
    assert float(row.rsplit(",", 1)[1]) > 0
