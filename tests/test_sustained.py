"""The sustained-rate benchmark's check of the clock term on two boards of one chip."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from torch_gemm_cost.measured.gemm import load_gemms
from torch_gemm_cost.predict import shipped_hybrid

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


sustained = _load("sustained")

ROWS = (
    "gpu,source,op,dtype,batch,m,n,k,latency_ms\n"
    # 4096³ Linear on both boards: 11 / 10 = 1.100, in the [3, inf) ms bin of the 80GB board
    "a100_pcie_40gb,neusight-test,linear,float32,1,4096,4096,4096,11.0\n"
    "a100_pcie_80gb,neusight-test,linear,float32,1,4096,4096,4096,10.0\n"
    # the same dims as a matmul are another shape (B not transposed): 0.54 / 0.5 = 1.080
    "a100_pcie_40gb,neusight-test,matmul,float32,1,4096,4096,4096,0.54\n"
    "a100_pcie_80gb,neusight-test,matmul,float32,1,4096,4096,4096,0.5\n"
    # timed twice on the 40GB board: the first row is kept
    "a100_pcie_40gb,neusight-test,matmul,float32,1,4096,4096,4096,9.0\n"
    # on one board only: not shared
    "a100_pcie_40gb,neusight-test,linear,float32,1,1024,1024,1024,0.2\n"
)


@pytest.fixture()
def boards(tmp_path):
    (tmp_path / "gemm").mkdir()
    (tmp_path / "gemm" / "neusight-test.csv").write_text(ROWS)
    return load_gemms(tmp_path, sources=["neusight-test"])


def test_shared_shapes_pair_each_shape_once(boards) -> None:
    pairs = sustained.shared_shapes(boards, sustained.BOARDS, "neusight-test")
    # rows in file order: 0, 1 (Linear); 2, 3 and 4 (matmul, the 40GB twice); 5 (one board)
    assert pairs == {(1, 4096, 4096, 4096, True): (0, 1), (1, 4096, 4096, 4096, False): (2, 3)}


def test_two_boards_bins_the_measured_ratio_by_hand(boards) -> None:
    text = sustained.two_boards(boards, shipped_hybrid())
    assert text.startswith("2 fp32 shapes timed on both boards")
    table = {row.split("|")[1].strip(): [c.strip() for c in row.split("|")[2:-1]]
             for row in text.splitlines() if row.startswith("| [")}
    # one shape in each bin, with its measured ratio worked above
    assert table["[0.3, 3)"][:2] == ["1", "1.08"]
    assert table["[3, inf)"][:2] == ["1", "1.1"]
    assert set(table) == {"[0.3, 3)", "[3, inf)"}


def test_two_boards_agrees_with_the_label_consistency_benchmark(data_dir) -> None:
    # two codes, one measurement: each bin's measured ratio is label_consistency's
    data = load_gemms(data_dir, sources=["neusight-test"])
    lc = _load("label_consistency")
    theirs = {row.split("|")[1].strip(): row.split("|")[3].strip()
              for row in lc.two_boards(data)[2].splitlines()[2:]}
    ours = {row.split("|")[1].strip(): row.split("|")[3].strip()
            for row in sustained.two_boards(data, shipped_hybrid()).splitlines()
            if row.startswith("| [")}
    assert ours == theirs and len(ours) == 4
