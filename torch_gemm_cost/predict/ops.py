"""The non-GEMM op cost model: a time for every other op, as bytes / (η·DRAM bandwidth) + launches.

Per op class (elementwise, norm, softmax, ...) constants are fitted on measured ops
(``train/ops.py``, shipped in ``data/op_costs.json``): η, the fraction of the datasheet DRAM
bandwidth the class's kernels reach, one per measured architecture (a device of an architecture
nobody measured takes their geometric mean), and the event-timed floor of one isolated kernel.
Inside a model, kernels run back to back on one stream, so each pays ``launch_ms``, the gap
between consecutive kernels, instead of that floor.

- Views and metadata ops cost nothing; ops of class ``other`` are unmodelled (time None).
- Backward ops are priced from the forward op of the same node, with the traffic of the
  kernels autograd runs for it (``BACKWARD``); one without a forward twin (a bias gradient,
  say) is one kernel moving its own ``dram_bytes``.
- The softmax inside a fused SDPA kernel never touches DRAM for its scores: it costs its FLOPs
  at the device's vector fp32 rate, plus any explicit mask it reads, and launches nothing.
- The optimizer's update (``records.extract.optimizer_ops``) is ops of phase ``optimizer``.
- A depthwise convolution that PyTorch runs in its own kernel issues more instructions than
  its bytes take: the soft maximum of its DRAM time and its issue time (``stencil``).
- Ops that reduce before they write (long softmax and layer-norm rows, norms that compute
  statistics, reduced pointwise losses) move more bytes than their record's one pass per
  tensor, and a row-wise kernel with fewer rows than SMs streams at its blocks' rate
  (``rows``).

Fused kernels, as serving engines run them and as ``torch.compile`` makes them (``FUSED_OPS``:
a fused RMSNorm, SiLU·mul, rotary embedding, an embedding gather, and torch's LayerNorm, GELU
and add as vidur timed them in fp16) have constants of their own, fitted per op on vidur's
kernel times (``train/ops.py``): a kernel moves its bytes at the slower of two rates, a share
η of the DRAM bandwidth (the memory system's, one for every fused op) and β bytes per
SM-cycle (SMs × boost clock, the op's own), joined by a soft
maximum of the two times with a shared exponent p:

    time = kernels · launch + bytes · ((1 / (η·BW))^p + (1 / (β·SMs·clock))^p)^(1/p)

The SM side is what a per-token kernel sustains with its own loads in flight whatever the
DRAM: vidur's embedding gather runs at 0.29 TB/s on an A100 (2.0 TB/s of DRAM) and 0.35 on an
A40 (0.7 TB/s), 1.9 and 2.4 bytes per SM-cycle. A compiled kernel (``FusedKernel``) is priced
as one kernel of its bytes: with the fused op's constants where it computes one, else with its
class's η. Eager ops run as such kernels price with them too: ``aten.embedding``, and torch's
own fused ``rms_norm``.

NB: every tensor is assumed to come from DRAM; on large-L2 GPUs (A100: 40 MB) small
activations partly hit L2, so such ops run faster than predicted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..hardware.catalog import DeviceSpec
from ..hardware.dtypes import DTYPES
from ..records import OtherOp
from ..records.rnn import RNN_STEP
from ..records.types import FusedKernel
from .base import Prediction
from .registry import check_format, load_file, load_shipped
from .rows import limited_bytes, pass_factor, row_bandwidth_bytes_per_s
from .stencil import depthwise_time_ms, runs_native

__all__ = [
    "BACKWARD",
    "FUSED_ALIASES",
    "FUSED_OPS",
    "OP_CLASSES",
    "VEC_OPS",
    "FusedOpCost",
    "OpBatch",
    "OpCostModel",
    "dropout_calls",
    "fused_op_bytes",
    "fused_time_ms",
    "fused_time_ms_of",
    "load_op_costs",
    "measured_op_times_ms",
    "memory_time_ms",
    "warm_l2_hit",
]

VERSION = 2  # of the op cost tables this module reads and ``train.ops`` writes

OP_CLASSES: tuple[str, ...] = (
    "elementwise",
    "norm",
    "softmax",
    "reduction",
    "copy",
    "embedding",
    "view",
    "attention",
    "other",
)
_FREE = ("view",)
_UNMODELLED = ("other",)

# Backward of a forward op, by ATen base name: (bytes as a multiple of the forward op's bytes,
# kernels). E.g. gelu reads x, writes y (2 tensor passes); its backward reads dy and x and writes
# dx (3 passes): 1.5x in one kernel. Names missing here use _BACKWARD_DEFAULT.
BACKWARD: dict[str, tuple[float, int]] = {
    # dx = dy (and dy for the other operand): no kernel. Where a residual stream forked,
    # autograd sums the branch's gradient into the stream's: a record of its own at the fork
    # (records.extract, ``<node>.grad_sum``), not the joining add's. mul/div depend on their
    # operands and are priced in _row.
    "add": (0.0, 0),
    "sub": (0.0, 0),
    "neg": (1.0, 1),
    "gelu": (1.5, 1),
    "relu": (1.5, 1),
    "threshold": (1.5, 1),
    "tanh": (1.5, 1),
    "sigmoid": (1.5, 1),
    "silu": (1.5, 1),
    "erf": (1.5, 1),
    "exp": (1.5, 1),
    "sqrt": (1.5, 1),
    "rsqrt": (1.5, 1),
    "pow": (2.5, 3),  # dy · e · x^(e-1): pow, mul, mul
    "softmax": (1.5, 1),
    "_softmax": (1.5, 1),
    "log_softmax": (1.5, 1),
    "_log_softmax": (1.5, 1),
    "_safe_softmax": (1.5, 1),
    # dx (reads dy, x; writes dx) and dγ/dβ (reads dy, x again): 5 passes against 2
    "native_layer_norm": (2.5, 2),
    "layer_norm": (2.5, 2),
    "rms_norm": (2.5, 2),
    "_fused_rms_norm": (2.5, 2),
    "native_dropout": (1.0, 1),
    "dropout": (1.0, 1),  # dy·mask·scale: same passes as forward
    "embedding": (1.5, 3),  # sort indices, scatter-add rows. NB: the zero fill of dW is not here
}
_BACKWARD_DEFAULT: tuple[float, int] = (1.0, 1)
# backward is a view of the gradient (or nothing): no kernel
_NO_BACKWARD_KERNEL = frozenset({"bernoulli"})

# the fused kernels vidur timed (DATA.md, vec/vidur.csv.gz), each with constants of its own
FUSED_OPS: tuple[str, ...] = (
    "rms_norm_fused",
    "layer_norm",
    "silu_and_mul_fused",
    "rope_fused",
    "gelu",
    "add",
    "embedding",
)
# measured op names that are a fused op run several times: vidur's add3 is two adds
FUSED_ALIASES: dict[str, tuple[str, int]] = {"add3": ("add", 2)}


@dataclass(frozen=True)
class FusedOpCost:
    """A fused kernel's own constants: ``sm_bytes_per_cycle``, the bytes one SM moves a cycle
    when the SMs, not the DRAM, limit it; ``floor_ms``, the kernel time of one isolated launch
    (scores the fit on measured kernels; inside a model each kernel pays
    ``OpCostModel.launch_ms``). Its share of the DRAM bandwidth is the memory system's, one
    for every fused op (``OpCostModel.fused_eta``)."""

    sm_bytes_per_cycle: float
    floor_ms: float


@dataclass(frozen=True)
class OpCostModel:
    """Fitted constants per op class, in ``OP_CLASSES`` order, and per fused op (``FUSED_OPS``).

    ``eta``: fraction of datasheet DRAM bandwidth (NaN: unmodelled) on an architecture no
    measurement covers; ``eta_by_architecture``: the same per measured architecture (``eta_on``
    picks a device's). ``floor_ms``: event-timed floor of one isolated kernel (used to score
    the fit on measured ops). ``launch_ms``: the cost of one kernel in a stream of back-to-back
    kernels. ``fused``: the fused ops' constants (empty in a table without them), joined by the
    soft maximum of exponent ``roof_p`` to the DRAM time at ``fused_eta``, the share of the
    datasheet bandwidth every fused op draws.
    """

    eta: tuple[float, ...]
    floor_ms: tuple[float, ...]
    launch_ms: float
    provenance: Mapping[str, Any]
    fused: Mapping[str, FusedOpCost] = field(default_factory=dict)
    roof_p: float = 4.0
    fused_eta: float = 0.85
    eta_by_architecture: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def eta_on(self, device: DeviceSpec) -> tuple[float, ...]:
        """η per class on ``device``: its architecture's where one was measured, else ``eta``."""
        return self.eta_by_architecture.get(device.architecture, self.eta)

    def predict(self, batch: OpBatch, device: DeviceSpec) -> Prediction:
        """A time per op in ms on ``device``, one batched evaluation for all of them: NaN where
        the op is unmodelled (class ``other``), no interval (no calibration covers the op
        model). Each fused kernel's time replaces its ops' own, shared among them in proportion
        to the bytes each would move alone (equally where none would); ``kernel`` names the
        fused kernel each op runs in ("" where it runs alone)."""
        others = batch.ops
        hit = resident_l2_hit(batch.resident_bytes, device)
        times = _op_times(others, device, self, hit) if others else []
        names = [""] * len(others)
        for k, t in zip(batch.kernels, _kernel_times_ms(batch.kernels, device, self, hit)):
            alone = [float(others[i].dram_bytes) for i in k.ops]
            total = sum(alone)
            for i, b in zip(k.ops, alone):
                times[i] = t * (b / total if total else 1.0 / len(k.ops))
                names[i] = k.name
        return Prediction(time_ms=torch.tensor([math.nan if t is None else t for t in times],
                                               dtype=torch.float64), kernel=tuple(names))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OpCostModel:
        classes = d["classes"]
        missing = [c for c in OP_CLASSES if c not in classes and c not in _FREE + _UNMODELLED]
        if missing:
            raise ValueError(f"op cost table lacks classes {missing}; it has {sorted(classes)}")

        def get(c: str, key: str) -> float:
            if c in _FREE:
                return 1.0 if key == "eta" else 0.0
            if c in _UNMODELLED:
                return float("nan")
            return float(classes[c][key])

        archs = sorted({a for c in OP_CLASSES if c in classes
                        for a in classes[c].get("eta_by_architecture", {})})
        by_arch = {a: tuple(float(classes[c]["eta_by_architecture"].get(a, classes[c]["eta"]))
                            if c in classes and "eta_by_architecture" in classes[c]
                            else get(c, "eta") for c in OP_CLASSES)
                   for a in archs}
        fused = d.get("fused_ops", {})
        unknown = sorted(set(fused.get("ops", {})) - set(FUSED_OPS))
        if unknown:
            raise ValueError(f"op cost table has unknown fused ops {unknown}; known: "
                             f"{list(FUSED_OPS)}")
        if fused.get("ops") and "eta" not in fused:
            raise ValueError("op cost table's fused_ops lack 'eta', the DRAM share every fused op "
                             "shares (a table with one per op is an older format); refit it "
                             "with python -m torch_gemm_cost.train.ops")
        return cls(
            eta=tuple(get(c, "eta") for c in OP_CLASSES),
            floor_ms=tuple(get(c, "floor_ms") for c in OP_CLASSES),
            launch_ms=float(d["launch_ms"]),
            provenance=dict(d.get("provenance", {})),
            fused={name: FusedOpCost(float(v["sm_bytes_per_cycle"]), float(v["floor_ms"]))
                   for name, v in fused.get("ops", {}).items()},
            roof_p=float(fused.get("roof_p", 4.0)),
            fused_eta=float(fused.get("eta", 0.85)),
            eta_by_architecture=by_arch,
        )

    @classmethod
    def read(cls, doc: Mapping[str, Any]) -> OpCostModel:
        """A table file's content (``format`` and ``version`` checked), as ``from_dict``."""
        check_format(doc, "op_costs", VERSION)
        return cls.from_dict(doc)

    @classmethod
    def load(cls, path: str | Path | None = None) -> OpCostModel:
        """The shipped table (``data/op_costs.json``) or one written by ``train.ops``; a
        missing, corrupt or mismatched file raises an error that names it."""
        if path is None:
            return load_op_costs()
        return load_file("op_costs", path, cls.read)


