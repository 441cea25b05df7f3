"""Padding advice: which dims to pad, to what, and what the predictor says it saves.

Every dim the model author controls (weight dims, and the token count chosen for the run) that is
not already a multiple of 128 is a candidate. Each candidate is padded to the next multiple of 8, 16,
32, 64 and 128; all padded shapes of a report are re-predicted in one batched call, and a candidate
is advised only when the whole model gets faster after paying for the extra FLOPs.

A dim that matches a config field (``vocab_size``, ``hidden_size``, ...) is padded everywhere it
occurs, as changing the config would do. Other dims are padded together in the layers of one
parent module and its repeats: a dim one layer outputs, its sibling reads.

NB: non-GEMM ops that grow with the padded dim (e.g. a softmax over a padded vocabulary) are not
re-costed; the extra FLOPs and time counted are those of the GEMMs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import torch

from .dtypes import DTYPES, FP8_MULTIPLE
from .gemms.records import DTYPE_NAMES, GemmBatch, alignment_bytes
from .predict.base import GemmPrediction

if TYPE_CHECKING:
    from .report import CostReport

__all__ = ["PaddingAdvice", "config_dims", "padded_size", "padding_advice"]

MULTIPLES: tuple[int, ...] = (8, 16, 32, 64, 128)
_AXES = ("m", "n", "k")
_LINEAR_OPS = ("linear", "addmm", "conv1d", "mm", "matmul")
# a convolution's implicit GEMM has two dims a user can pad, its channels (m is images ×
# positions): the axis of (m, n, k) that holds the plain channels, per op and phase ...
_CHANNEL_AXIS = {
    ("convolution", "forward"): 1, ("convolution", "backward_dx"): 2,
    ("convolution", "backward_dw"): 0, ("conv_transpose", "forward"): 2,
    ("conv_transpose", "backward_dx"): 1, ("conv_transpose", "backward_dw"): 1,
}
# ... and the axis that holds the other channels times the kernel taps (GemmSite.taps), where a
# padded channel count is matched and padded in whole channels
_TAPS_AXIS = {
    ("convolution", "forward"): 2, ("convolution", "backward_dx"): 1,
    ("convolution", "backward_dw"): 1, ("conv_transpose", "forward"): 1,
    ("conv_transpose", "backward_dx"): 2, ("conv_transpose", "backward_dw"): 0,
}
_CHANNEL_ROLE = {"convolution": "out_channels", "conv_transpose": "in_channels"}
_TAPS_ROLE = {"convolution": "in_channels", "conv_transpose": "out_channels"}
# predictor details quoted in a cause when padding moves them by more than 1%
_STAGES = (("intensity_flops_per_byte", "FLOP/B"), ("util", "util"), ("h2", "L2 hits"),
           ("tile_n", "tile n"), ("tile_m", "tile m"))


@dataclass(frozen=True)
class PaddingAdvice:
    """One padding suggestion, with its predicted effect on the padded GEMMs and the whole model."""

    modules: tuple[str, ...]  # grouped, e.g. ("12 × mlp.c_fc",)
    dim: str  # role and GEMM axis, costliest padded GEMM first: "out_features (n) / in_features (k)"
    config_field: str | None  # e.g. "vocab_size"; None when the dim matches no config field
    current: int
    suggested: int
    multiple: int  # the smallest of MULTIPLES that gives ``suggested``
    gemms: int  # GEMMs that change
    extra_flops_pct: float  # extra FLOPs of the padded GEMMs, in % of their current FLOPs
    gemm_ms_before: float  # summed over the padded GEMMs
    gemm_ms_after: float
    model_ms_before: float
    model_ms_after: float
    cause_kind: str  # "alignment", "wave quantization", "tile quantization" or "kernel choice"
    cause: str  # the cause in words and numbers

    @property
    def saving_ms(self) -> float:
        return self.model_ms_before - self.model_ms_after

    @property
    def saving_pct(self) -> float:
        return 100.0 * self.saving_ms / self.model_ms_before if self.model_ms_before else 0.0


def padded_size(dim: int, multiple: int) -> int:
    """The next multiple of ``multiple`` at or above ``dim``.

    >>> padded_size(50257, 64)
    50304
    """
    return -(-int(dim) // multiple) * multiple


def config_dims(config: Any) -> dict[str, int]:
    """The recognizable dims of an HF-style config (object or mapping), by field name.

    ``intermediate_size`` also reads GPT-2's ``n_inner`` (4·hidden when unset), OPT's ``ffn_dim``
    and T5's ``d_ff``; ``head_dim`` defaults to hidden_size / num_attention_heads. A vision
    backbone's per-stage ``hidden_sizes`` list gives ``hidden_sizes[i]``.
    """
    if config is None:
        return {}
    get = config.get if isinstance(config, Mapping) else lambda k, d=None: getattr(config, k, d)

    def first(*names: str) -> int | None:
        for name in names:
            value = get(name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    out: dict[str, int] = {}
    vocab = first("vocab_size")
    hidden = first("hidden_size", "n_embd", "d_model")
    heads = first("num_attention_heads", "n_head", "num_heads")
    inter = first("intermediate_size", "n_inner", "ffn_dim", "d_ff", "encoder_ffn_dim")
    if inter is None and hidden is not None and get("model_type", None) == "gpt2":
        inter = 4 * hidden
    head_dim = first("head_dim", "d_kv") or (hidden // heads if hidden and heads else None)
    kv_heads = first("num_key_value_heads")
    for name, value in (("vocab_size", vocab), ("hidden_size", hidden),
                        ("intermediate_size", inter), ("num_attention_heads", heads),
                        ("head_dim", head_dim)):
        if value is not None:
            out[name] = value
    if heads and head_dim and heads * head_dim != hidden:
        out["num_attention_heads × head_dim"] = heads * head_dim
    if kv_heads and head_dim and kv_heads != heads:
        out["num_key_value_heads × head_dim"] = kv_heads * head_dim
    embedding = first("embedding_size")  # ALBERT's factorized embedding, ResNet's stem width
    if embedding is not None:
        out["embedding_size"] = embedding
    # vision backbones (ResNet, ConvNeXt, RegNet) set one width per stage
    widths = get("hidden_sizes", None)
    if isinstance(widths, (list, tuple)):
        for i, width in enumerate(widths):
            if isinstance(width, int) and not isinstance(width, bool) and width > 0:
                out[f"hidden_sizes[{i}]"] = width
    return out


def _io_bytes(rows: dict[str, torch.Tensor]) -> torch.Tensor:
    """A, B and C each moved once, for GEMM columns as ``_take`` returns them."""
    b, m, n, k = rows["batch"], rows["m"], rows["n"], rows["k"]
    return b * ((m * k + k * n) * rows["in_bytes"] + m * n * rows["out_bytes"])


def _take(b: GemmBatch, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    sub = b.select(idx)
    return {f.name: getattr(sub, f.name) for f in fields(sub)}


def _module_label(paths: Sequence[str]) -> list[str]:
    """Group repeated layers: ``12 × mlp.c_fc`` for ``transformer.h.{0..11}.mlp.c_fc``."""
    from .report import _template

    groups: dict[str, list[str]] = {}
    for p in dict.fromkeys(paths):
        groups.setdefault(_template(p)[0], []).append(p)
    out = []
    for tmpl, members in groups.items():
        label = tmpl.rsplit(".*.", 1)[1] if ".*." in tmpl else tmpl
        if len(members) == 1:
            out.append(members[0] or "(top)")
        elif any(ch.isalpha() for ch in label):
            out.append(f"{len(members)} × {label}")
        elif len(members) <= 4:  # an nn.Sequential's numbered children: no name to group by
            out.extend(members)
        else:
            out.append(f"{members[0]}, …, {members[-1]} ({len(members)} layers)")
    return out


@dataclass(frozen=True)
class _Candidate:
    value: int
    field: str | None
    idx: torch.Tensor  # (c,) GEMM indices into the report
    mask: torch.Tensor  # (c, 3) which of m, n, k equal ``value``


def _channel_units(sites: Sequence[Any]) -> torch.Tensor:
    """(N, 3) elements per paddable unit of each GEMM's m, n, k: a convolution's kernel taps
    on its unfolded axis (C_in·taps forward), 1 everywhere else."""
    unit = torch.ones((len(sites), 3), dtype=torch.long)
    for i, s in enumerate(sites):
        axis = _TAPS_AXIS.get((s.op, s.phase))
        if axis is not None:
            unit[i, axis] = s.taps
    return unit


def _candidates(report: CostReport, dims: torch.Tensor) -> list[_Candidate]:
    """Candidates over ``dims`` in channel units (``_channel_units``)."""
    from .report import _template

    sites = [g.site for g in report.gemms]
    paddable = torch.ones_like(dims, dtype=torch.bool)
    for i, s in enumerate(sites):
        axis = _CHANNEL_AXIS.get((s.op, s.phase))
        if axis is not None:
            paddable[i] = False
            paddable[i, axis] = True
            paddable[i, _TAPS_AXIS[(s.op, s.phase)]] = True
    fields: dict[int, str] = {}
    for name, value in report.config.items():
        fields.setdefault(int(value), name)
    tokens = {s.m for s in sites if s.op in _LINEAR_OPS and s.phase == "forward"}
    out = []
    for value in torch.unique(dims).tolist():
        value = int(value)
        if value < 8 or value % MULTIPLES[-1] == 0:
            continue
        hit = (dims == value) & paddable  # (N, 3)
        rows = torch.nonzero(hit.any(dim=1)).flatten()
        field = fields.get(value) or ("tokens (batch × seq)" if value in tokens else None)
        if field is not None:
            out.append(_Candidate(value, field, rows, hit[rows]))
            continue
        # siblings share a dim through their data (fc1's out_features is fc2's in_features; one
        # conv's out_channels the next one's in_channels), so a dim is padded across the layers
        # of one parent module, and across its repeats
        by_group: dict[str, list[int]] = {}
        for i in rows.tolist():
            by_group.setdefault(_template(sites[i].module)[0].rpartition(".")[0], []).append(i)
        for members in by_group.values():
            idx = torch.tensor(members, dtype=torch.long)
            out.append(_Candidate(value, None, idx, hit[idx]))
    return out


def padding_advice(
    report: CostReport,
    *,
    multiples: Sequence[int] = MULTIPLES,
    min_saving_pct: float = 0.01,
) -> list[PaddingAdvice]:
    """Ranked padding advice for a report, best whole-model saving first.

    Uses the predictor that made the report (``report.predictor_object()``). Only changes the predictor
    says save at least ``min_saving_pct`` % of the whole model's time are returned; a change
    predicted slower is never advised.
    """
    if not report.gemms:
        return []
    predictor = report.predictor_object()
    if predictor is None:
        raise ValueError(
            f"padding advice re-runs the predictor, but this report holds none "
            f"(predictor={report.predictor!r}); build it with estimate()"
        )
    sites = [g.site for g in report.gemms]
    base = GemmBatch.from_sites(sites)
    dims = torch.stack([base.m, base.n, base.k], dim=1).long()  # (N, 3)
    unit = _channel_units(sites)  # a convolution's C_in·taps axis is matched in channels
    a_t = torch.tensor([s.a_transposed for s in sites])
    b_t = torch.tensor([s.b_transposed for s in sites])
    flops = torch.tensor([float(s.flops) for s in sites], dtype=torch.float64)
    cands = _candidates(report, dims // unit)

    # one block of rows per (candidate, padded size); the base rows come first
    blocks: list[tuple[_Candidate, int, int, int, int]] = []  # cand, size, multiple, start, end
    cols: list[dict[str, torch.Tensor]] = [_take(base, torch.arange(len(base)))]
    start = len(base)
    for c in cands:
        sizes: dict[int, int] = {}
        fp8 = any(DTYPES[sites[i].dtype].peak_key == "fp8" for i in c.idx.tolist())
        for mult in sorted(m for m in multiples if not fp8 or m % FP8_MULTIPLE == 0):
            sizes.setdefault(padded_size(c.value, mult), mult)
        for size, mult in sizes.items():
            if size == c.value:
                continue
            rows = _take(base, c.idx)
            old = dims[c.idx]  # (c, 3)
            new = torch.where(c.mask, size * unit[c.idx], old).to(torch.float64)
            io_before = _io_bytes(rows)
            rows["m"], rows["n"], rows["k"] = new[:, 0], new[:, 1], new[:, 2]
            # compulsory bytes grow with the operands; a fused kernel keeps its on-chip share
            rows["dram_bytes"] = rows["dram_bytes"] * _io_bytes(rows) / io_before
            # A's contiguous dim is m when transposed, else k; B's is k when transposed, else n
            a_axis = torch.where(a_t[c.idx], 0, 2)
            b_axis = torch.where(b_t[c.idx], 2, 1)
            for key, axis, elem in (("a_align_bytes", a_axis, rows["in_bytes"]),
                                    ("b_align_bytes", b_axis, rows["in_bytes"]),
                                    ("c_align_bytes", torch.ones_like(a_axis), rows["out_bytes"])):
                padded = c.mask.gather(1, axis[:, None]).squeeze(1)
                was_set_by_dim = rows[key] == alignment_bytes(old.gather(1, axis[:, None]).squeeze(1)
                                                     .to(elem.dtype), elem)
                rows[key] = torch.where(padded & was_set_by_dim, alignment_bytes(new.gather(
                    1, axis[:, None]).squeeze(1), elem), rows[key])
            cols.append(rows)
            blocks.append((c, size, mult, start, start + len(c.idx)))
            start += len(c.idx)
    if not blocks:
        return []
    batch = GemmBatch(**{k: torch.cat([col[k] for col in cols]) for k in cols[0]})
    pred = predictor.predict(batch, report.device)
    t = pred.time_ms.to(torch.float64)

    model_before = report.total_ms
    best: dict[int, tuple[float, PaddingAdvice]] = {}  # candidate's index -> its best padding
    index = {id(c): i for i, c in enumerate(cands)}
    for c, size, mult, lo, hi in blocks:
        before = float(t[c.idx].sum())
        after = float(t[lo:hi].sum())
        saving = before - after
        if saving <= 0 or 100.0 * saving / model_before < min_saving_pct:
            continue
        old = dims[c.idx].to(torch.float64)
        new = torch.stack([batch.m[lo:hi], batch.n[lo:hi], batch.k[lo:hi]], dim=1)
        extra = float((flops[c.idx] * (new.prod(1) / old.prod(1) - 1)).sum())
        extra_frac = extra / float(flops[c.idx].sum())
        advice = _make_advice(report, c, size, mult, before, after, extra_frac, pred, lo, batch)
        ci = index[id(c)]
        prev = best.get(ci)
        # within 1% of the best saving, the smaller padding wins
        if prev is None or saving > prev[0] * 1.01 or (
            saving >= prev[0] * 0.99 and size < prev[1].suggested
        ):
            best[ci] = (saving, advice)
    return sorted((a for _, a in best.values()), key=lambda a: -a.saving_ms)


def _role(site: Any, axis: int) -> str:
    if site.op in _LINEAR_OPS and site.phase == "forward":
        return ("tokens", "out_features", "in_features")[axis]
    if site.op in _CHANNEL_ROLE and site.phase == "forward":
        unfolded = axis == _TAPS_AXIS[(site.op, "forward")]
        return (_TAPS_ROLE if unfolded else _CHANNEL_ROLE)[site.op]
    return "dim"


def tile_fill(dim: int, tile: float) -> float:
    """Share of the tiles covering ``dim`` that holds real data: 1000 in 16-wide tiles -> 0.992."""
    return dim / padded_size(dim, int(tile))


def _make_advice(
    report: CostReport,
    c: _Candidate,
    size: int,
    mult: int,
    before: float,
    after: float,
    extra_frac: float,
    pred: GemmPrediction,
    lo: int,
    batch: GemmBatch,
) -> PaddingAdvice:
    sites = [report.gemms[i].site for i in c.idx.tolist()]
    t_base = pred.time_ms[c.idx]
    j = int(torch.argmax(t_base))  # the costliest padded GEMM explains the cause
    gi, pi = int(c.idx[j]), lo + j
    # every role the dim plays, the costliest GEMM's first: "out_features (n) / in_features (k)"
    # when one layer writes what its sibling reads; backward GEMMs' plain "dim" only if alone
    axes = c.mask.long().argmax(dim=1).tolist()  # each GEMM's first padded axis
    axis = axes[j]
    labels = list(dict.fromkeys(f"{_role(sites[i], axes[i])} ({_AXES[axes[i]]})"
                                for i in [j, *range(len(sites))]))
    dim = " / ".join([x for x in labels if not x.startswith("dim ")] or labels)
    # that GEMM's padded axis in elements: the channel count, or channels·taps on a
    # convolution's unfolded axis
    was = int(getattr(batch, _AXES[axis])[gi])
    now = int(getattr(batch, _AXES[axis])[pi])
    aligns = ("a_align_bytes", "b_align_bytes", "c_align_bytes")
    old_align = min(float(getattr(batch, k)[gi]) for k in aligns)
    # the narrowest operand's element: C's (fp8 GEMMs write bf16) when C is the narrowest
    cd = DTYPES[DTYPE_NAMES[int(batch.dtype_index[gi])]]
    eb = cd.out_bytes if float(batch.c_align_bytes[gi]) < min(
        float(batch.a_align_bytes[gi]), float(batch.b_align_bytes[gi])) else cd.in_bytes
    new_align = min(float(getattr(batch, k)[pi]) for k in aligns)
    numbers = f"padded GEMMs {before:.4f} -> {after:.4f} ms"
    det = pred.details
    moved = [
        f"{label} {float(det[key][gi]):.3g} -> {float(det[key][pi]):.3g}"
        for key, label in _STAGES
        if key in det and abs(float(det[key][pi]) - float(det[key][gi]))
        > 0.01 * abs(float(det[key][gi]))
    ]
    if moved:
        numbers += f" ({', '.join(moved)})"

    # (waves before, waves after, last-wave fill before, after) when the predictor reports them;
    # waves as tiles / slots, whether the predictor counts them whole (the hybrid: ⌈tiles /
    # slots⌉) or not
    wave = None
    if "waves" in det and "last_wave_fill" in det:
        fill = det["last_wave_fill"]
        tiles_per_slot = [math.ceil(float(det["waves"][i])) - 1.0 + float(fill[i])
                          for i in (gi, pi)]
        wave = (*tiles_per_slot, float(fill[gi]), float(fill[pi]))
    # the tile width along the padded axis, before and after (k is stepped through, not tiled)
    tile_key = ("tile_m", "tile_n", "")[axis]
    tile = None
    if tile_key in det and float(det[tile_key][gi]) >= 1 and float(det[tile_key][pi]) >= 1:
        tile = (float(det[tile_key][gi]), float(det[tile_key][pi]))
    if new_align > old_align:
        kind = "alignment"
        cause = (
            f"{was} × {eb} B = {was * eb} B rows allow only {old_align:.0f}-byte loads "
            f"({old_align / eb:.0f} of {16 // eb} elements per 16-byte vector, off the tensor-core "
            "kernels' 16-byte load path); "
            f"{now} allows {new_align:.0f}-byte loads"
        )
    elif wave is not None and (wave[3] > wave[2] or math.ceil(wave[1]) < math.ceil(wave[0])):
        kind = "wave quantization"
        cause = (
            f"{wave[0]:.2f} waves: the last wave is {100 * wave[2]:.0f}% full; at {size}: "
            f"{wave[1]:.2f} waves, the last {100 * wave[3]:.0f}% full"
        )
    elif tile is not None and tile_fill(was, tile[0]) < tile_fill(now, tile[1]):
        kind = "tile quantization"
        cause = (
            f"{was} fills {100 * tile_fill(was, tile[0]):.0f}% of its {tile[0]:.0f}-wide "
            f"tiles; {now} fills {100 * tile_fill(now, tile[1]):.0f}% of {tile[1]:.0f}-wide tiles"
        )
    else:
        kind = "kernel choice"
        cause = f"the predictor's cost for {size} is lower than for {c.value}"
    paths = [s.module for s in sites]
    return PaddingAdvice(
        modules=tuple(_module_label(paths)),
        dim=dim,
        config_field=c.field,
        current=c.value,
        suggested=size,
        multiple=mult,
        gemms=len(sites),
        extra_flops_pct=100.0 * extra_frac,
        gemm_ms_before=before,
        gemm_ms_after=after,
        model_ms_before=report.total_ms,
        model_ms_after=report.total_ms - (before - after),
        cause_kind=kind,
        cause=f"{kind}: {cause}; {numbers}",
    )
