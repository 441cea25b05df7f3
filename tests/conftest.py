"""Shared fixtures. Tests that need the measured data use ``data_dir`` and skip without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA_DIR = Path(os.environ.get("TORCH_GEMM_COST_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA_DIR / "gemm").is_dir():
        pytest.skip(f"measured data not found at {DATA_DIR.resolve()} (set TORCH_GEMM_COST_DATA)")
    return DATA_DIR