def load_op_costs() -> OpCostModel:
    """The shipped table, read once."""
    return load_shipped("op_costs", OpCostModel.read)


def _class_index(c: str) -> int:
    try:
        return OP_CLASSES.index(c)
    except ValueError:
        return OP_CLASSES.index("other")


def memory_time_ms(
    dram_bytes: torch.Tensor,
    kernels: torch.Tensor,
    eta: torch.Tensor,
    overhead_ms: torch.Tensor | float,
    bw_bytes_per_s: float | torch.Tensor,
    l2_hit: float = 0.0,
    l2_bw_bytes_per_s: float = math.inf,
) -> torch.Tensor:
    """kernels·overhead + bytes·(1 − h) / (η·BW) + bytes·h / BW_L2, all (N,); NaN where η is
    NaN (unmodelled). ``l2_hit`` h: the share of the bytes an L2 holding them serves."""
    return kernels * overhead_ms + (dram_bytes * (1.0 - l2_hit) / (eta * bw_bytes_per_s)
                                    + dram_bytes * l2_hit / l2_bw_bytes_per_s) * 1e3


# The A100's L2 delivers 5,120 bytes a clock to its 108 SMs (NVIDIA A100 Tensor Core GPU
# Architecture whitepaper, 2020, "L2 cache read bandwidth"): about 47 bytes per SM a clock, the
# rate taken for every GPU's L2, per SM at its boost clock
L2_BYTES_PER_CYCLE_PER_SM = 5120 / 108


