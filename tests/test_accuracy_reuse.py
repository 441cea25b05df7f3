"""benchmarks/accuracy.py --reuse: held-out predictions of several runs, one seed or more
each, averaged as one run over all their seeds averages them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

_spec = importlib.util.spec_from_file_location(
    "accuracy_bench", Path(__file__).resolve().parents[1] / "benchmarks" / "accuracy.py"
)
assert _spec is not None and _spec.loader is not None
accuracy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(accuracy)


def _save(path: Path, seeds: list[int], hybrid: list[float]) -> str:
    torch.save({"seeds": seeds, "predictions": {
        "hybrid": torch.tensor(hybrid, dtype=torch.float64),
        "roofline": torch.ones(len(hybrid), dtype=torch.float64)}}, path)
    return str(path)


def test_files_of_one_seed_each_average_geometrically(tmp_path: Path) -> None:
    # seed 0 predicts 1 and 9 ms, seed 1 predicts 4 and 1 ms: the geometric means are
    # √(1·4) = 2 and √(9·1) = 3, as a run of seeds 0 and 1 averages them
    a = _save(tmp_path / "a.pt", [0], [1.0, 9.0])
    b = _save(tmp_path / "b.pt", [1], [4.0, 1.0])
    got = accuracy.reuse_predictions([a, b], [0, 1], ["hybrid"], 2)
    assert got["hybrid"].tolist() == pytest.approx([2.0, 3.0])


def test_a_file_of_two_seeds_weighs_twice(tmp_path: Path) -> None:
    # seeds 0 and 1 averaged to 8 ms, seed 2 alone 1 ms: (8² · 1)^(1/3) = 4
    a = _save(tmp_path / "a.pt", [0, 1], [8.0])
    b = _save(tmp_path / "b.pt", [2], [1.0])
    got = accuracy.reuse_predictions([a, b], [0, 1, 2], ["hybrid", "no_mlp"], 1)
    assert list(got) == ["hybrid"]  # a variant no file holds is fitted, not read
    assert float(got["hybrid"][0]) == pytest.approx(4.0)


def test_seeds_and_rows_that_do_not_fit_name_the_files(tmp_path: Path) -> None:
    a = _save(tmp_path / "a.pt", [0], [1.0, 2.0])
    with pytest.raises(SystemExit, match=r"a\.pt hold seeds \[0\], not \[0, 1\]"):
        accuracy.reuse_predictions([a], [0, 1], ["hybrid"], 2)
    with pytest.raises(SystemExit, match=r"a\.pt: hybrid has 2 rows, the data 3"):
        accuracy.reuse_predictions([a], [0], ["hybrid"], 3)
