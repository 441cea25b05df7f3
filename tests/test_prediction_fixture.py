"""Golden predictions: the shipped predictor's times, to three parts in a million.

Every catalog device × every dtype it supports × a fixed set of GEMM shapes (aligned, misaligned,
tiny, huge, batched; matmul and Linear layouts, with and without a bias), through
``predict_gemm_ms``; and the whole-model totals of end-to-end label models (NeuSight's configs,
built as ``benchmarks/e2e.py`` builds them, at a small batch), inference and training, through
``compare``. Times are stored as ``float.hex`` and compared to a relative ``REL_TOL`` (3e-6,
derived below from float32's precision), so any change of the predictor fails while the last
bits of float32 arithmetic, which vary with the CPU's vector kernels, do not. Counts are
compared exactly.

The fixture moves whenever the predictor's weights or physics move on purpose; then regenerate it:

    python tests/test_prediction_fixture.py --overwrite
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GOLDEN = FIXTURES / "predictions.json"
ROOT = Path(__file__).resolve().parents[1]
REGENERATE = "python tests/test_prediction_fixture.py --overwrite"

# (op, bias) variants every shape is predicted under: B read (k, n) or as a (n, k) weight
VARIANTS: tuple[tuple[str, bool], ...] = (("matmul", False), ("linear", False), ("linear", True))
# the end-to-end models: one config of each model type in NeuSight's labels
E2E_MODELS: tuple[str, ...] = ("bert", "gpt2_med", "gpt3_xl", "opt")
E2E_BATCH, E2E_SEQ = 2, 128


def gemm_shapes() -> list[tuple[int, int, int, int]]:
    """(batch, m, n, k): hand-picked regimes, then seeded log-uniform shapes."""
    shapes = []
    for d in (64, 256, 1024, 4096, 8192):  # aligned squares
        shapes.append((1, d, d, d))
    for d in (63, 65, 127, 1023, 1025, 4095, 4097):  # one off alignment
        shapes.append((1, d, d, d))
    for m in (1, 2, 3, 7, 8, 16, 33, 64):  # decode-size (tiny m) against real weights
        shapes += [(1, m, 4096, 4096), (1, m, 50257, 768), (1, m, 11008, 4095)]
    for n, k in ((50257, 768), (50304, 768), (32000, 4096), (14336, 4096), (4096, 14336),
                 (3072, 768), (768, 3072), (2304, 768)):  # LLM layers at 2048 tokens
        shapes.append((1, 2048, n, k))
    shapes += [(1, 65536, 8192, 8192), (1, 32768, 50257, 4096), (1, 16384, 16384, 16384),
               (1, 1, 1, 1), (1, 1, 8, 8), (1, 3, 5, 7), (1, 16, 16, 16)]  # huge and tiny
    for b in (2, 12, 96, 512):  # batched: attention scores and values, small bmm
        shapes += [(b, 1024, 1024, 64), (b, 1024, 64, 1024), (b, 33, 65, 17), (b, 128, 128, 128)]
    rng = random.Random(0)

    def log_uniform(lo: int, hi: int) -> int:
        return round(math.exp(rng.uniform(math.log(lo), math.log(hi))))

    for _ in range(40):
        batch = 1 if rng.random() < 0.7 else log_uniform(2, 64)
        shapes.append((batch, log_uniform(1, 8192), log_uniform(1, 16384), log_uniform(1, 16384)))
    return shapes


def _hex(values: list[float]) -> str:
    return " ".join(float(v).hex() for v in values)


def gemm_predictions() -> Iterator[tuple[str, str]]:
    """(key, float.hex of every time) per device, dtype and variant."""
    import torch_gemm_cost as tgc
    from torch_gemm_cost.hardware.dtypes import DTYPES

    batch, m, n, k = (list(col) for col in zip(*gemm_shapes()))
    for spec in tgc.list_devices():
        for dtype in (d for d in DTYPES if spec.supports(d)):
            for op, bias in VARIANTS:
                times = tgc.predict_gemm_ms(spec.id, m=m, n=n, k=k, batch=batch, dtype=dtype,
                                            op=op, bias=bias)
                yield f"{spec.id} {dtype} {op}{' bias' if bias else ''}", _hex(times.tolist())


def _e2e_bench() -> Any:
    spec = importlib.util.spec_from_file_location("e2e_bench", ROOT / "benchmarks" / "e2e.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def e2e_totals() -> Iterator[tuple[str, str]]:
    """(key, float.hex of GEMM ms and other ms) per model, mode and device; GEMM and op
    counts after them."""
    import torch_gemm_cost as tgc

    e2e = _e2e_bench()
    devices = [d.id for d in tgc.list_devices()]
    for model in E2E_MODELS:
        for mode in ("inference", "train"):
            net, args, kwargs = e2e.build(FIXTURES, model, E2E_BATCH, E2E_SEQ, mode)
            for r in tgc.compare(net, args, kwargs, devices=devices, mode=mode):
                yield (f"{model} {mode} {r.device.id}",
                       f"{_hex([r.gemm_ms, r.other_ms])} {len(r.gemms)} {len(r.others)}")


def compute() -> dict[str, dict[str, str]]:
    torch.set_num_threads(1)
    return {
        "shapes": {"batch m n k": " ".join(",".join(map(str, s)) for s in gemm_shapes())},
        "gemms": dict(gemm_predictions()),
        "e2e": dict(e2e_totals()),
    }


# The predictor runs in float32 (unit roundoff u = 2^-24 ≈ 6.0e-8), and two CPUs do not round
# alike: exp, log, pow and tanh run in vector kernels of the CPU's width (AVX2, AVX-512) or in
# scalar code, each within 1 ulp of the exact value but not the same ulp; the MLP's matmuls
# contract into FMAs or not and block by the vector width. A time is
#     t = 1e3 · exp(L) / util   (ms),   L = ln(time in s), a float32,
# and everything before L reaches t with a condition of 1 (L absorbs relative errors as absolute
# ones), except the rounding of L itself: relative to t, one ulp of L is ulp(L) in absolute
# terms, which is |L| times larger than u. Times from 0.11 µs to 8.9e6 s have |L| < 16, so
#   (1) L: ulp(L) ≤ 2^-20 = 9.54e-7; a log within 1 ulp on each host, on inputs a few 1e-7
#       apart, gives L's 2 ulps apart:                                        2 · 9.54e-7 = 1.91e-6
#   (2) exp(L): within 1 ulp (2^-23 relative) on each host:                  2 · 1.19e-7 = 2.4e-7
#   (3) util, the MLP's sigmoid (22 -> 16 -> 16 -> 1): MKL's FMA and non-FMA kernels
#       (MKL_CBWR=COMPATIBLE) move it by at most 4.7e-7, i.e. 8 u:             8 · 6.0e-8 = 4.8e-7
#   (4) the division and the float64 sums after it: one more rounding:             6.0e-8
#   total 1.91e-6 + 2.4e-7 + 4.8e-7 + 6e-8 = 2.69e-6, so REL_TOL = 3e-6; whole-model totals are
#   sums of positive terms, whose relative error is at most their terms'. Measured: an x86 host's
#   predictions differ from the fixture's by up to 1.09e-6 (0.1096692755818367 ->
#   0.10966939479112625 ms, one ulp of L = -9.1 and a little), the same host's scalar kernels
#   (ATEN_CPU_CAPABILITY=default) from its AVX2 ones by up to 1.06e-6. A predictor change moves
#   times by 1e-4 or more.
REL_TOL = 3e-6


def _same(a: str, b: str) -> bool:
    """Two fields agree: hex floats to ``REL_TOL``, anything else exactly."""
    if "." in a and "." in b:
        return math.isclose(float.fromhex(a), float.fromhex(b), rel_tol=REL_TOL)
    return a == b


def _differences(golden: dict[str, str], now: dict[str, str], limit: int = 5) -> list[str]:
    keys = sorted(set(golden) | set(now))
    out = [f"{key}: {'missing now' if key not in now else 'new'}"
           for key in keys if (key in golden) != (key in now)]
    for key in keys:
        if key not in golden or key not in now:
            continue
        was, got = golden[key].split(), now[key].split()
        if len(was) != len(got) or not all(_same(a, b) for a, b in zip(was, got)):
            first = next((i for i, (a, b) in enumerate(zip(was, got)) if not _same(a, b)),
                         min(len(was), len(got)))
            if first >= min(len(was), len(got)):
                pair = f"{len(was)} -> {len(got)} fields"
            elif "." in was[first]:
                pair = f"{float.fromhex(was[first])!r} -> {float.fromhex(got[first])!r}"
            else:
                pair = f"{was[first]} -> {got[first]}"
            out.append(f"{key}: field {first} {pair}")
    return out[:limit] + ([f"... {len(out) - limit} more"] if len(out) > limit else [])


@pytest.fixture(scope="module")
def now() -> dict[str, dict[str, str]]:
    pytest.importorskip("transformers")
    return compute()


@pytest.mark.parametrize("section", ["shapes", "gemms", "e2e"])
def test_predictions_equal_the_golden_ones(now: dict[str, dict[str, str]],
                                                      section: str) -> None:
    golden = json.loads(GOLDEN.read_text())[section]
    diffs = _differences(golden, now[section])
    assert not diffs, (
        f"{section}: predictions differ from {GOLDEN.name}:\n  "
        + "\n  ".join(diffs)
        + f"\nIf the predictor changed on purpose, regenerate the fixture: {REGENERATE}"
    )


def test_differences_tolerate_float32_rounding_and_nothing_more() -> None:
    # 56.81412618421018 -> 56.81412635743618 is a relative 3.0e-9 (two machines' whole-model
    # totals); 0.1096692755818367 -> 0.10966939479112625 is 1.09e-6 (one GEMM on two CPUs);
    # 56.8141 -> 56.8147 is 1.1e-5, 56.8141 -> 56.81428 is 3.2e-6 (just beyond REL_TOL),
    # and a GEMM count of 98 -> 99 is a change
    golden = {"m": f"{(56.81412618421018).hex()} 98"}
    assert _differences(golden, {"m": f"{(56.81412635743618).hex()} 98"}) == []
    gemm = {"g": (0.1096692755818367).hex()}
    assert _differences(gemm, {"g": (0.10966939479112625).hex()}) == []
    assert _differences({"m": (56.8141).hex()}, {"m": (56.81428).hex()}) == [
        "m: field 0 56.8141 -> 56.81428"]
    assert _differences(golden, {"m": f"{(56.8147).hex()} 98"}) == [
        "m: field 0 56.81412618421018 -> 56.8147"]
    assert _differences(golden, {"m": f"{(56.81412618421018).hex()} 99"}) == ["m: field 1 98 -> 99"]
    assert _differences(golden, {"m": f"{(56.81412618421018).hex()}"}) == ["m: field 1 2 -> 1 fields"]
    assert _differences(golden, {}) == ["m: missing now"]


def test_fixture_spans_every_device_dtype_and_variant() -> None:
    from torch_gemm_cost import list_devices
    from torch_gemm_cost.hardware.dtypes import DTYPES

    golden = json.loads(GOLDEN.read_text())
    expected = sum(sum(spec.supports(d) for d in DTYPES) for spec in list_devices()) * len(VARIANTS)
    assert len(golden["gemms"]) == expected
    assert len(gemm_shapes()) >= 100
    assert all(len(v.split()) == len(gemm_shapes()) for v in golden["gemms"].values())
    assert len(golden["e2e"]) == len(E2E_MODELS) * 2 * len(list_devices())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overwrite", action="store_true",
                        help=f"write {GOLDEN.relative_to(ROOT)} from the current predictor")
    args = parser.parse_args(argv)
    data = compute()
    if args.overwrite:
        GOLDEN.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN.relative_to(ROOT)}: {len(data['gemms'])} GEMM rows of "
              f"{len(gemm_shapes())} shapes, {len(data['e2e'])} model totals")
        return 0
    golden = json.loads(GOLDEN.read_text())
    diffs = [d for section in data for d in _differences(golden[section], data[section])]
    print("\n".join(diffs) if diffs else "bit-identical")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