def l2_bandwidth_bytes_per_s(device: DeviceSpec) -> float:
    """The rate the L2 feeds all SMs at (``L2_BYTES_PER_CYCLE_PER_SM``)."""
    return device.sm_count * L2_BYTES_PER_CYCLE_PER_SM * (device.boost_clock_mhz or 1e3) * 1e6


def resident_l2_hit(resident_bytes: int | None, device: DeviceSpec) -> float:
    """The share of a call's bytes that ``device``'s L2 serves when the call runs back to back
    on the same buffers, as a timing loop runs it: ``warm_l2_hit`` of every byte the call
    touches (``resident_bytes``: its weights and live activations). A call whose working set
    fits in L2 finds it there; one that touches more than the L2 holds evicts what it reads
    before it comes back (least recently used first) and finds none: 0, exactly, so a model
    that streams its weights is priced as before. None: unknown, 0."""
    if not resident_bytes or not device.l2_bytes or resident_bytes >= device.l2_bytes:
        return 0.0
    return float(warm_l2_hit(torch.tensor(float(resident_bytes), dtype=torch.float64),
                             device.l2_bytes))


# NeuSight's measured ops (DATA.md, vec/neusight.csv.gz) -> (op class, tensor passes: inputs
# read + output written, each (rows, cols)); a trailing u: a tensor and a scalar
VEC_OPS: dict[str, tuple[str, int]] = {
    **{op: ("elementwise", 3) for op in ("add", "mul", "div", "pow")},
    **{op: ("elementwise", 2) for op in ("addu", "mulu", "divu", "powu", "relu", "tanh", "gelu")},
    "ln": ("norm", 2),
    "softmax": ("softmax", 2),
}


