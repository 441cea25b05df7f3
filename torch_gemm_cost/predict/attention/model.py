"""The fitted fused-attention model and its roofline baseline: predict, fit, save and load
(see the package docstring)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ...hardware.catalog import DeviceSpec, get_device
from ..base import Prediction, bound_of, read_fitted
from ..intervals import DEFAULT_LEVEL, AttentionIntervals
from ..registry import SHIPPED, check_format, load_shipped
from .calls import AttentionBatch
from .geometry import (
    AttentionGeometry,
    attention_bytes,
    attention_flops,
    attention_geometry,
    fp8_converted,
    mha_fwd_splits,
    pack_gqa,
    side_kernels,
    single_query,
    triton_segmented,
)
from .kernels import FAMILIES, KERNELS, kernel_tiles, resident_ctas, warp_specialized
from .physics import PARAMS, DeviceColumns, _to_physical, _to_raw, attention_time


def _batch(batch: AttentionBatch) -> AttentionBatch:
    if not isinstance(batch, AttentionBatch):
        raise TypeError(f"predict takes an AttentionBatch, got {type(batch).__name__}; build "
                        "one with AttentionBatch.from_calls(calls, warm_l2=...)")
    return batch


class AttentionRoofline:
    """The pure roofline: max(needed FLOPs / datasheet peak, compulsory bytes / datasheet DRAM
    bandwidth). No fitted parameter, no launch cost: the baseline every fit is scored against."""

    name = "roofline"

    def predict(self, batch: AttentionBatch, device: DeviceSpec | str) -> Prediction:
        b = _batch(batch)
        dev = get_device(device)
        return self._predict(b, [dev] * len(b))

    def predict_measured(self, measured: Any) -> torch.Tensor:
        """Time (ms) of every measured row on its own GPU, (N,)."""
        devices = [measured.device(g) for g in measured.gpu]
        return self._predict(measured.calls, devices).time_ms

    @staticmethod
    def _predict(b: AttentionBatch, devices: Sequence[DeviceSpec]) -> Prediction:
        dev = DeviceColumns.of(devices, b.dtype)
        flops = attention_flops(b)  # (N,)
        traffic = attention_bytes(b)["compulsory_bytes"]  # (N,)
        compute_ms = flops / dev.peak_flops_per_s * 1e3
        memory_ms = traffic / dev.dram_bw_bytes_per_s * 1e3
        return Prediction(
            time_ms=torch.maximum(compute_ms, memory_ms),
            bound=bound_of(compute_ms, memory_ms, torch.zeros_like(flops)),
            kernel=b.resolve_kernels(devices),
            details={"flops": flops, "executed_flops": flops, "dram_bytes": traffic,
                     "compute_ms": compute_ms, "memory_ms": memory_ms})


FORMAT = SHIPPED["attention"].format
_HYPER = ("q_tile", "kv_tile", "decode_q_tile", "max_splits", "l2_share", "l2_steepness",
          "steps", "lr", "rows_per_group", "seed")


class AttentionPredictor:
    """The fitted fused-attention model (see the module docstring): physical constants shared
    by every GPU, fitted on measured calls.

    Hyperparameters: the tile sizes of kernels whose source is not public (``q_tile`` query
    rows, ``kv_tile`` keys, ``decode_q_tile`` rows of a packed single-query tile; FlashAttention
    2 and 3 run their own, ``kernel_tiles``), FlashAttention 2's ``max_splits``,
    the resident share of the L2 and the steepness of its fall-off for a warm working set, and
    the fit's ``steps``, ``lr``, ``rows_per_group`` (seeded sample per gpu × phase × KV dtype)
    and ``seed``.
    """

    name = "attention"
    version = "8"
    params_: dict[str, torch.Tensor]  # raw (unconstrained) constants, ``PARAMS`` order
    metadata_: dict[str, Any]  # provenance and metrics, saved with the weights

    def __init__(self, *, q_tile: int = 128, kv_tile: int = 128, decode_q_tile: int = 16,
                 max_splits: int = 128, l2_share: float = 0.75, l2_steepness: float = 4.0,
                 steps: int = 500, lr: float = 0.05, rows_per_group: int = 4000,
                 seed: int = 0) -> None:
        self.q_tile = q_tile
        self.kv_tile = kv_tile
        self.decode_q_tile = decode_q_tile
        self.max_splits = max_splits
        self.l2_share = l2_share
        self.l2_steepness = l2_steepness
        self.steps = steps
        self.lr = lr
        self.rows_per_group = rows_per_group
        self.seed = seed
        # held-out residual quantiles (``bounds``); set by training or by the weights file
        self.intervals_: AttentionIntervals | None = None

    def get_params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in _HYPER}

    # ------------------------------------------------------------ the forward pass
    def _raw_init(self) -> dict[str, torch.Tensor]:
        return {n: torch.tensor(_to_raw(v, kind), dtype=torch.float64)
                for n, (v, kind) in PARAMS.items()}

    @staticmethod
    def _physical(raw: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {n: _to_physical(raw[n], kind) for n, (_, kind) in PARAMS.items()}

    def _inputs(self, b: AttentionBatch, devices: Sequence[DeviceSpec]
                ) -> tuple[AttentionGeometry, DeviceColumns, torch.Tensor, tuple[str, ...]]:
        kernels = b.resolve_kernels(devices)
        dev = DeviceColumns.of(devices, b.dtype)
        # with dropout no kernel splits the keys (FlashAttention 2's set_params_splitkv)
        min_split = torch.tensor([float(KERNELS[k].min_split_blocks) for k in kernels],
                                 dtype=torch.float64)
        # … and a kernel that segments its keys (vLLM's Triton) splits no other way
        segmenting = torch.tensor([KERNELS[k].segments > 0 for k in kernels])
        min_split = torch.where((b.dropout > 0) | segmenting,
                                torch.full_like(min_split, math.inf), min_split)
        segments = triton_segmented(b, kernels)
        # a multi-token query that PyTorch's FlashAttention 2 splits runs its split-KV kernel
        as_decode = torch.tensor([KERNELS[k].splits_prefill_as_decode for k in kernels])
        split_kernel = torch.zeros(len(kernels), dtype=torch.bool)
        if bool(as_decode.any()):
            split_kernel = (as_decode & (b.dropout == 0)
                            & (mha_fwd_splits(b, dev.sm_count, self.max_splits) > 1))
        q_tile, kv_tile, decode_q_tile, per_sm = self._tiles(b, kernels, devices, split_kernel,
                                                             segments > 0)
        geo = attention_geometry(b, dev.sm_count, pack_gqa(b, kernels), q_tile=q_tile,
                                 kv_tile=kv_tile, decode_q_tile=decode_q_tile,
                                 max_splits=self.max_splits, min_split_blocks=min_split,
                                 split_prefill=torch.tensor(
                                     [float(KERNELS[k].splits_prefill) for k in kernels],
                                     dtype=torch.float64).maximum(split_kernel.double()),
                                 split_slots_per_sm=torch.tensor(
                                     [float(KERNELS[k].split_slots_per_sm) for k in kernels],
                                     dtype=torch.float64),
                                 split_packed_only=torch.tensor(
                                     [float(KERNELS[k].splits_packed_decode_only)
                                      for k in kernels], dtype=torch.float64),
                                 split_fill=torch.tensor(
                                     [float(KERNELS[k].splits_to_fill) for k in kernels],
                                     dtype=torch.float64),
                                 combine_kernel=torch.tensor(
                                     [float(KERNELS[k].combine_kernel) for k in kernels],
                                     dtype=torch.float64),
                                 prefetch=torch.tensor(
                                     [float(KERNELS[k].prefetches_next_tile) for k in kernels],
                                     dtype=torch.float64),
                                 ctas_per_sm=per_sm, segments=segments)
        family = torch.tensor([FAMILIES.index(KERNELS[k].family) for k in kernels],
                              dtype=torch.long)
        return geo, dev, family, kernels

    def _tiles(self, b: AttentionBatch, kernels: Sequence[str], devices: Sequence[DeviceSpec],
               split_kernel: torch.Tensor, segmented: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each call's (q_tile, kv_tile, decode_q_tile) (``kernel_tiles``), the
        hyperparameters where a kernel's source is not public, and the CTAs an SM holds
        (``resident_ctas``), (N,) each. ``split_kernel`` (N,): calls that run their kernel's
        split-KV variant, as a single query does; ``segmented`` (N,): calls that run their
        kernel's segmented path (``triton_segmented``)."""
        default = (self.q_tile, self.kv_tile, self.decode_q_tile)
        single = ((single_query(b) > 0) | split_kernel).tolist()
        sm8x = [d.compute_capability in ("8.6", "8.7", "8.9") for d in devices]
        smem = [d.smem_bytes_per_sm for d in devices]
        # the packed query length sets FlashInfer's tiles only: 0 elsewhere keeps the memo
        # to one entry per kernel and head size
        packed_q = [q if k == "flashinfer" else 0 for k, q in
                    zip(kernels, (b.q_len * b.heads / b.kv_heads).tolist())]
        # … and the group size TensorRT-LLM's generation tiles and vLLM's Triton tiles only
        group = [int(gr) if (k == "trtllm" and one) or k == "triton" else 1 for k, gr, one in
                 zip(kernels, (b.heads / b.kv_heads).tolist(), single)]
        keys = zip(kernels, b.head_dim.tolist(), b.kv_bytes.tolist(), b.causal.tolist(),
                   (b.window > 0).tolist(), single, sm8x, smem, b.in_bytes.tolist(), packed_q,
                   group, segmented.tolist())
        memo: dict[tuple[Any, ...], tuple[int, int, int, int]] = {}
        rows = []
        for key in keys:
            if key not in memo:
                k, d, kv, causal, windowed, one, minor, shared, qb, pq, gr, seg = key
                tiles = kernel_tiles(k, int(d), int(kv), causal=bool(causal),
                                     windowed=bool(windowed), single=bool(one),
                                     default=default, sm8x=minor, smem_bytes_per_sm=shared,
                                     in_bytes=int(qb), packed_q=int(pq), group=gr,
                                     segmented=bool(seg))
                memo[key] = (*tiles, resident_ctas(k, int(d), int(kv), in_bytes=int(qb),
                                                   packed_q=int(pq), smem_bytes_per_sm=shared))
            rows.append(memo[key])
        t = torch.tensor(rows, dtype=torch.float64).reshape(-1, 4)
        return t[:, 0], t[:, 1], t[:, 2], t[:, 3]

    def _check_fitted(self) -> dict[str, torch.Tensor]:
        raw = getattr(self, "params_", None)
        if raw is None:
            raise ValueError("AttentionPredictor is not fitted: call fit(measured) or load() a "
                             "weights file first (the shipped one: AttentionPredictor.shipped())")
        return self._physical(raw)

    def _predict(self, b: AttentionBatch, devices: Sequence[DeviceSpec]) -> Prediction:
        constants = self._check_fitted()
        geo, dev, family, kernels = self._inputs(b, devices)
        out = attention_time(b, geo, dev, family, constants,
                             fp8_elements=fp8_converted(b, kernels),
                             side_count=side_kernels(b, kernels),
                             specialized=warp_specialized(kernels), l2_share=self.l2_share,
                             l2_steepness=self.l2_steepness)
        time_ms = out["time_ms"]
        lo_ms, hi_ms = (None, None) if self.intervals_ is None else self.intervals_.bounds(
            time_ms, b.decode, DEFAULT_LEVEL)
        # needed FLOPs: 4·d per unmasked pair and query head; executed: whole key blocks and
        # padded query tiles, as the MMAs run them
        details = {"flops": attention_flops(b),
                   "executed_flops": 4.0 * b.head_dim * geo.executed_pairs,
                   **{k: v for k, v in out.items() if k != "time_ms"},
                   "ctas": geo.ctas, "splits": geo.splits, "packed": geo.packed,
                   "key_blocks_per_cta": geo.tiles_mean}
        return Prediction(
            time_ms=time_ms, lo_ms=lo_ms, hi_ms=hi_ms,
            bound=bound_of(out["compute_ms"], out["memory_ms"], out["latency_ms"]),
            kernel=kernels, details=details)

    def predict(self, batch: AttentionBatch, device: DeviceSpec | str) -> Prediction:
        """Predicted time of every call on ``device``, warm or cold as the batch says
        (``AttentionBatch.warm_l2``), with its interval at ``DEFAULT_LEVEL`` where the weights
        carry a calibration (``bounds``)."""
        b = _batch(batch)
        return self._predict(b, [get_device(device)] * len(b))

    def predict_measured(self, measured: Any) -> torch.Tensor:
        """Time (ms) of every measured row on its own GPU, re-run warm as measured, (N,)."""
        devices = [measured.device(g) for g in measured.gpu]
        return self._predict(measured.calls.with_warm_l2(), devices).time_ms

    # ------------------------------------------------------------ fitting
    def fit(self, measured: Any) -> AttentionPredictor:
        """Fit every constant on measured calls (``measured.attention.MeasuredAttention``);
        returns self.

        Each (gpu, phase, KV dtype) group gives at most ``rows_per_group`` seeded-random rows
        and equal total weight; the loss is the mean |log(predicted / measured)|, full-batch
        Adam with a cosine schedule. Runs warm, as the measurements did.
        """
        gen = torch.Generator().manual_seed(self.seed)
        groups: dict[tuple[str, str, str], list[int]] = {}
        for i, key in enumerate(zip(measured.gpu, measured.phase, measured.kv_dtype)):
            groups.setdefault(key, []).append(i)
        if not groups:
            raise ValueError("no measured attention rows to fit")
        chosen: list[int] = []
        weights: list[float] = []
        for key in sorted(groups):
            idx = torch.tensor(groups[key])
            idx = idx[torch.randperm(len(idx), generator=gen)[: self.rows_per_group]]
            chosen += idx.tolist()
            weights += [1.0 / len(idx)] * len(idx)
        sub = measured.select(torch.tensor(chosen))
        w = torch.tensor(weights, dtype=torch.float64)
        w = w / w.sum()
        devices = [get_device(g) for g in sub.gpu]
        calls = sub.calls.with_warm_l2()  # measured re-run on the same buffers
        geo, dev, family, kernels = self._inputs(calls, devices)
        fp8 = fp8_converted(calls, kernels)
        extra = side_kernels(calls, kernels)
        specialized = warp_specialized(kernels)
        log_y = torch.log(sub.latency_ms)

        t0 = time.perf_counter()
        raw = self._raw_init()
        for t in raw.values():
            t.requires_grad_(True)
        opt = torch.optim.Adam(list(raw.values()), lr=self.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(self.steps, 1))
        history = []
        for step in range(self.steps):
            opt.zero_grad()
            pred = attention_time(calls, geo, dev, family, self._physical(raw),
                                  fp8_elements=fp8, side_count=extra, specialized=specialized,
                                  l2_share=self.l2_share,
                                  l2_steepness=self.l2_steepness)["time_ms"]
            loss = (w * (torch.log(pred) - log_y).abs()).sum()
            loss.backward()
            opt.step()
            sched.step()
            if step % 50 == 0 or step == self.steps - 1:
                history.append((step, round(float(loss.detach()), 5)))
        self.params_ = {k: v.detach().clone() for k, v in raw.items()}
        self.loss_history_ = history
        self.n_train_rows_ = len(chosen)
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    def physical_constants(self) -> dict[str, float]:
        """The fitted constants in their physical units (see ``PARAMS``)."""
        return {k: float(v) for k, v in self._check_fitted().items()}

    def bounds(self, time_ms: torch.Tensor, decode: torch.Tensor, level: float = 0.8
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(lo, hi) at ``level`` of predicted times (N,) of calls whose phase ``decode`` (N,)
        gives (1: decode): the held-out residual quantiles the weights carry
        (``intervals_``, ``predict.intervals.AttentionIntervals``)."""
        cal = self.intervals_
        if cal is None:
            raise ValueError("these attention weights carry no interval calibration (refit: "
                             "python -m torch_gemm_cost.train.attention)")
        return cal.bounds(time_ms, decode, level)

    # ------------------------------------------------------------ persistence (JSON)
    def to_dict(self, metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
        self._check_fitted()
        return {
            "format": FORMAT,
            "version": self.version,
            "hyperparameters": self.get_params(),
            "params": {k: float(v) for k, v in self.params_.items()},
            "physical_constants": self.physical_constants(),
            **({"intervals": self.intervals_.to_dict()}
               if self.intervals_ is not None else {}),
            "metadata": dict(metadata if metadata is not None
                             else getattr(self, "metadata_", {}) or {}),
        }

    def save(self, path: str | Path, metadata: Mapping[str, Any] | None = None) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(metadata), indent=1) + "\n")
        return path

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> AttentionPredictor:
        check_format(doc, "attention", cls.version)
        hyper = dict(doc["hyperparameters"])
        unknown = sorted(set(hyper) - set(_HYPER))
        if unknown:
            raise ValueError(f"unknown hyperparameters {unknown}; known: {list(_HYPER)}")
        model = cls(**hyper)
        params = {}
        for name in PARAMS:
            if name not in doc["params"]:
                raise ValueError(f"missing parameter {name!r}")
            value = float(doc["params"][name])
            if not math.isfinite(value):
                raise ValueError(f"parameter {name!r} is not finite")
            params[name] = torch.tensor(value, dtype=torch.float64)
        extra = sorted(set(doc["params"]) - set(PARAMS))
        if extra:
            raise ValueError(f"unknown parameters {extra}")
        model.params_ = params
        model.intervals_ = (AttentionIntervals.from_dict(doc["intervals"])
                            if "intervals" in doc else None)
        model.metadata_ = dict(doc.get("metadata", {}))
        return model

    @classmethod
    def load(cls, path: str | Path) -> AttentionPredictor:
        """Weights written by ``save``; a missing, corrupt or mismatched file raises an error
        that names it."""
        return read_fitted(path, "attention weights file", FORMAT, cls.from_dict)

    @classmethod
    def shipped(cls) -> AttentionPredictor:
        """The weights that ship with the package (``registry.SHIPPED["attention"]``), read
        once and shared."""
        return load_shipped("attention", cls.from_dict)
