"""Calibrated intervals: how far the measured time may fall from the predicted one.

An interval at level 0.8 should hold the measured time 80% of the time on a GPU the predictor
never saw. It is built from held-out residuals, r = log(measured / predicted), never in-sample
ones: each GPU's GEMMs predicted by hybrids fitted without any board of its chip (or, for the
"chip seen" class, without that board only), and each whole model likewise
(``train/intervals.py`` fits them).

Method: weighted split-conformal quantiles of r (Tibshirani et al. 2019), per bucket of cases.
Chosen over quantile regression because the residuals are held-out already (no model needs to be
refitted per level), any level is read off one stored grid of quantiles, the finite-sample
correction is exact for a hand-worked case, and a bucket's quantiles are numbers one can read.
Each GPU weighs the same in a bucket (a GPU with 70k rows does not set everyone's interval), and
the quantiles are asymmetric: the interval is [t·e^Q(a/2), t·e^Q(1 − a/2)] with a = 1 − level,
so a case the predictor tends to price too fast gets a longer upper side.

A GEMM's bucket is (novelty, engine, precision, regime, size), each known before anything runs:

- novelty: ``chip_seen`` (a board of its chip in the fit), ``family_seen`` (another chip of its
  kernel-library family in the fit), ``family_unseen`` (neither), ``calibrated`` (a profile's
  own residuals, ``calibrate``), or a class unlike any GPU in the fit (``UNLIKE``):
  ``generation_unseen`` (its family seen, its vendor generation not: an MI300X beside an
  MI210), ``board_unseen`` (no board of its class, GeForce or workstation, in the fit) or
  ``spec_file`` (a device read from a spec file);
- engine: CUDA cores, tensor cores, AMD matrix units, other (CPUs);
- precision: fp32, tf32, half (fp16/bf16), fp8, int8, fp64;
- regime, from physics alone: ``launch`` (the physical floor under 5 µs, so the launch and the
  kernel's fixed costs dominate), ``misaligned`` (a tensor-core GEMM with an operand off 16
  bytes), else ``memory`` or ``compute`` by intensity against the ridge;
- size: the physical floor max(FLOPs / peak, bytes / bandwidth) in decades of ms.

Where a bucket holds fewer chips than the calibration asks for (``train/intervals.MIN_CHIPS``),
the next coarser one serves: size, then regime, then precision, then engine are dropped in turn
(``FALLBACK``: a chip seen borrows the family-seen buckets rather than pool every engine). A
family never seen takes at each bucket the wider of its own quantiles and the family-seen ones,
so it always gets the widest interval of the classes with buckets. A class unlike any GPU in
the fit has no buckets: it takes the family-unseen quantiles stretched about their median by
the calibration's ``stretch``, the largest stretch any held-out GPU needed for its 80% interval
to cover 80% of its GEMMs (``train.interval_stretch``), so such a GPU is covered as well as the
worst-covered GPU of the fit would have been.

Pooled quantiles of other GPUs cover a new GPU less often than their nominal level (its level
is not among theirs). So the stored quantile at p is the raw one at the probability whose tail
was crossed a share 1 − p of the time on chips left out of it (the tail map,
``train/intervals.mapped_probs``): a split-conformal correction at the level of GPUs.

A layer or a whole model sums many GEMMs whose errors are correlated: a wrong level moves
every GEMM of one GPU the same way. Its log residual is modelled as a shared level term L (sd
``level_sigma`` per novelty) plus independent per-GEMM terms ε_i (sd s_i, from the GEMM's own
quantiles), weighted by each GEMM's share of the time:

    log(measured / predicted) ≈ μ + L + Σ_i w_i ε_i,   σ² = level_sigma² + Σ_i w_i² s_i²

where μ shifts the total by each GEMM's median residual. The interval is T·e^(μ + Z(p)·σ), with
Z the conformal quantiles of (r − μ) / σ over held-out whole-model runs. Without the level term
the interval of N equal GEMMs would shrink as 1/√N; with it, it never falls below the level's.

Fused-attention kernels (SDPA on a GPU) have quantiles of their own (``AttentionIntervals``:
the attention model's leave-one-GPU-out residuals per phase and size, fitted by
``train.attention``). The kernels of one model enter its total as a single term beside the
GEMMs, their quantiles those of fully correlated calls (``comonotonic_sum``): one kernel on one
GPU errs the same way in every layer. Its independence from the GEMMs' level term is an
assumption no measured run checks (the whole-model labels run eager attention).

By job: ``levels`` (the levels asked and the probability grid), ``cases`` (a GEMM's bucket),
``conformal`` (quantiles of scores), ``bounds`` (an interval off a quantile grid), ``totals``
(the interval of a sum), ``attention`` (the fused-attention kernels' quantiles),
``calibration`` (the fitted buckets and their file) and ``uncertainty`` (what a report needs).
Everything here is a pure batched tensor function, or a frozen record of fitted numbers.
"""

from .attention import ATTENTION_PHASES, AttentionIntervals
from .bounds import bounds, quantile_at
from .calibration import (
    FORMAT,
    KEY_FIELDS,
    IntervalCalibration,
    default_calibration,
    own_calibration,
    resolve_bucket,
)
from .cases import (
    ENGINE_CLASSES,
    NOVELTY,
    PRECISIONS,
    REGIMES,
    SIZES,
    UNLIKE,
    GemmCases,
    gemm_cases,
    generation_of,
    novelty_of,
    size_class,
)
from .conformal import conformal_grid, conformal_quantiles
from .levels import DEFAULT_LEVEL, PROBS, check_level
from .totals import center_and_sigma, comonotonic_sum, propagate, spread_of
from .uncertainty import ReportUncertainty, gemm_interval, uncertainty_of

__all__ = [
    "ATTENTION_PHASES",
    "DEFAULT_LEVEL",
    "ENGINE_CLASSES",
    "FORMAT",
    "KEY_FIELDS",
    "NOVELTY",
    "PRECISIONS",
    "PROBS",
    "REGIMES",
    "SIZES",
    "UNLIKE",
    "AttentionIntervals",
    "GemmCases",
    "IntervalCalibration",
    "ReportUncertainty",
    "bounds",
    "center_and_sigma",
    "check_level",
    "comonotonic_sum",
    "conformal_grid",
    "conformal_quantiles",
    "default_calibration",
    "gemm_cases",
    "gemm_interval",
    "generation_of",
    "novelty_of",
    "own_calibration",
    "propagate",
    "quantile_at",
    "resolve_bucket",
    "size_class",
    "spread_of",
    "uncertainty_of",
]