def measured_op_times_ms(
    ops: Sequence[str],
    elem_bytes: Sequence[int],
    rows: Sequence[int],
    cols: Sequence[int],
    fused: Sequence[bool],
    device: DeviceSpec,
    model: OpCostModel | None = None,
) -> list[float]:
    """Times (ms) of measured ops in DATA.md's vec schema on ``device``, as measured: an op of
    ``fused`` is a fused kernel (``FUSED_OPS``, kernel-timed, re-run on warm buffers), else a
    NeuSight op of ``VEC_OPS`` (CUDA-event timed, its class's floor included)."""
    model = model or load_op_costs()
    out = []
    for op, e, r, c, f in zip(ops, elem_bytes, rows, cols, fused):
        if f:
            nbytes, kernels = fused_op_bytes(op, r, c, e)
            base = FUSED_ALIASES.get(op, (op, 1))[0]
            cost = model.fused.get(base)
            if cost is None:
                raise ValueError(f"the op cost table has no constants for fused op {base!r}")
            b = torch.tensor([float(nbytes)], dtype=torch.float64)
            k = torch.tensor([float(kernels)], dtype=torch.float64)
            t = fused_time_ms(b, k, cost, model.fused_eta, device, 0.0, model.roof_p,
                              warm_l2_hit(b / k, device.l2_bytes), cost.floor_ms)
        else:
            if op not in VEC_OPS:
                raise ValueError(f"unknown op {op!r}; known: "
                                 f"{', '.join(sorted(VEC_OPS) + sorted(FUSED_OPS + tuple(FUSED_ALIASES)))}")
            cls, passes = VEC_OPS[op]
            i = OP_CLASSES.index(cls)
            t = memory_time_ms(torch.tensor([float(passes * r * c * e)], dtype=torch.float64),
                               torch.ones(1, dtype=torch.float64),
                               torch.tensor(model.eta_on(device)[i]),
                               model.floor_ms[i], device.dram_bw_bytes_per_s)
        out.append(float(t[0]))
    return out


