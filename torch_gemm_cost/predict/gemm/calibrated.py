"""A device's own GEMM model, fitted to a calibration sweep of that device (``calibrate``).

Where the hybrid predictor carries what many GPUs taught it to a device it never saw, this one
knows one device only, from its own measurements: a few physical constants per dtype and a
correction from the nearest measured shapes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from ...hardware.catalog import DeviceSpec, get_device, is_cpu
from ...hardware.dtypes import resolve_dtype
from ...records.types import DTYPE_NAMES, GemmBatch
from ..base import Estimator, Prediction, bound_of, inv_softplus
from ..intervals import gemm_interval

__all__ = ["CalibratedPredictor"]

_HUBER = 0.25  # log-time error beyond which the fit's loss grows linearly (about 28%)
_PER_DTYPE = ("log_peak", "log_floor_ms", "log_floor_big_ms", "log_switch_flops", "log_m_half",
              "log_n_half", "log_k_half")
_SHARED = ("log_bw_dram", "log_bw_llc", "log_bw_out", "log_par_flops", "pack", "roof_p")
_HYPER = ("tile_n", "block", "steps", "lr", "seed", "neighbours", "radius")


def _llc_bytes(spec: DeviceSpec) -> float:
    return float(spec.l3_bytes or spec.l2_bytes or 1 << 20)


def _shape_features(gemms: GemmBatch) -> torch.Tensor:
    """(N, 4) log2 of batch, m, n, k: the space in which measured neighbours are near."""
    dims = torch.stack([gemms.batch, gemms.m, gemms.n, gemms.k], dim=1)
    return torch.log2(torch.clamp(dims, min=1.0))


class CalibratedPredictor(Estimator):
    """A device's own GEMM physics, fitted to its measurements; implements ``Predictor``.

    Per dtype d: sustained peak P_d, a call floor t0_d that steps up where the library switches
    from its small-GEMM path to the blocked one, and half-efficiency dims (m½, n½, k½). Shared:
    bandwidths of DRAM, the last-level cache and output writes, the FLOPs from which the BLAS
    uses every core, an operand re-read factor γ ∈ [1, 4] (packing) and the roofline's
    softness q. The DRAM bandwidth is held near the copy probe's figure.

        compute = 2·b·m·⌈n/Tn⌉Tn·k / (P_d · par · m/(m+m½) · n/(n+n½) · k/(k+k½))
        par     = min(fill of the cores by ⌈m/B⌉·⌈n/B⌉·b output blocks in waves,
                      share of cores the BLAS threads: a sigmoid in log FLOPs)
        memory  = γ·(A+B)·(h/BW_llc + (1-h)/BW_dram) + C/BW_out, h = share in the LLC,
                  γ = 1 for a GEMV (m or n = 1), which streams its operands unpacked
        base    = t0_d + (compute^q + memory^q)^(1/q)

    Tn is the vector-register tile along n (CPU) or the CTA tile (GPU), B the block one core or
    SM owns: on a GPU ``par`` is wave quantization with SMs for cores. The time is then the
    base times the Gaussian-weighted mean ratio measured/base of the ``neighbours`` nearest
    measured GEMMs of the same dtype (distance in log2 dims, scale ``radius``), shrunk towards
    1 where none is near. NB: no split-K, no per-layout alignment term.
    """

    name = "calibrated"
    version = "1"
    dtypes_: tuple[str, ...]

    def __init__(self, *, tile_n: int = 1, block: int = 64, steps: int = 600, lr: float = 0.05,
                 seed: int = 0, neighbours: int = 8, radius: float = 0.5) -> None:
        self.tile_n = tile_n
        self.block = block
        self.steps = steps
        self.lr = lr
        self.seed = seed
        self.neighbours = neighbours
        self.radius = radius

    # ---------------------------------------------------------------- the model
    def _local_dtype(self, gemms: GemmBatch) -> torch.Tensor:
        table = torch.full((len(DTYPE_NAMES),), -1, dtype=torch.long)
        for i, name in enumerate(self.dtypes_):
            table[DTYPE_NAMES.index(name)] = i
        local = table[gemms.dtype_index]  # (N,)
        if bool((local < 0).any()):
            bad = gemms.dtype_names()[int(torch.nonzero(local < 0)[0])]
            raise ValueError(f"calibrated profile has no {bad} measurements; calibrated "
                             f"dtypes: {', '.join(self.dtypes_)}")
        return local

    def _forward(self, gemms: GemmBatch, spec: DeviceSpec,
                 p: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The physical base time and its parts, (N,) each."""
        d = self._local_dtype(gemms)
        b, m, n, k = (torch.clamp(t, min=1.0) for t in (gemms.batch, gemms.m, gemms.n, gemms.k))
        cores = float(max(1, spec.sm_count))
        sp = torch.nn.functional.softplus
        np_ = torch.ceil(n / self.tile_n) * self.tile_n
        units = b * torch.ceil(m / self.block) * torch.ceil(n / self.block)
        waves = torch.ceil(units / cores)
        wave_fill = units / (waves * cores)
        log_flops = torch.log(2.0 * b * m * n * k)
        threads = 1.0 + (cores - 1.0) * torch.sigmoid(log_flops - p["log_par_flops"])
        par = torch.minimum(wave_fill, threads / cores)
        log_eff = (torch.log(m / (m + torch.exp(p["log_m_half"][d])))
                   + torch.log(n / (n + torch.exp(p["log_n_half"][d])))
                   + torch.log(k / (k + torch.exp(p["log_k_half"][d]))))
        log_compute = (torch.log(2.0 * b * m * np_ * k) - p["log_peak"][d] - torch.log(par)
                       - log_eff)
        ab = b * (m * k + k * n) * gemms.in_bytes
        c = b * m * n * gemms.out_bytes
        hit = torch.sigmoid(2.0 * (math.log(_llc_bytes(spec)) - torch.log(ab + c)))
        inv_bw = hit * torch.exp(-p["log_bw_llc"]) + (1.0 - hit) * torch.exp(-p["log_bw_dram"])
        # a GEMV (m or n = 1) streams its operands once; a GEMM packs them (γ reads)
        gemv = (m <= 1.0) | (n <= 1.0)
        reads = torch.where(gemv, torch.ones_like(m), 1.0 + 3.0 * torch.sigmoid(p["pack"]))
        memory = reads * ab * inv_bw + c * torch.exp(-p["log_bw_out"])
        log_memory = torch.log(memory)
        q = 1.0 + sp(p["roof_p"])
        log_s = torch.logsumexp(torch.stack([q * log_compute, q * log_memory]), dim=0) / q
        small, big = torch.exp(p["log_floor_ms"][d]), torch.exp(p["log_floor_big_ms"][d])
        floor = small + (big - small) * torch.sigmoid(2.0 * (log_flops - p["log_switch_flops"][d]))
        return {
            "time_ms": floor + torch.exp(log_s) * 1e3,
            "compute_ms": torch.exp(log_compute) * 1e3,
            "memory_ms": memory * 1e3,
            "launch_ms": floor,
            "waves": waves,
            "last_wave_fill": wave_fill,
            "util": par * torch.exp(log_eff),
            "h2": hit,
            "mem_bw_bytes_per_s": 1.0 / inv_bw,
        }

    def _correction(self, gemms: GemmBatch, chunk: int = 16384) -> torch.Tensor:
        """(N,) log ratio measured/base of the nearest measured GEMMs, shrunk towards 0."""
        x = _shape_features(gemms).float()
        d = self._local_dtype(gemms)
        out = torch.zeros(len(gemms), dtype=torch.float64)
        for j in torch.unique(d).tolist():  # one group per dtype, not per GEMM
            rows = torch.nonzero(d == j).flatten()
            ref = self.neighbour_dtype_ == j
            ref_x, ref_r = self.neighbour_x_[ref].float(), self.neighbour_log_ratio_[ref]
            if ref_x.shape[0] == 0:
                continue
            kk = min(self.neighbours, ref_x.shape[0])
            for lo in range(0, rows.shape[0], chunk):  # bounded memory: (chunk, refs)
                idx_rows = rows[lo:lo + chunk]
                near, idx = torch.topk(torch.cdist(x[idx_rows], ref_x), kk, dim=1,
                                       largest=False)  # (c, K)
                w = torch.exp(-0.5 * (near.double() / self.radius) ** 2)
                out[idx_rows] = (w * ref_r[idx]).sum(1) / (w.sum(1) + 0.5)
        return out

    def predict(self, gemms: GemmBatch, device: DeviceSpec | str) -> Prediction:
        spec = get_device(device)
        with torch.no_grad():
            out = self._forward(gemms, spec, self._params())
            corr = torch.exp(self._correction(gemms))
        empty = (gemms.batch <= 0) | (gemms.m <= 0) | (gemms.n <= 0) | (gemms.k <= 0)
        zero = torch.zeros(len(gemms), dtype=torch.float64)
        details = {k: torch.where(empty, zero, v) for k, v in out.items() if k != "time_ms"}
        details["neighbour_ratio"] = corr
        time_ms = torch.where(empty, zero, out["time_ms"] * corr)
        lo_ms, hi_ms = gemm_interval(gemms, spec, self, time_ms)
        return Prediction(time_ms=time_ms, lo_ms=lo_ms, hi_ms=hi_ms,
                          bound=bound_of(details["compute_ms"], details["memory_ms"]),
                          details=details)

    def _params(self) -> dict[str, torch.Tensor]:
        params = getattr(self, "params_", None)
        if params is None:
            raise ValueError("calibrated predictor has no fitted parameters: call fit(...) or "
                             "load a profile")
        return params

    # ---------------------------------------------------------------- training
    def _init_params(self, data: Any, spec: DeviceSpec) -> dict[str, torch.Tensor]:
        g, y = data.gemms, data.latency_ms
        names = g.dtype_names()
        per: dict[str, list[float]] = {k: [] for k in _PER_DTYPE}
        for dt in self.dtypes_:
            sel = torch.tensor([x == dt for x in names])
            rate = g.flops[sel] / (y[sel] * 1e-3)
            flops = g.flops[sel]
            tiny, mid = y[sel][flops < 1e5], y[sel][(flops >= 1e5) & (flops < 1e6)]
            low = float(torch.quantile(y[sel], 0.05))
            per["log_peak"].append(math.log(float(rate.max()) * 1.2))
            per["log_floor_ms"].append(math.log(0.8 * float(tiny.min()) if len(tiny) else low))
            per["log_floor_big_ms"].append(math.log(0.5 * float(mid.median()) if len(mid)
                                                    else low))
            per["log_switch_flops"].append(math.log(1e5))
            per["log_m_half"].append(math.log(2.0))
            per["log_n_half"].append(math.log(8.0))
            per["log_k_half"].append(math.log(16.0))
        bw = spec.dram_bw_bytes_per_s if spec.dram_bw_bytes_per_s > 0 else 1e11
        params = {k: torch.tensor(v, dtype=torch.float64) for k, v in per.items()}
        params.update({
            "log_bw_dram": torch.tensor(math.log(bw), dtype=torch.float64),
            "log_bw_llc": torch.tensor(math.log(4.0 * bw), dtype=torch.float64),
            "log_bw_out": torch.tensor(math.log(bw), dtype=torch.float64),
            "log_par_flops": torch.tensor(math.log(1e7 if is_cpu(spec) else 1e3),
                                          dtype=torch.float64),
            "pack": torch.tensor(-2.0, dtype=torch.float64),  # 1 + 3·sigmoid: about 1.36
            "roof_p": torch.tensor(inv_softplus(2.0), dtype=torch.float64),
        })
        return params

    def fit(self, data: Any, *, warm_start: bool = False) -> CalibratedPredictor:
        """Fit the physical parameters to one device's measured rows with Adam on the
        pseudo-Huber loss of log time (relative error, robust to runs that a busy host stalled
        by a scheduler tick), each dtype weighted equally, then keep every row's log ratio
        measured/base for the neighbour correction (rows over e× slower than the base, stalls,
        are left out); returns self. ``warm_start`` continues from the current parameters."""
        spec = _one_device(data)
        torch.manual_seed(self.seed)
        names = data.gemms.dtype_names()
        dtypes = tuple(dict.fromkeys(names))
        if not (warm_start and getattr(self, "params_", None) is not None
                and set(dtypes) <= set(self.dtypes_)):
            self.dtypes_ = dtypes
            self.params_ = self._init_params(data, spec)
        counts = {dt: names.count(dt) for dt in dtypes}
        w = torch.tensor([1.0 / counts[x] for x in names], dtype=torch.float64)
        w = w / w.sum()
        log_y = torch.log(data.latency_ms)
        probe_log_bw = math.log(spec.dram_bw_bytes_per_s if spec.dram_bw_bytes_per_s > 0 else 1e11)
        params = {k: v.clone().requires_grad_(True) for k, v in self.params_.items()}
        opt = torch.optim.Adam(list(params.values()), lr=self.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, self.steps))
        loss = torch.tensor(float("nan"))
        for _ in range(self.steps):
            opt.zero_grad()
            pred = self._forward(data.gemms, spec, params)["time_ms"]
            err = torch.log(pred) - log_y
            loss = (w * _HUBER ** 2 * (torch.sqrt(1.0 + (err / _HUBER) ** 2) - 1.0)).sum()
            # the copy probe measured DRAM bandwidth; few sweep GEMMs overflow the LLC
            loss = loss + 0.05 * (params["log_bw_dram"] - probe_log_bw) ** 2
            loss.backward()
            opt.step()
            sched.step()
        self.params_ = {k: v.detach() for k, v in params.items()}
        self.loss_ = float(loss.detach())
        with torch.no_grad():
            ratio = log_y - torch.log(self._forward(data.gemms, spec, self.params_)["time_ms"])
        keep = ratio < 1.0
        self.neighbour_x_ = _shape_features(data.gemms)[keep]
        self.neighbour_dtype_ = self._local_dtype(data.gemms)[keep]
        self.neighbour_log_ratio_ = ratio[keep]
        return self

    def physical_constants(self) -> dict[str, Any]:
        """The fitted constants in their units."""
        p = self._params()
        sp = torch.nn.functional.softplus

        def per(name: str, scale: float = 1.0) -> dict[str, float]:
            return {d: float(torch.exp(p[name][i])) * scale for i, d in enumerate(self.dtypes_)}

        return {
            "sustained_flops_per_s": per("log_peak"),
            "floor_ms": per("log_floor_ms"),
            "blocked_floor_ms": per("log_floor_big_ms"),
            "blocked_from_flops": per("log_switch_flops"),
            "dram_bw_bytes_per_s": float(torch.exp(p["log_bw_dram"])),
            "llc_bw_bytes_per_s": float(torch.exp(p["log_bw_llc"])),
            "output_bw_bytes_per_s": float(torch.exp(p["log_bw_out"])),
            "all_cores_from_flops": float(torch.exp(p["log_par_flops"])),
            "operand_reads": 1.0 + 3.0 * float(torch.sigmoid(p["pack"])),
            "roofline_q": 1.0 + float(sp(p["roof_p"])),
        }

    # ---------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.name, "version": self.version, "hyperparameters": self.get_params(),
            "dtypes": list(self.dtypes_),
            "params": {k: v.tolist() for k, v in self._params().items()},
            "neighbours": {
                "log2_dims": [[round(v, 5) for v in row] for row in self.neighbour_x_.tolist()],
                "dtype": self.neighbour_dtype_.tolist(),
                "log_ratio": [round(v, 5) for v in self.neighbour_log_ratio_.tolist()],
            },
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> CalibratedPredictor:
        hyper = doc["hyperparameters"]
        if not isinstance(hyper, Mapping):
            raise TypeError("'hyperparameters' must be an object")
        unknown = sorted(set(hyper) - set(_HYPER))
        if unknown:
            raise ValueError(f"unknown hyperparameters {unknown}; known: {', '.join(_HYPER)}")
        model = cls(**hyper)
        for key in ("tile_n", "block", "neighbours"):
            if not isinstance(getattr(model, key), int) or getattr(model, key) < 1:
                raise ValueError(f"hyperparameter {key!r} must be a positive integer, "
                                 f"got {getattr(model, key)!r}")
        if not (isinstance(model.radius, (int, float)) and model.radius > 0):
            raise ValueError(f"hyperparameter 'radius' must be positive, got {model.radius!r}")
        dtypes = doc["dtypes"]
        if not isinstance(dtypes, list) or not dtypes:
            raise ValueError("'dtypes' must be a non-empty list of dtype names")
        model.dtypes_ = tuple(resolve_dtype(d).name for d in dtypes)
        raw = doc["params"]
        if not isinstance(raw, Mapping):
            raise TypeError("'params' must be an object")
        params = {}
        for name in (*_PER_DTYPE, *_SHARED):
            if name not in raw:
                raise ValueError(f"missing parameter {name!r}")
            t = torch.tensor(raw[name], dtype=torch.float64)
            want: tuple[int, ...] = (len(dtypes),) if name in _PER_DTYPE else ()
            if tuple(t.shape) != want:
                raise ValueError(f"parameter {name!r} has shape {tuple(t.shape)}, "
                                 f"expected {want}")
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"parameter {name!r} is not finite")
            params[name] = t
        model.params_ = params
        nb = doc["neighbours"]
        x = torch.tensor(nb["log2_dims"], dtype=torch.float64).reshape(-1, 4)
        dt = torch.tensor(nb["dtype"], dtype=torch.long).reshape(-1)
        r = torch.tensor(nb["log_ratio"], dtype=torch.float64).reshape(-1)
        if not x.shape[0] == dt.shape[0] == r.shape[0]:
            raise ValueError("'neighbours' lists differ in length")
        if bool(((dt < 0) | (dt >= len(dtypes))).any()) or not bool(torch.isfinite(r).all()):
            raise ValueError("'neighbours' holds a dtype index or ratio out of range")
        model.neighbour_x_, model.neighbour_dtype_, model.neighbour_log_ratio_ = x, dt, r
        return model


def _one_device(data: Any) -> DeviceSpec:
    """The one device ``data`` was measured on."""
    gpus = sorted(set(data.gpu))
    if len(gpus) != 1:
        raise ValueError(f"a calibrated predictor fits the rows of one device; these hold "
                         f"{len(gpus)}: {', '.join(gpus[:5])}")
    return data.device(gpus[0])
