"""The hybrid predictor: tile/wave physics, a cache model, instruction-aware intensity, a
two-sided roofline and a small utilization MLP, trained jointly on measured GEMMs.

    Td = max_p(NumWave · (OpsPerWave / min(Peak_tile, I · MemBw) + c0),  Bytes / (η·BW))
         / util  ⊕  launch

Peak_tile is the dtype's datasheet peak times a fitted efficiency (one per precision class,
features.PEAK_KEYS: one for all of NVIDIA's tensor-core floats), the SIMT issue share and the
share of its top clock the board holds at this GEMM's activity (power.py: both from catalog
facts, the SM's issue width, the board's base clock and class: a GeForce board's matrix units
run above its rated boost), and a load-issue limit for small tiles. c0 is a fixed per-wave cost (prologue and epilogue) of SIMT kernels. The min is a
p-norm soft-min, ⊕ is a fitted p-norm (between a sum and a max), and max_p is a p-norm with
a fitted p of its own: the DRAM roof, where Bytes is what A, B and C hold (each crosses DRAM at
least once, whatever the caches serve) and η·BW the sustained DRAM bandwidth. The candidate (tile,
split-K) is the one with the lowest time after a learned preference per engine (none on the
large-tile engine of Hopper on, whose only rows are the B200's tables). Batched GEMMs
add one per kernel-library family (features.FAMILIES): strided-batched SGEMM runs one kernel for
every shape (A100: 128x128, Pascal: 128x64), and GPUs of a family share it, so a held-out A100
or P4 inherits it; a family never seen gets the shared preference alone. Non-batched GEMMs keep
the shared preference only: there cuBLAS picks by shape, which a constant per family cannot
follow.

A GEMV on the CUDA cores (n or m = 1 in fp32, tf32, fp64, ...) runs no tile: cuBLAS's gemv
kernels stream A, B and C once, and Td is that stream, Bytes / (η·BW), with util 1 (gemv.py).

launch is one fitted floor per timing (TIMINGS) with an offset per data source. A
kernel-timed floor is the GPU's own time for its smallest GEMM, a fixed count of SM clocks (CTA
start, the first tiles' round trip, the epilogue), so it scales as 1 / boost clock: the median
of aiconfigurator's bf16 GEMMs of at most 2^20 FLOPs (kernel time) is 4.00 µs on the A100, 2.69
on the H200 and 2.19 on the L40S, 5,300-5,600 clocks each, and 4,200 clocks on the B200. An
event- or table-timed floor is the host's and does not.

NB: the chosen tile is an envelope over plausible kernels, not always the kernel cuBLAS runs.

Every stage is a batched torch function (see tiles, cache, intensity, mlp), so one call predicts
thousands of GEMMs and training backpropagates through the whole chain. Ablations are switches of
the same class.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from ...hardware.catalog import DeviceSpec, get_device
from ...hardware.dtypes import FP8_KERNELS
from ...records.types import DTYPE_NAMES
from ...suggest import check_choice, unknown
from ..base import Estimator, GemmBatch, Prediction, read_fitted
from ..base import inv_softplus as _inv_softplus
from ..intervals import gemm_interval
from ..registry import SHIPPED, check_format
from .cache import L2Geometry, effective_bandwidth, grid_dram_bandwidth, l2_geometry, l2_hit_rate
from .cast import cast_times
from .features import FAMILIES, MLP_FEATURES, PEAK_KEYS, DeviceTable, RowInputs, mlp_features
from .gemv import gemv_rows, gemv_seconds
from .intensity import TileTraffic, intensity, library_vector_bytes, narrow_loads, tile_traffic
from .mlp import MLP_PARAM_NAMES, init_mlp, mlp_utilization
from .power import simt_issue_share, sustained_clock_share
from .roofline import impossible_rows
from .tiles import ENGINES, candidate_table, mma_row_share, tile_grid

__all__ = ["FORMAT", "SOURCES", "TIMINGS", "HybridPredictor", "variants"]

log = logging.getLogger(__name__)

FORMAT = SHIPPED["hybrid"].format
TIMINGS: tuple[str, ...] = ("kernel", "event", "table")
# the SM clock at which exp(launch_log_ms["kernel"]) is the kernel floor in ms (the prior
# 0.004 ms is 6,000 clocks)
FLOOR_REF_CLOCK_HZ = 1.5e9
SOURCES: tuple[str, ...] = ("neusight", "neusight-test", "vidur", "deepbench", "xla-ptable",
                            "llmcompass", "aiconfigurator", "tgc-align", "calibrate")
# sources a fit leaves out, with why: their boards run physics the model lacks, and fitting them
# moves the shared efficiencies of every other GPU. The RTX 3090's HF fp16 GEMMs (GeForce: a
# boost clock above the rated one, fp16 tensor math with fp32 accumulation at half rate) pulled
# the datacenter parts' fp16/bf16 rows 2-4 points worse in-sample (A100 vidur 9.3 -> 12.9%,
# H200 bf16 10.3 -> 13.5%); they are scored held out, never fitted, until the board is modelled.
UNFITTED_SOURCES: dict[str, str] = {
    "llmservingsim": "GeForce clocks and half-rate fp16 accumulation are not modelled",
}
_HYPER = ("use_cache", "use_instr", "use_mlp", "per_family", "loss", "hidden", "steps", "lr", "softmin_tau",
          "rows_per_group", "weight_decay", "seed", "default_timing", "candidates_kept",
          "refresh_every", "balance", "name")


# without per-family terms, AMD's matrix-core precisions take NVIDIA's shared efficiencies
_FP8_DTYPE = torch.tensor([name.startswith("float8") for name in DTYPE_NAMES])
_SHARED_KEY = torch.tensor([PEAK_KEYS.index("tensor_float" if k.startswith("amd_") else k)
                            for k in PEAK_KEYS])
# tf32 GEMVs run cuBLAS's CUDA-core gemv kernels, as fp32 ones do (gemv.py)
_TF32_DTYPE = torch.tensor([name == "tf32" for name in DTYPE_NAMES])


def _pnorm(a: torch.Tensor, b: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """(aᵖ + bᵖ)^(1/p), written relative to ``a`` so float32 never overflows: between a + b
    (p = 1) and max(a, b) (large p)."""
    return a * (1.0 + (b / a) ** p) ** (1.0 / p)


def _logit(x: float) -> float:
    return math.log(x / (1.0 - x))


class HybridPredictor(Estimator):
    """Physics + utilization MLP; implements ``Predictor``.

    Hyperparameters (stored as given, scikit-learn style):
      use_cache / use_instr / use_mlp: ablation switches (cache model, λ term, MLP).
      per_family: keep the terms that specialise by kernel-library family, the batched-GEMM
      tile preference per family and AMD's own efficiency per precision; False shares NVIDIA's.
      loss: "log" (MSE on log time, i.e. relative error) or "mse" (plain MSE on time).
      hidden: MLP width. steps, lr: full-batch Adam. softmin_tau: final temperature of the
      soft-min over candidates (in log time) during training, annealed from 10x.
      rows_per_group: rows sampled per (gpu, source, dtype) group per fit. balance: "chip" gives
      every chip equal weight, shared equally by its groups (boards of one chip pool); "group"
      gives every group equal weight. weight_decay: on MLP
      weights. seed: all randomness.
      default_timing: launch overhead ``predict`` adds: "kernel" (GPU time), "event" or "table".
      candidates_kept, refresh_every: training soft-mins over the K fastest candidates, re-picked
      every ``refresh_every`` steps (inference always takes the min over all).
    """

    version = "15"

    # fitted state (set by fit, set_metadata or load)
    params_: dict[str, torch.Tensor]
    metadata_: dict[str, Any]
    loss_history_: list[tuple[int, float]]
    n_train_rows_: int

    def __init__(
        self,
        *,
        use_cache: bool = True,
        use_instr: bool = True,
        use_mlp: bool = True,
        per_family: bool = True,
        loss: str = "log",
        hidden: int = 16,
        steps: int = 1000,
        lr: float = 0.03,
        softmin_tau: float = 0.05,
        rows_per_group: int = 600,
        weight_decay: float = 1e-3,
        seed: int = 0,
        default_timing: str = "kernel",
        candidates_kept: int = 6,
        refresh_every: int = 25,
        balance: str = "chip",
        name: str | None = None,
    ) -> None:
        check_choice("loss", loss, ("log", "mse"))
        check_choice("balance", balance, ("chip", "group"))
        check_choice("default_timing", default_timing, TIMINGS)
        self.use_cache = use_cache
        self.use_instr = use_instr
        self.use_mlp = use_mlp
        self.per_family = per_family
        self.loss = loss
        self.hidden = hidden
        self.steps = steps
        self.lr = lr
        self.softmin_tau = softmin_tau
        self.rows_per_group = rows_per_group
        self.weight_decay = weight_decay
        self.seed = seed
        self.default_timing = default_timing
        self.candidates_kept = candidates_kept
        self.refresh_every = refresh_every
        self.balance = balance
        self.name = name or "hybrid"
        self._table = candidate_table()
        self._tau = softmin_tau
        self._devices: dict[DeviceSpec, DeviceTable] = {}

    # ---------------------------------------------------------------- parameters
    def _init_params(self) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed)
        f64 = torch.float64

        def full(n: int, v: float) -> torch.Tensor:
            return torch.full((n,), v, dtype=f64)

        p = {
            "eta_dram": torch.tensor([_logit(0.8)], dtype=f64),  # sigmoid
            "l2_share": torch.tensor([_logit(0.5)], dtype=f64),  # sigmoid
            "l1_bytes_per_clk": torch.tensor([_inv_softplus(1.0)], dtype=f64),  # ×128 B/clk/SM
            "l2_bytes_per_clk": torch.tensor([_inv_softplus(1.0)], dtype=f64),  # ×64 B/clk/SM
            "h1": torch.tensor([0.0, 0.0, -2.0], dtype=f64),  # weights on (tile reuse, H2), bias
            "lambda": torch.tensor([_inv_softplus(2.0), _inv_softplus(2.0)], dtype=f64),
            "peak_eff": full(len(PEAK_KEYS), _logit(0.8)),  # sigmoid, per PEAK_KEYS
            # (simt, matrix): log of the activity at which a board holds its base clock at its
            # power limit, relative to a GEMM running its engine flat out (power.py)
            "clock_base_activity": torch.tensor([math.log(3.4), math.log(6.9)], dtype=f64),
            "clock_gamma": torch.tensor([_inv_softplus(2.0)], dtype=f64),  # +1: P ∝ f^γ
            "power_q": torch.tensor([_inv_softplus(8.0)], dtype=f64),
            # SIMT SGEMM: instructions other than FMAs (shared-memory loads, address and loop
            # arithmetic) per FMA; a CUTLASS SIMT mainloop with an 8x8 thread tile issues 64 FFMA
            # with 4 LDS.128 per k step and about 2 more amortized, so 6/64 to start
            "simt_overhead_per_fma": torch.tensor([_inv_softplus(6.0 / 64.0)], dtype=f64),
            "roof_p": torch.tensor([_inv_softplus(3.0)], dtype=f64),
            "dram_p": torch.tensor([_inv_softplus(7.0)], dtype=f64),  # +1
            # SIMT: fixed cycles per wave (prologue, pipeline fill, epilogue), in thousands
            "simt_wave_kcycles": torch.tensor([_inv_softplus(1.0)], dtype=f64),
            "issue_fma_per_load": full(len(ENGINES), _inv_softplus(0.5)),  # per ENGINES
            # SM cycles per warp-wide load in NVIDIA's misaligned matrix kernels (intensity.py)
            "misaligned_load_cycles": torch.tensor([_inv_softplus(4.0)], dtype=f64),
            # an fp8 GEMM's kernel (FP8_KERNELS) holds a level of its own on NVIDIA's matrix
            # units: the share of the tensor-core peak its main loop keeps (sigmoid)
            "fp8_kernel_eff": full(len(FP8_KERNELS), _logit(0.9)),
            "launch_log_ms": torch.tensor([math.log(0.004), math.log(0.02), math.log(0.003)],
                                          dtype=f64),  # per TIMINGS
            "launch_source": full(len(SOURCES), 0.0),  # log offset per SOURCES
            "launch_p": torch.tensor([_inv_softplus(0.5)], dtype=f64),  # +1
            # (engines, unbatched/batched, C)
            "tile_pref": torch.zeros((len(ENGINES), 2, self._table.tile_m.shape[1]), dtype=f64),
            # (families, engines, C): added to tile_pref of batched GEMMs (zero for a family
            # never seen)
            "tile_pref_family": torch.zeros(
                (len(FAMILIES), len(ENGINES), self._table.tile_m.shape[1]), dtype=f64),
        }
        p.update(init_mlp(len(MLP_FEATURES), self.hidden, gen))
        return p

    def trainable_names(self) -> tuple[str, ...]:
        """Parameters that affect predictions under the current switches."""
        names = ["eta_dram", "peak_eff", "clock_base_activity", "clock_gamma", "power_q",
                 "simt_overhead_per_fma", "roof_p", "dram_p", "simt_wave_kcycles", "tile_pref",
                 *(["tile_pref_family"] if self.per_family else []),
                 "issue_fma_per_load", "launch_log_ms", "launch_source", "launch_p",
                 "misaligned_load_cycles", "fp8_kernel_eff"]
        if self.use_cache:
            names += ["l2_share", "l1_bytes_per_clk", "l2_bytes_per_clk", "h1"]
        if self.use_instr:
            names += ["lambda"]
        if self.use_mlp:
            names += list(MLP_PARAM_NAMES)
        return tuple(names)

    def _params(self) -> dict[str, torch.Tensor]:
        params = getattr(self, "params_", None)
        if params is None:
            raise ValueError(
                f"{self.name} predictor has no weights yet: call fit(...) or "
                "HybridPredictor.load(path) first"
            )
        return params

    # ---------------------------------------------------------------- the model
    def _geometry(self, x: RowInputs) -> dict[str, torch.Tensor]:
        """Everything that does not depend on fitted parameters: per-row (N,) and per-candidate
        (N, C) tensors. Training computes it once per fit."""
        g = x.gemms
        b, m, n, k = (torch.clamp(t, min=1.0) for t in (g.batch, g.m, g.n, g.k))
        grid = tile_grid(b, m, n, k, x.engine, x.sm_count, x.regfile_bytes, self._table)
        l2 = l2_geometry(grid, b, m, n, k, g.in_bytes)
        traffic = tile_traffic(grid, g.in_bytes, g.out_bytes, g.a_align_bytes, g.b_align_bytes,
                               g.c_align_bytes, g.b_bytes)
        narrowest = library_vector_bytes(torch.minimum(torch.minimum(
            g.a_align_bytes, g.b_align_bytes), g.c_align_bytes))
        work = grid.waves * grid.ops_per_wave
        # mixed-input kernels run the activations in 16-row MMA steps, not a whole tile's
        # rows: Marlin's m16n8k16, Machete's 16-token tiles for batches of 1-16
        # (vLLM csrc/quantization/machete/generate.py, tile_shape_mn=(128, 16))
        stepped = (g.b_bytes < g.in_bytes).unsqueeze(1)  # (N, 1) a quantized weight
        # On a board whose tensor-core floats run at half rate (GeForce), a tile taller than
        # the GEMM's m pays for its padded rows twice what a full-rate board does, and there
        # they would show: a 128-row tile of a decode GEMM takes 2·128·n·k / 78 TFLOP/s on an
        # RTX 3090 (71 at the rated boost, 1.10x at its top clock), 1.5x the time of the
        # 2·n·k bytes of its weights at 936 GB/s; yet its measured decode GEMMs (m ≤ 32, 58 MB
        # of weights or more) move the weights at 570-890 GB/s (median 770), flat in m. So
        # there the kernels that run GEMV-shaped GEMMs are priced as the mixed-input ones are:
        # 16-row MMA steps. NB: a full-rate board's padded rows mostly hide under its weights'
        # DRAM time, so there the rule would matter little; it stays off there, leaving the
        # fitted GPUs' bits alone (turning it on everywhere is a refit's question).
        stepped = stepped | (x.mma_row_steps.unsqueeze(1) & (m.unsqueeze(1) < grid.tile_m))
        if bool(stepped.any()):
            work = torch.where(stepped, work * mma_row_share(m, grid.tile_m), work)  # (N, C)
        return {
            # per row
            "nonempty": (g.batch > 0) & (g.m > 0) & (g.n > 0) & (g.k > 0),
            "b": b, "m": m, "n": n, "k": k,
            "l2_compulsory": l2.compulsory, "l2_item": l2.item,
            # per candidate
            "tile_m": grid.tile_m, "tile_n": grid.tile_n, "split_k": grid.split_k,
            "tiles": grid.tiles, "waves": grid.waves, "last_wave_fill": grid.last_wave_fill,
            "work": work, "valid": grid.valid,
            "cand": torch.arange(grid.tiles.shape[1]).expand(grid.tiles.shape),
            "reuse": torch.log2(grid.tile_m * grid.tile_n / (grid.tile_m + grid.tile_n)) / 8.0,
            "requested": l2.requested, "unique_wave": l2.unique_wave,
            "tile_ops": traffic.ops, "tile_mem": traffic.mem_bytes,
            "read_inst": traffic.read_inst, "write_inst": traffic.write_inst,
            "narrowest_load_bytes": narrowest,
            "narrow_loads": narrow_loads(grid, b, m, n, k, g.in_bytes, narrowest),
        }

    @staticmethod
    def _select(geo: dict[str, torch.Tensor], index: torch.Tensor) -> dict[str, torch.Tensor]:
        """Keep candidate columns ``index`` (N, K) of a geometry."""
        width = geo["tiles"].shape[1]
        return {name: (t.gather(1, index) if t.dim() == 2 and t.shape[1] == width > 1 else t)
                for name, t in geo.items()}

    def _forward(self, x: RowInputs, source: torch.Tensor, soft: bool,
                 geo: dict[str, torch.Tensor] | None = None,
                 quantized: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Per-row predictions and intermediates, stage by stage. ``source`` indexes SOURCES
        (-1: none). ``quantized`` (N,): elements of A cast to fp8 by a kernel of its own before
        the GEMM (the time includes it). Computes in the rows' float dtype (float32 at inference,
        float64 in training)."""
        p = {k: v.to(x.sm_count.dtype) for k, v in self._params().items()}
        geo = self._geometry(x) if geo is None else geo
        peak = self._sustained_peak(p, x)  # stage 4's compute side: (N,) at full clock
        mem = self._memory_side(p, x, geo)  # stages 2 and 3: hit rates, bandwidth, intensity
        roof = self._tile_times(p, x, geo, peak, mem)  # stage 4: (N, C) time per candidate
        pick = self._pick_tile(p, x, geo, roof["log_td"], soft)  # stage 1's choice
        util = self._utilization(p, x, geo, mem, roof, pick)  # stage 5: (N,)
        return self._outputs(p, x, source, geo, peak, mem, roof, pick, util, quantized)

    def _sustained_peak(self, p: dict[str, torch.Tensor], x: RowInputs) -> dict[str, torch.Tensor]:
        """Datasheet peak × dtype-path efficiency × SIMT issue share (power.py), (N,), and what
        the clock model needs: a board holds a share of its boost clock at a GEMM's activity."""
        sp = torch.nn.functional.softplus
        peak_key = x.peak_key if self.per_family else _SHARED_KEY[x.peak_key]
        eff = torch.sigmoid(p["peak_eff"])[peak_key]
        simt_row = x.engine == ENGINES.index("simt")
        issue_share = torch.where(simt_row, simt_issue_share(x.issue_per_lane,
                                                             sp(p["simt_overhead_per_fma"])),
                                  torch.ones_like(eff))
        matrix = (~simt_row).long()
        # fp8 on NVIDIA: the level of the kernel that runs it (vLLM on ROCm calls
        # torch._scaled_mm, so AMD's fp8 rows keep the vendor library's)
        g = x.gemms
        fp8 = _FP8_DTYPE[g.dtype_index] & (x.family != FAMILIES.index("cdna"))
        kernel_eff = torch.sigmoid(p["fp8_kernel_eff"])[g.fp8_kernel]
        eff = eff * torch.where(fp8, kernel_eff, torch.ones_like(kernel_eff))
        return {
            "q": sp(p["power_q"]) + 0.5,
            "gamma": sp(p["clock_gamma"]) + 1.0,
            "base_activity": torch.exp(p["clock_base_activity"])[matrix].unsqueeze(1),  # (N, 1)
            "peak_full": x.peak_flops_per_s * eff * issue_share,  # (N,)
            "per_sm_ghz": x.sm_count * x.clock_hz * 1e-9,  # (N,)
        }

    def _memory_side(self, p: dict[str, torch.Tensor], x: RowInputs,
                     geo: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Stage 2, the cache model (H1, H2 and the effective bandwidth, (N, C)), and stage 3,
        the instruction-aware intensity (N, C): the FLOP/s the memory side allows."""
        sp = torch.nn.functional.softplus
        eta = torch.sigmoid(p["eta_dram"])
        dram_eff = (eta * x.dram_bw_bytes_per_s).unsqueeze(1)  # (N, 1)
        if self.use_cache:
            l2 = L2Geometry(geo["requested"], geo["unique_wave"], geo["waves"],
                            geo["l2_compulsory"], geo["l2_item"])
            h2 = l2_hit_rate(l2, x.l2_bytes, torch.sigmoid(p["l2_share"]))  # (N, C)
            h1 = 0.5 * torch.sigmoid(p["h1"][0] * geo["reuse"] + p["h1"][1] * h2 + p["h1"][2])
            clk = (x.sm_count * x.clock_hz * 1e-9).unsqueeze(1) * 1e9
            bw_l1 = sp(p["l1_bytes_per_clk"]) * 128.0 * clk
            bw_l2 = sp(p["l2_bytes_per_clk"]) * 64.0 * clk
            # a grid that keeps part of the GPU busy leaves DRAM to the SMs it uses
            dram_grid = grid_dram_bandwidth(dram_eff, bw_l2, geo["waves"], geo["last_wave_fill"])
            mem_bw = effective_bandwidth(h1, h2, bw_l1, bw_l2, dram_grid)
        else:
            h1 = h2 = torch.zeros_like(geo["tiles"])
            mem_bw = dram_eff.expand_as(geo["tiles"])
        traffic = TileTraffic(geo["tile_ops"], geo["tile_mem"], geo["read_inst"],
                              geo["write_inst"])
        if self.use_instr:
            lam = sp(p["lambda"])
            inten = intensity(traffic, lam[0], lam[1])
        else:
            inten = intensity(traffic, torch.zeros(()), torch.zeros(()))
        return {"dram_eff": dram_eff, "h1": h1, "h2": h2, "mem_bw": mem_bw, "inten": inten,
                "mem_rate": inten * mem_bw}  # (N, C) FLOP/s the memory side allows

    def _tile_times(self, p: dict[str, torch.Tensor], x: RowInputs,
                    geo: dict[str, torch.Tensor], peak: dict[str, torch.Tensor],
                    mem: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Stage 4, the two-sided roofline per candidate (N, C): the tile's compute peak under
        the clock the board holds, against the memory side; the SIMT per-wave cost, the roof of
        misaligned loads and the DRAM roof on top."""
        sp = torch.nn.functional.softplus
        g = x.gemms
        rp = sp(p["roof_p"]) + 1.0
        mem_rate = mem["mem_rate"]
        peak_full = peak["peak_full"]
        # inside the SM: a thread computing o = Tm·Tn/256 outputs does o FMAs per √o·2 operand
        # loads, so small tiles are load-issue bound below the FMA peak
        per_thread = torch.sqrt(geo["tile_m"] * geo["tile_n"] / 256.0) / 2.0  # FMA per load
        issue = sp(p["issue_fma_per_load"])[x.engine].unsqueeze(1)
        tile_full = peak_full.unsqueeze(1) * (1.0 + (issue / per_thread) ** 2) ** -0.5  # (N, C)

        def soft_roof(tile_peak: torch.Tensor) -> torch.Tensor:
            # p-norm soft-min, written relative to tile_peak so float32 never underflows
            return tile_peak * (1.0 + (tile_peak / mem_rate) ** rp) ** (-1.0 / rp)

        # activity: the unthrottled rate's share of peak, times the useful share of the
        # padded waves (a half-empty last wave leaves SMs idle and cool)
        # (dense FLOPs: a causal GEMM is priced dense, then scaled by its kept share)
        dense_flops = 2.0 * geo["b"] * geo["m"] * geo["n"] * geo["k"]
        useful = (dense_flops.unsqueeze(1) / geo["work"]).clamp(max=1.0)
        activity = (soft_roof(tile_full) / peak_full.unsqueeze(1) * useful).clamp(max=1.0)
        cap = sustained_clock_share(activity, x.base_clock_share.unsqueeze(1),
                                    peak["base_activity"], gamma=peak["gamma"],
                                    q=peak["q"])  # (N, C) share of boost clock held
        # where the vendor publishes the clock of a flat-out GEMM (activity 1), the same power
        # law holds it there (power.py); NaN elsewhere: 1, and the min leaves cap's bits alone
        cap = torch.minimum(cap, sustained_clock_share(
            activity, x.gemm_clock_share.unsqueeze(1), torch.ones_like(peak["base_activity"]),
            gamma=peak["gamma"], q=peak["q"]))
        tile_peak = tile_full * cap
        roof = soft_roof(tile_peak)
        # each SIMT wave also pays a fixed prologue and epilogue: on NeuSight's fp32 bmm rows,
        # where cuBLAS runs one kernel for every shape, time ≈ floor + waves·(c·k + c0) with
        # c0 ≈ 2.5 µs (A100-40GB) and 2.2 µs (P100), about 3000 cycles
        simt = (x.engine == ENGINES.index("simt")).to(x.clock_hz.dtype)
        wave_s = (simt * sp(p["simt_wave_kcycles"]) * 1e3 / x.clock_hz).unsqueeze(1)  # (N, 1)
        td = geo["work"] / roof + geo["waves"] * wave_s
        # an operand off 16 bytes sends NVIDIA's matrix GEMMs to kernels that load through
        # registers, 4 or 2 bytes a lane, and the SMs' load issue becomes a roof of its own:
        # every warp-wide load of A and B costs cycles on one of the busy SMs (intensity.py).
        # GEMV shapes (m or n = 1) peel misaligned rows and stay exempt.
        slow = ((x.engine != ENGINES.index("simt")) & (x.family != FAMILIES.index("cdna"))
                & (geo["narrowest_load_bytes"] < 16.0) & (geo["m"] > 1.0) & (geo["n"] > 1.0)
                ).to(td.dtype).unsqueeze(1)
        busy = torch.minimum(geo["tiles"], x.sm_count.unsqueeze(1))
        narrow_s = (sp(p["misaligned_load_cycles"]) * geo["narrow_loads"] * slow
                    / (busy * x.clock_hz.unsqueeze(1)))  # (N, C)
        td = _pnorm(td, narrow_s, rp)
        # the DRAM roof: whatever the caches serve, every operand byte crosses DRAM at least
        # once at the sustained bandwidth. The tile traffic above is what the SMs request, and
        # for a GEMV-like shape (m ≤ 64) its hit rates can put fewer bytes on DRAM than A and B
        # hold. Its p-norm has a p of its own (about 2 when fitted): DRAM streams while the SMs
        # work on what arrived, so the two overlap only in part.
        dp = sp(p["dram_p"]) + 1.0
        dram_s = (g.compulsory_bytes / mem["dram_eff"].squeeze(1)).unsqueeze(1)  # (N, 1)
        td = _pnorm(td, dram_s, dp)
        return {"log_td": torch.log(td), "cap": cap, "tile_peak": tile_peak, "wave_s": wave_s,
                "narrow_s": narrow_s, "dram_s": dram_s, "rp": rp, "dp": dp}

    def _pick_tile(self, p: dict[str, torch.Tensor], x: RowInputs, geo: dict[str, torch.Tensor],
                   log_td: torch.Tensor, soft: bool) -> dict[str, torch.Tensor]:
        """Stage 1's choice: the candidate with the lowest log time after the learned
        preference (N, 1), and the row's log time: that candidate's at inference, a soft-min
        over the candidates in training (N,)."""
        # NB: libraries do not always run the fastest tile (cuBLAS's fp32 bmm keeps 128x128 for
        # tiny matrices); a learned preference per engine and candidate shifts the choice.
        # Except on the large-tile engine (Hopper on): its only rows are the B200's tables,
        # powers of two from 256, whose preference for 256-wide tiles would price decode GEMMs
        # (m < 64) as 256-row tiles; there the fastest tile stands.
        batched = (geo["b"] > 1.0).long()
        learned = (x.engine != ENGINES.index("mma_large")).to(log_td.dtype).unsqueeze(1)
        family_pref = p["tile_pref_family"][x.family, x.engine] * float(self.per_family)
        pref = learned * (p["tile_pref"][x.engine, batched]
                          + batched.unsqueeze(1) * family_pref)
        score = log_td - pref.gather(1, geo["cand"])
        score = torch.where(geo["valid"], score, torch.full_like(score, 1e3))
        best = torch.argmin(score, dim=1, keepdim=True)  # (N, 1)
        if soft:
            weight = torch.softmax(-score / self._tau, dim=1)
            log_t = (weight * log_td).sum(dim=1)
        else:
            log_t = log_td.gather(1, best).squeeze(1)
        return {"score": score, "best": best, "log_t": log_t}

    @staticmethod
    def _chooser(pick: dict[str, torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
        """A function taking an (N, C) tensor to the chosen candidate's column, (N,)."""
        best = pick["best"]  # (N, 1)

        def chosen(t: torch.Tensor) -> torch.Tensor:
            return t.gather(1, best).squeeze(1)

        return chosen

    def _utilization(self, p: dict[str, torch.Tensor], x: RowInputs,
                     geo: dict[str, torch.Tensor], mem: dict[str, torch.Tensor],
                     roof: dict[str, torch.Tensor], pick: dict[str, torch.Tensor]
                     ) -> torch.Tensor:
        """Stage 5, the utilization MLP on the chosen tile's device-relative features, (N,);
        1 without the MLP."""
        if not self.use_mlp:
            return torch.ones_like(pick["log_t"])
        g = x.gemms
        c = self._chooser(pick)
        m, n, k, b = geo["m"], geo["n"], geo["k"], geo["b"]
        feats = mlp_features({
            "m": m, "n": n, "k": k, "batch": b, "tiles": c(geo["tiles"]),
            "waves": c(geo["waves"]), "last_wave_fill": c(geo["last_wave_fill"]),
            "split_k": c(geo["split_k"]),
            "a_align": g.a_align_bytes, "b_align": g.b_align_bytes,
            "c_align": g.c_align_bytes, "in_bytes": g.in_bytes,
            "h1": c(mem["h1"]), "h2": c(mem["h2"]),
            "inst_per_tile": c(geo["read_inst"] + geo["write_inst"]),
            "intensity_over_ridge": c(mem["inten"]) * c(mem["mem_bw"]) / c(roof["tile_peak"]),
            "sm_count": x.sm_count,
            "l2_over_working_set": x.l2_bytes / ((m * k + k * n + m * n) * g.in_bytes),
            "engine": x.engine, "l1_per_sm": x.l1_bytes,
            "b_transposed": g.b_transposed,
        })
        return mlp_utilization(feats, p)

    def _outputs(self, p: dict[str, torch.Tensor], x: RowInputs, source: torch.Tensor,
                 geo: dict[str, torch.Tensor], peak: dict[str, torch.Tensor],
                 mem: dict[str, torch.Tensor], roof: dict[str, torch.Tensor],
                 pick: dict[str, torch.Tensor], util: torch.Tensor,
                 quantized: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """The GEMM's time with its launch (and an input cast where one runs first), and every
        intermediate ``explain`` shows, (N,) each."""
        sp = torch.nn.functional.softplus
        nonempty = geo["nonempty"]
        # never below FLOPs / peak nor compulsory bytes / bandwidth, by construction: every
        # candidate's work covers the FLOPs at no more than the datasheet peak, the DRAM roof
        # moves A, B and C at no more than the datasheet bandwidth, and util ≤ 1
        gemm_s = torch.exp(pick["log_t"]) / util
        # a GEMV on the CUDA cores runs no tile: it streams its operands once (gemv.py)
        gemv = gemv_rows(geo["m"], geo["n"], (x.engine == ENGINES.index("simt"))
                         | _TF32_DTYPE[x.gemms.dtype_index])
        gemv_s = gemv_seconds(x.gemms.compulsory_bytes, mem["dram_eff"].squeeze(1),
                              2.0 * geo["b"] * geo["m"] * geo["n"] * geo["k"], peak["peak_full"])
        gemm_s = torch.where(gemv, gemv_s, gemm_s)
        launch_log = p["launch_log_ms"][x.launch]
        launch_log = launch_log + torch.where(
            source >= 0, p["launch_source"][source.clamp(min=0)], torch.zeros_like(launch_log)
        )
        # a kernel-timed floor is the GPU's own time for the smallest GEMM: a fixed number of
        # SM clocks, so it scales as 1 / clock; an event- or table-timed floor is the host's
        launch_log = launch_log + torch.where(
            x.launch == TIMINGS.index("kernel"),
            torch.log(FLOOR_REF_CLOCK_HZ / x.clock_hz), torch.zeros_like(launch_log))
        zero = torch.zeros_like(gemm_s)
        # launch and GEMM combine as a p-norm: p = 1 adds them, large p takes the larger
        lp = sp(p["launch_p"]) + 1.0
        gemm_ms, launch_ms = gemm_s * 1e3, torch.exp(launch_log)
        hi, lo = torch.maximum(gemm_ms, launch_ms), torch.minimum(gemm_ms, launch_ms)
        with_launch = _pnorm(hi, lo, lp)
        cast = cast_times(torch.zeros_like(gemm_ms) if quantized is None else quantized,
                          geo["k"], x.sm_count, mem["dram_eff"].squeeze(1))
        # the cast is a kernel of its own, launched before the GEMM
        cast_ms = torch.where(cast["cast_ms"] > 0, cast["cast_ms"] + launch_ms, zero)
        details = self._details(geo, peak, mem, roof, pick, util, gemv)
        return {
            "time_ms": torch.where(nonempty, with_launch + cast_ms, zero),
            **details,
            "launch_ms": torch.where(nonempty, torch.exp(launch_log), zero),
            **{name: torch.where(nonempty, t, zero) for name, t in cast.items()
               if name != "cast_ms"},
            "cast_ms": torch.where(nonempty, cast_ms, zero),
            "score": pick["score"],
        }

    def _details(self, geo: dict[str, torch.Tensor], peak: dict[str, torch.Tensor],
                 mem: dict[str, torch.Tensor], roof: dict[str, torch.Tensor],
                 pick: dict[str, torch.Tensor], util: torch.Tensor,
                 gemv: torch.Tensor) -> dict[str, torch.Tensor]:
        """The chosen candidate's intermediates and its time split into the compute side and
        the memory side (each with util applied), (N,) each; zero for empty GEMMs. A GEMV
        (``gemv``, gemv.py) has no tile: zero tile, split and waves, no cache hits, util 1, its
        FLOPs at the sustained peak against its bytes at the sustained DRAM bandwidth."""
        c = self._chooser(pick)
        nonempty = geo["nonempty"]
        waves = c(geo["waves"])
        zero = torch.zeros_like(waves)
        work_c = c(geo["work"])
        inten_c, bw_c = c(mem["inten"]), c(mem["mem_bw"])
        compute_ms = (work_c / c(roof["tile_peak"]) + waves * roof["wave_s"].squeeze(1)) \
            / util * 1e3
        memory_ms = work_c / (inten_c * bw_c * util) * 1e3
        dram_ms = roof["dram_s"].squeeze(1) / util * 1e3
        memory_ms = _pnorm(memory_ms, dram_ms, roof["dp"])
        # misaligned loads are issued by the SMs: their roof counts on the compute side
        load_issue_ms = c(roof["narrow_s"]) / util * 1e3
        compute_ms = _pnorm(compute_ms, load_issue_ms, roof["rp"])
        details = {
            "tile_m": c(geo["tile_m"]),
            "tile_n": c(geo["tile_n"]),
            "split_k": c(geo["split_k"]),
            "waves": torch.where(nonempty, waves, zero),
            "last_wave_fill": c(geo["last_wave_fill"]),
            "h1": c(mem["h1"]),
            "h2": c(mem["h2"]),
            "mem_bw_bytes_per_s": bw_c,
            "intensity_flops_per_byte": inten_c,
            "util": util,
            "peak_sustained_flops_per_s": peak["peak_full"] * c(roof["cap"]),
            "tile_peak_flops_per_s": c(roof["tile_peak"]),
            "compute_ms": compute_ms,
            "memory_ms": memory_ms,
            "load_issue_ms": load_issue_ms,
            "dram_ms": dram_ms,
        }
        if bool(gemv.any()):
            dram_eff = mem["dram_eff"].squeeze(1)
            flops = 2.0 * geo["b"] * geo["m"] * geo["n"] * geo["k"]
            stream_ms = roof["dram_s"].squeeze(1) * 1e3
            dram_bytes = (roof["dram_s"].squeeze(1) * dram_eff).clamp(min=1.0)  # (N,) ≥ 1 byte
            as_gemv = {
                **{name: zero for name in ("tile_m", "tile_n", "split_k", "waves",
                                           "last_wave_fill", "h1", "h2", "load_issue_ms")},
                "mem_bw_bytes_per_s": dram_eff,
                "intensity_flops_per_byte": flops / dram_bytes,
                "util": torch.ones_like(util),
                "peak_sustained_flops_per_s": peak["peak_full"],
                "tile_peak_flops_per_s": peak["peak_full"],
                "compute_ms": flops / peak["peak_full"] * 1e3,
                "memory_ms": stream_ms,
                "dram_ms": stream_ms,
            }
            details = {name: torch.where(gemv, as_gemv[name], t) for name, t in details.items()}
        return {
            "compute_bound": details["compute_ms"] >= details["memory_ms"],
            **{name: torch.where(nonempty, t, zero) if name.endswith("_ms") or name == "waves"
               else t for name, t in details.items()},
        }

    # ---------------------------------------------------------------- inference
    def _device_table(self, device: DeviceSpec) -> DeviceTable:
        table = self._devices.get(device)
        if table is None:
            table = self._devices[device] = DeviceTable.build([device])
        return table

    def predict(self, gemms: GemmBatch, device: DeviceSpec | str, *, timing: str | None = None,
                source: str | None = None) -> Prediction:
        """Predicted time per GEMM on ``device``. ``timing`` chooses the launch overhead added
        ("kernel": GPU time only, the default; "event": CUDA events around the torch op)."""
        device = get_device(device)
        timing = check_choice("timing", timing or self.default_timing, TIMINGS)
        table = self._device_table(device)
        size = len(gemms)
        peaks = table.peak_flops_per_s[0, gemms.dtype_index]
        if torch.isnan(peaks).any():
            bad = gemms.dtype_names()[int(torch.nonzero(torch.isnan(peaks))[0])]
            device.peak_flops_per_s(bad)  # raises, naming dtype and device
        rows = RowInputs.gather(
            gemms, table, torch.zeros(size, dtype=torch.long),
            torch.full((size,), TIMINGS.index(timing), dtype=torch.long),
        )
        src = SOURCES.index(source) if source in SOURCES else -1
        with torch.no_grad():
            # NB: float32 inside (twice as fast); times come back as float64
            cast = gemms.quantized_elements
            out = self._forward(rows.to(torch.float32),
                                torch.full((size,), src, dtype=torch.long), soft=False,
                                quantized=cast.to(torch.float32) if bool((cast > 0).any())
                                else None)
        details = {k: v.double() for k, v in out.items()
                   if k not in ("time_ms", "compute_bound", "score")}
        # the physical floor again in float64, so float32 rounding never undercuts it (at the
        # rows' own peak: a GeForce board's matrix units run above the datasheet's)
        floor_ms = torch.maximum(gemms.flops / rows.peak_flops_per_s,
                                 gemms.compulsory_bytes / device.dram_bw_bytes_per_s) * 1e3
        # a causal score GEMM runs only its unmasked tiles: its dense time times the kept share
        dense_ms = out["time_ms"].double() * gemms.kept_fraction
        time_ms = torch.where(gemms.flops > 0, torch.maximum(dense_ms, floor_ms),
                              torch.zeros_like(floor_ms))
        lo_ms, hi_ms = gemm_interval(gemms, device, self, time_ms)
        return Prediction(time_ms=time_ms, lo_ms=lo_ms, hi_ms=hi_ms, details=details, bound=tuple(
            "compute" if c else "memory" for c in out["compute_bound"].tolist()))

    def predict_measured(self, measured: Any) -> torch.Tensor:
        """Predicted ms for every row of a ``MeasuredGemms``, using each row's gpu, timing and
        source (many devices in one batched call)."""
        rows, source = self._rows_of(measured)
        with torch.no_grad():
            return self._forward(rows, source, soft=False,
                                 quantized=measured.quantized_elements)["time_ms"]

    def _rows_of(self, measured: Any) -> tuple[RowInputs, torch.Tensor]:
        gpus = sorted(set(measured.gpu))
        table = DeviceTable.build([measured.device(g) for g in gpus])
        index = {g: i for i, g in enumerate(gpus)}
        dev = torch.tensor([index[g] for g in measured.gpu], dtype=torch.long)
        for t in set(measured.timing):
            if t not in TIMINGS:
                raise ValueError(f"measured rows: {unknown('timing', t, TIMINGS)}")
        launch = torch.tensor([TIMINGS.index(t) for t in measured.timing], dtype=torch.long)
        source = torch.tensor([SOURCES.index(s) if s in SOURCES else -1 for s in measured.source],
                              dtype=torch.long)
        return RowInputs.gather(measured.gemms, table, dev, launch), source

    # ---------------------------------------------------------------- training
    def _training_rows(self, measured: Any) -> tuple[Any, torch.Tensor]:
        """The rows a fit uses and their weights (N,), summing to 1: at most ``rows_per_group``
        seeded-random rows of each (gpu, source, dtype) group, rows the data cannot physically
        contain (``impossible_rows``) and rows of ``UNFITTED_SOURCES`` left out. With
        ``balance="chip"`` every chip weighs the same, shared equally by its groups, so a GPU
        measured by many sources (an H200 with five precisions in two sweeps) does not
        outweigh one measured by a single source."""
        gen = torch.Generator().manual_seed(self.seed)
        keep = ~impossible_rows(measured) & torch.tensor(
            [s not in UNFITTED_SOURCES for s in measured.source], dtype=torch.bool)
        if int(keep.sum()) == 0:
            raise ValueError("no trainable rows: every measured row is flagged impossible")
        groups: dict[tuple[str, str, str], list[int]] = {}
        names = measured.gemms.dtype_names()
        for i in torch.nonzero(keep).flatten().tolist():
            groups.setdefault((measured.gpu[i], measured.source[i], names[i]), []).append(i)
        chip = {g: measured.device(g).chip or g for g in set(measured.gpu)}
        per_chip = {c: sum(1 for key in groups if chip[key[0]] == c) for c in chip.values()}
        chosen: list[int] = []
        weights: list[float] = []
        for key in sorted(groups):
            idx = torch.tensor(groups[key])
            idx = idx[torch.randperm(len(idx), generator=gen)[: self.rows_per_group]]
            chosen += idx.tolist()
            share = 1.0 / per_chip[chip[key[0]]] if self.balance == "chip" else 1.0
            weights += [share / len(idx)] * len(idx)
        w = torch.tensor(weights, dtype=torch.float64)
        return measured.select(torch.tensor(chosen)), w / w.sum()

    # ---------------------------------------------------------------- training
    def fit(self, measured: Any, *, warm_start: bool = False) -> HybridPredictor:
        """Fit every trainable parameter jointly with full-batch Adam; returns self.

        The rows and their weights are ``_training_rows``'. ``warm_start`` fine-tunes the
        current weights.
        """
        sub, w = self._training_rows(measured)
        rows, source = self._rows_of(sub)
        y = sub.latency_ms

        if not (warm_start and getattr(self, "params_", None) is not None):
            self.params_ = self._init_params()
        train_names = self.trainable_names()
        for name, t in self.params_.items():
            t.requires_grad_(name in train_names)
        opt = torch.optim.Adam([self.params_[n] for n in train_names], lr=self.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(self.steps, 1))
        log_y = torch.log(y)
        scale = float((w * y * y).sum())
        geo_all = self._geometry(rows)
        history = []
        geo = geo_all
        for step in range(self.steps):
            # anneal the soft-min from 10x its final temperature, so candidate preferences
            # get gradient early and training ends close to the inference-time min
            self._tau = self.softmin_tau * (1.0 + 9.0 * (1.0 - step / max(self.steps, 1)))
            if step % self.refresh_every == 0:
                # keep the K fastest candidates under the current weights (soft-min over those)
                with torch.no_grad():
                    score = self._forward(rows, source, soft=False, geo=geo_all)["score"]
                    keep_k = min(self.candidates_kept, score.shape[1])
                    top = torch.topk(-score, keep_k, dim=1).indices
                geo = self._select(geo_all, top)
            opt.zero_grad()
            pred = self._forward(rows, source, soft=True, geo=geo,
                                 quantized=sub.quantized_elements)["time_ms"]
            if self.loss == "log":
                loss = (w * (torch.log(pred) - log_y) ** 2).sum()
            else:
                loss = (w * (pred - y) ** 2).sum() / scale
            if self.use_mlp and self.weight_decay:
                loss = loss + self.weight_decay * sum(
                    (self.params_[n] ** 2).sum() for n in ("mlp_w1", "mlp_w2", "mlp_w3"))
            loss.backward()
            opt.step()
            sched.step()
            if step % 50 == 0 or step == self.steps - 1:
                history.append((step, float(loss.detach())))
                log.info("%s step %d loss %.5f", self.name, step, float(loss.detach()))
        self._tau = self.softmin_tau
        for t in self.params_.values():
            t.requires_grad_(False)
        self.loss_history_ = history
        self.n_train_rows_ = len(sub)
        self._devices.clear()
        return self

    # ---------------------------------------------------------------- persistence
    def set_metadata(self, metadata: Mapping[str, Any]) -> HybridPredictor:
        """Replace the provenance that ``save`` writes beside the weights; returns self."""
        self.metadata_ = dict(metadata)
        return self

    def to_dict(self, metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
        params = self._params()
        return {
            "format": FORMAT,
            "version": self.version,
            "hyperparameters": self.get_params(),
            "schema": {"mlp_features": list(MLP_FEATURES), "peak_keys": list(PEAK_KEYS),
                       "timings": list(TIMINGS), "sources": list(SOURCES)},
            "params": {k: v.detach().tolist() for k, v in params.items()},
            "metadata": dict(metadata or getattr(self, "metadata_", {}) or {}),
        }

    def save(self, path: str | Path, metadata: Mapping[str, Any] | None = None) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(metadata), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> HybridPredictor:
        """Load weights saved by ``save``. A missing, corrupt or mismatched file raises a
        ValueError (FileNotFoundError when absent) that names the file."""
        return read_fitted(path, "weights file", FORMAT, cls.from_dict)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> HybridPredictor:
        # an older model reads other features or parameters: refit rather than misread it
        check_format(doc, "hybrid", cls.version)
        hyper = dict(doc["hyperparameters"])
        unknown = set(hyper) - set(_HYPER)
        if unknown:
            raise ValueError(f"unknown hyperparameters {sorted(unknown)}")
        model = cls(**hyper)
        expected = model._init_params()
        params: dict[str, torch.Tensor] = {}
        for name, ref in expected.items():
            if name not in doc["params"]:
                raise ValueError(f"missing parameter {name!r}")
            t = torch.tensor(doc["params"][name], dtype=torch.float64)
            if t.shape != ref.shape:
                raise ValueError(f"parameter {name!r} has shape {tuple(t.shape)}, "
                                 f"expected {tuple(ref.shape)}")
            if not torch.isfinite(t).all():
                raise ValueError(f"parameter {name!r} is not finite")
            params[name] = t
        model.params_ = params
        model.metadata_ = dict(doc.get("metadata", {}))
        return model

    def physical_constants(self) -> dict[str, Any]:
        """The fitted physical constants in their units (for reports and metadata)."""
        p = self._params()
        sp = torch.nn.functional.softplus
        return {
            "eta_dram": float(torch.sigmoid(p["eta_dram"])),
            "l2_share": float(torch.sigmoid(p["l2_share"])),
            "l1_bytes_per_clk_per_sm": float(sp(p["l1_bytes_per_clk"]) * 128),
            "l2_bytes_per_clk_per_sm": float(sp(p["l2_bytes_per_clk"]) * 64),
            "lambda_read_bytes_per_inst": float(sp(p["lambda"][0])),
            "lambda_write_bytes_per_inst": float(sp(p["lambda"][1])),
            "peak_efficiency": {k: float(v) for k, v in zip(PEAK_KEYS,
                                                            torch.sigmoid(p["peak_eff"]))},
            "clock_base_activity": {
                eng: float(torch.exp(p["clock_base_activity"][i]))
                for i, eng in enumerate(("simt", "matrix"))
            },
            "power_clock_exponent": float(sp(p["clock_gamma"]) + 1.0),
            "simt_overhead_per_fma": float(sp(p["simt_overhead_per_fma"])),
            "simt_wave_cycles": float(sp(p["simt_wave_kcycles"]) * 1e3),
            "misaligned_load_cycles_per_warp_load": float(sp(p["misaligned_load_cycles"])),
            "fp8_kernel_efficiency": {k: float(v) for k, v in zip(
                FP8_KERNELS, torch.sigmoid(p["fp8_kernel_eff"]))},
            "dram_roof_p": float(sp(p["dram_p"]) + 1.0),
            # the kernel floor at FLOOR_REF_CLOCK_HZ; a GPU's own is this × reference / its clock
            "launch_ms": {t: float(torch.exp(v)) for t, v in zip(TIMINGS, p["launch_log_ms"])},
            "kernel_floor_clocks": float(torch.exp(p["launch_log_ms"][TIMINGS.index("kernel")]))
            * 1e-3 * FLOOR_REF_CLOCK_HZ,
        }


def variants(seed: int = 0, **common: Any) -> dict[str, HybridPredictor]:
    """The hybrid and its ablations, all the same class: name -> unfitted predictor."""
    specs: dict[str, dict[str, Any]] = {
        "hybrid": {},
        "no_cache": {"use_cache": False},
        "no_instr": {"use_instr": False},
        "no_mlp": {"use_mlp": False},
        "no_family": {"per_family": False},
        "neusight_style": {"use_cache": False, "use_instr": False},
        "plain_mse": {"loss": "mse"},
    }
    return {name: HybridPredictor(name=name, seed=seed, **{**common, **kw})
            for name, kw in specs.items()}