def fused_op_bytes(op: str, rows: int, cols: int, elem_bytes: int) -> tuple[int, int]:
    """(DRAM bytes, kernels) of one measured fused op on (``rows`` tokens, ``cols``) as
    DATA.md describes it; an ``op`` of ``FUSED_OPS`` or ``FUSED_ALIASES``.

    >>> fused_op_bytes("silu_and_mul_fused", 4, 11008, 2)   # reads (4, 2·11008), writes (4, 11008)
    (264192, 1)
    """
    base, kernels = FUSED_ALIASES.get(op, (op, 1))
    t, c, e = rows, cols, elem_bytes
    passes = {
        "rms_norm_fused": 2 * t * c * e + c * e,  # x read, y written, the weight read
        "layer_norm": 2 * t * c * e + 2 * c * e,  # and weight and bias
        "silu_and_mul_fused": 3 * t * c * e,  # gate and up (t, 2c) read, (t, c) written
        "rope_fused": 2 * t * c * e + 8 * t,  # q and k in place, the int64 positions
        "gelu": 2 * t * c * e,
        "add": 3 * t * c * e,
        "embedding": 2 * t * c * e + 8 * t,  # the rows gathered and written, int64 ids
    }
    if base not in passes:
        raise ValueError(f"unknown fused op {op!r}; known: {', '.join(FUSED_OPS + tuple(FUSED_ALIASES))}")
    return kernels * passes[base], kernels


def fused_time_ms(
    dram_bytes: torch.Tensor,
    kernels: torch.Tensor,
    cost: FusedOpCost,
    eta: float,
    device: DeviceSpec,
    overhead_ms: float,
    roof_p: float,
    l2_hit: torch.Tensor | float = 0.0,
    floor_ms: float = 0.0,
) -> torch.Tensor:
    """kernels·overhead + bytes at the soft maximum of the DRAM time (at ``eta`` of the
    datasheet bandwidth) and the SM-side time, (N,).

    ``l2_hit`` (N,) is the share of the bytes a warm L2 serves (``warm_l2_hit``): a kernel
    re-run on the same buffers, as measured; inside a model each op reads fresh data (0).
    ``floor_ms``: an isolated kernel's floor, to price a measured kernel (``fused_time_ms_of``)."""
    return fused_time_ms_of(dram_bytes, kernels, torch.tensor(eta, dtype=torch.float64),
                            torch.tensor(cost.sm_bytes_per_cycle, dtype=torch.float64),
                            device.dram_bw_bytes_per_s,
                            device.sm_count * (device.boost_clock_mhz or 1e3) * 1e6,
                            overhead_ms, roof_p, l2_hit, floor_ms)


def fused_time_ms_of(
    dram_bytes: torch.Tensor,
    kernels: torch.Tensor,
    eta: torch.Tensor,
    sm_bytes_per_cycle: torch.Tensor,
    dram_bw_bytes_per_s: torch.Tensor | float,
    sm_cycles_per_s: torch.Tensor | float,
    overhead_ms: torch.Tensor | float,
    roof_p: torch.Tensor | float,
    l2_hit: torch.Tensor | float = 0.0,
    floor_ms: torch.Tensor | float = 0.0,
) -> torch.Tensor:
    """``fused_time_ms`` on tensors, (N,) each or scalars, differentiable in the constants.

    ``floor_ms``: the shortest an isolated kernel runs (its latency chain), joined to the
    DRAM and SM times by the same soft maximum; ``overhead_ms`` adds per kernel."""
    dram_s = dram_bytes * (1.0 - l2_hit) / (eta * dram_bw_bytes_per_s) / kernels  # (N,)
    sm_s = dram_bytes / (sm_bytes_per_cycle * sm_cycles_per_s) / kernels  # (N,)
    floor_s = torch.as_tensor(floor_ms, dtype=torch.float64) * 1e-3
    hi = torch.maximum(torch.maximum(dram_s, sm_s), floor_s).clamp(min=1e-30)
    each = hi * ((dram_s / hi) ** roof_p + (sm_s / hi) ** roof_p
                 + (floor_s / hi) ** roof_p) ** (1.0 / roof_p)
    return kernels * (overhead_ms + each * 1e3)


def warm_l2_hit(working_set_bytes: torch.Tensor, l2_bytes: torch.Tensor | float,
                share: float = 0.5, steepness: float = 4.0) -> torch.Tensor:
    """Share of a re-run kernel's bytes a warm L2 serves: 1 / (1 + (bytes / (share·L2))^s),
    (N,); the measured repeats run on the same buffers, so a working set well inside the L2
    stays there."""
    return 1.0 / (1.0 + (working_set_bytes / (share * l2_bytes)) ** steepness)


@dataclass(frozen=True)
class OpBatch:
    """N non-GEMM ops to price together (``OtherOp``, in capture order: a backward op finds
    its forward twin among them), and the fused kernels that run some of them (``FusedKernel``,
    ``compiled.fusion``: the ops as ``torch.compile`` fuses them, by index into ``ops``)."""

    ops: tuple[OtherOp, ...]
    kernels: tuple[FusedKernel, ...] = ()
    # every byte the call touches (its weights and live activations): where they fit in the
    # L2, back-to-back calls read them from it (``resident_l2_hit``); None: unknown
    resident_bytes: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(self.ops))
        object.__setattr__(self, "kernels", tuple(self.kernels))
        for k in self.kernels:
            bad = [i for i in k.ops if not 0 <= i < len(self.ops)]
            if bad:
                raise ValueError(f"fused kernel {k.name!r} runs op {bad[0]}, but the batch "
                                 f"holds ops 0 to {len(self.ops) - 1}")

    def __len__(self) -> int:
        return len(self.ops)


def _kernel_times_ms(kernels: Sequence[FusedKernel], device: DeviceSpec, model: OpCostModel,
                     l2_hit: float) -> list[float]:
    """Each fused kernel's time: its launches, and its bytes at its fused op's rates
    (``FUSED_OPS``) or its class's η, the share ``l2_hit`` of them from the L2."""
    out = []
    for k in kernels:
        nbytes = torch.tensor([float(k.dram_bytes)], dtype=torch.float64)
        launches = torch.tensor([float(k.launches)], dtype=torch.float64)
        cost = model.fused.get(k.op_class)
        if cost is not None:
            t = fused_time_ms(nbytes, launches, cost, model.fused_eta, device, model.launch_ms,
                              model.roof_p, l2_hit)
        else:
            eta = model.eta_on(device)[_class_index(_FUSED_CLASS.get(k.op_class, k.op_class))]
            t = memory_time_ms(nbytes, launches, torch.tensor(eta), model.launch_ms,
                               device.dram_bw_bytes_per_s, l2_hit,
                               l2_bandwidth_bytes_per_s(device))
        out.append(float(t[0]))
    return out




def _op_times(others: Sequence[OtherOp], device: DeviceSpec, model: OpCostModel,
              l2_hit: float) -> list[float | None]:
    forward = {op.node: op for op in others if op.phase == "forward"}
    rows = [_row(op, forward.get(op.node)) for op in others]
    for i, (fused_bytes, fused_kernels) in _dropout_fusion(others).items():
        rows[i] = (rows[i][0], fused_bytes, fused_kernels, 0.0)
    # (N,) each
    cls = torch.tensor([r[0] for r in rows], dtype=torch.long)
    dram = torch.tensor([r[1] for r in rows], dtype=torch.float64)
    kernels = torch.tensor([r[2] for r in rows], dtype=torch.float64)
    on_chip_flops = torch.tensor([r[3] for r in rows], dtype=torch.float64)
    eta = torch.tensor(model.eta_on(device), dtype=torch.float64)[cls]
    time = memory_time_ms(dram, kernels, eta, model.launch_ms, device.dram_bw_bytes_per_s,
                          l2_hit, l2_bandwidth_bytes_per_s(device))
    # a row-wise kernel with fewer rows than SMs streams at its blocks' rate, a row-wise op's
    # bytes all, a statistics norm's first pass (rows.py): the time past the DRAM's
    row_bw = torch.tensor([row_bandwidth_bytes_per_s(op, device) for op in others],
                          dtype=torch.float64)  # (N,)
    slow = torch.tensor([limited_bytes(op, r[1], _elem_bytes(op)) if op.phase == "forward"
                         else 0.0 for op, r in zip(others, rows)], dtype=torch.float64)  # (N,)
    lag_s_per_byte = (1.0 / row_bw - 1.0 / (eta * device.dram_bw_bytes_per_s)).clamp(min=0.0)
    time = time + slow * lag_s_per_byte * 1e3
    vector_flops_per_s = device.peak("fp32") or device.peak_flops_per_s("float32")
    time = time + on_chip_flops / vector_flops_per_s * 1e3
    # a depthwise convolution in PyTorch's own kernel issues more than its bytes take (stencil.py)
    native = [i for i, op in enumerate(others) if runs_native(op, device)]
    if native:
        at = torch.tensor(native, dtype=torch.long)
        launch_ms = kernels[at] * model.launch_ms  # (n,)
        time[at] = launch_ms + depthwise_time_ms([others[i] for i in native],
                                                 time[at] - launch_ms, device, model.roof_p)
    # an op on an empty tensor launches nothing (PyTorch returns early); the optimizer's update
    # runs over the parameters whatever the batch. NB: a zero-fill of a weight gradient is free
    empty = torch.tensor([op.numel == 0 and op.phase != "optimizer" for op in others])
    time = torch.where(empty & ~torch.isnan(time), torch.zeros_like(time), time)
    out: list[float | None] = [None if math.isnan(t) else float(t) for t in time.tolist()]
    # eager ops that run as one of the fused kernels: torch's embedding gather and fused RMSNorm
    for i, op in enumerate(others):
        name = _EAGER_FUSED.get(_base(op)) if op.phase == "forward" else None
        cost = model.fused.get(name) if name else None
        if cost is not None and out[i] is not None and op.numel:
            t = fused_time_ms(torch.tensor([float(op.dram_bytes)], dtype=torch.float64),
                              torch.ones(1, dtype=torch.float64), cost, model.fused_eta,
                              device, model.launch_ms, model.roof_p, l2_hit)
            out[i] = float(t[0])
    # a recurrent layer's cell kernels: cuDNN issues its steps from C++ far faster than they
    # run, so each costs its kernel time (a fused elementwise kernel's: floor and rates), not a
    # kernel's share of an eager stream (launch_ms)
    cell = model.fused.get("add")
    steps = [i for i, op in enumerate(others) if cell is not None and out[i] is not None
             and op.phase == "forward" and f".{RNN_STEP}." in op.node]
    if cell is not None and steps:
        nbytes = torch.tensor([float(others[i].dram_bytes) for i in steps], dtype=torch.float64)
        cells = fused_time_ms(nbytes, torch.ones_like(nbytes), cell, model.fused_eta, device,
                              0.0, model.roof_p, l2_hit, cell.floor_ms)  # (n,)
        for i, t in zip(steps, cells.tolist()):
            out[i] = t
    return out


# the op class a fused op's kernel falls back to in a table without fused-op constants
_FUSED_CLASS: dict[str, str] = {"rms_norm_fused": "norm", "layer_norm": "norm",
                                "silu_and_mul_fused": "elementwise", "rope_fused": "elementwise",
                                "gelu": "elementwise", "add": "elementwise",
                                "embedding": "embedding"}
# eager ATen ops that are one of ``FUSED_OPS``' kernels
_EAGER_FUSED: dict[str, str] = {"embedding": "embedding", "rms_norm": "rms_norm_fused",
                                "_fused_rms_norm": "rms_norm_fused"}


def _row(op: OtherOp, fwd: OtherOp | None) -> tuple[int, float, float, float]:
    """(class index, DRAM bytes, kernels, on-chip FLOPs) of one op."""
    if op.op_class in _FREE or op.phase == "backward" and _base(op) in _NO_BACKWARD_KERNEL:
        return _class_index("view"), 0.0, 0.0, 0.0
    if op.op_class == "attention" or op.op.endswith("scaled_dot_product_attention"):
        # inside the fused kernel: scores stay on chip; the mask (if any) is read
        return _class_index("attention"), float(op.dram_bytes), 0.0, float(op.flops)
    base = _base(op)
    index = _class_index(
        _OTHER_AS.get(base, op.op_class) if op.op_class == "other" else op.op_class
    )
    if op.computes_stats:  # a plain reduction, then an elementwise transform (rows.py)
        index = _class_index("elementwise")
    if op.phase != "backward" or fwd is None:  # a backward kernel recorded with its own bytes
        factor, kernels = pass_factor(op, base, _elem_bytes(op))  # re-reads (rows.py)
        return index, factor * float(op.dram_bytes), float(kernels), 0.0
    fwd_bytes = float(fwd.dram_bytes)
    full = _full_operands(fwd, fwd_bytes)
    if base in ("mul", "div"):
        # two full operands: dy·b and dy·a, 3 passes each; by a scalar: dy·c, as forward
        factor, kernels = (2.0, 2) if full else (1.0, 1)
    else:
        factor, kernels = BACKWARD.get(base, _BACKWARD_DEFAULT)
    return index, factor * fwd_bytes, float(kernels), 0.0


def _base(op: OtherOp) -> str:
    """``aten.add_.Tensor`` / ``aten.add_`` -> ``add``."""
    parts = op.op.split(".")
    name = parts[1] if len(parts) > 1 and parts[0] in ("aten", "prims") else parts[-1]
    return name.rstrip("_")


def _elem_bytes(op: OtherOp) -> int:
    return DTYPES[op.dtype].in_bytes if op.dtype in DTYPES else 4


def _full_operands(fwd: OtherOp, fwd_bytes: float) -> bool:
    """Whether a binary op read two full-size operands (3 tensor passes, not 2)."""
    return fwd_bytes / max(fwd.numel * _elem_bytes(fwd), 1) >= 2.5


# ops of class "other" that run a plain memory-bound kernel
_OTHER_AS: dict[str, str] = {
    "bernoulli": "elementwise",
    "uniform": "elementwise",
    "normal": "elementwise",
    "nll_loss_forward": "reduction",
    "nll_loss_backward": "elementwise",
    "nll_loss2d_forward": "reduction",
    "fill": "elementwise",
    "zero": "elementwise",
    "masked_fill": "elementwise",
    "clamp": "elementwise",
}


def dropout_calls(others: Sequence[OtherOp]) -> dict[int, int]:
    """The forward ops of each dropout captured as its decomposition, by index into ``others``
    -> the index of its ``bernoulli_``: on a GPU the ``bernoulli_`` (the mask), ``div_``
    (mask / (1 - p)) and ``mul`` (x · mask) are one ``native_dropout`` call and kernel."""
    out: dict[int, int] = {}
    pending: dict[tuple[str, int], tuple[list[str], int]] = {}  # (module, numel) -> still to come
    for i, op in enumerate(others):
        if op.phase != "forward":
            continue
        base, key = _base(op), (op.module, op.numel)
        if base == "bernoulli":
            out[i] = i
            pending[key] = (["div", "mul"], i)
        elif key in pending and pending[key][0] and pending[key][0][0] == base:
            pending[key][0].pop(0)
            out[i] = pending[key][1]
    return out


def _dropout_fusion(others: Sequence[OtherOp]) -> dict[int, tuple[float, float]]:
    """(DRAM bytes, kernels) overrides for dropout captured as its decomposition.

    On a GPU, training-mode dropout is one fused kernel (``native_dropout``: read x, write y
    and a 1-byte mask) and its backward another (read dy and the mask, write dx). Captured
    off-GPU it shows as ``bernoulli_`` (the mask), ``div_`` (mask / (1 - p)) and ``mul``
    (x · mask) (``dropout_calls``): the bernoulli takes the fused kernel's cost, the div and
    mul are free, and the mul's backward becomes the fused backward.
    """
    out: dict[int, tuple[float, float]] = {}
    dropout_nodes: set[str] = set()  # the forward mul of each dropout
    for i, first in dropout_calls(others).items():
        op = others[i]
        if i == first:
            out[i] = (float(op.numel * (2 * _elem_bytes(op) + 1)), 1.0)
        else:
            out[i] = (0.0, 0.0)
            if _base(op) == "mul":
                dropout_nodes.add(op.node)
    for i, op in enumerate(others):
        if op.phase == "backward" and _base(op) == "mul" and op.node in dropout_nodes:
            out[i] = (float(op.numel * (2 * _elem_bytes(op) + 1)), 1.0)
    return out
