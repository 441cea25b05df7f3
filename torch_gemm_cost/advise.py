"""Padding advice: which dims to pad, to what, and what the predictor says it saves.

Every dim the model author controls (weight dims, and the token count chosen for the run) that is
not already a multiple of 128 is a candidate. Each candidate is padded to the next multiple of 8, 16,
32, 64 and 128; all padded shapes of a report are re-predicted in one batched call, and a candidate
is advised only when the whole model gets faster after paying for the extra FLOPs.

A dim that matches a config field (``vocab_size``, ``hidden_size``, ...) is padded everywhere it
occurs, as changing the config would do. Other dims are padded together in the layers of one
parent module and its repeats: a dim one layer outputs, its sibling reads.

Attention. Eager attention (``attn_implementation="eager"``) runs QKᵀ and PV as two products with
the scores in DRAM between them, rows of one score per key: a sequence length there sets the
alignment of the scores' rows, and padding it can pay. Such advice says it holds for eager
attention only (``PaddingAdvice.eager_attention_only``). On a GPU an SDPA call is one fused
kernel (``predict.attention.sdpa``): its scores never leave the chip and it loads Q, K and V along the head
dim, so no sequence length sets an alignment; its time is the attention model's, which the GEMM
predictor that prices padding does not give. Its two GEMM records (``bound == "fused"``) are no
candidates: no sequence padding is advised for it.

NB: non-GEMM ops that grow with the padded dim (e.g. a softmax over a padded vocabulary), and a
fused attention kernel whose head dim is padded, are not re-costed; the extra FLOPs and time
counted are those of the GEMMs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from .capture.core import module_template
from .hardware.catalog import DeviceSpec
from .hardware.dtypes import DTYPES, FP8_MULTIPLE
from .predict.base import Prediction, Predictor, predict_distinct
from .predict.price import GemmEstimate
from .records.types import DTYPE_NAMES, GemmBatch, GemmSite, alignment_bytes

__all__ = ["PaddingAdvice", "padded_size", "padding_advice", "waves_as_share"]

MULTIPLES: tuple[int, ...] = (8, 16, 32, 64, 128)
_AXES = ("m", "n", "k")
_LINEAR_OPS = ("linear", "addmm", "conv1d", "mm", "matmul")
# products of two activations: eager attention's QKᵀ and PV are two of these
_PRODUCT_OPS = ("matmul", "bmm", "baddbmm", "einsum")
SEQUENCE = "sequence length (eager attention)"  # the field of eager attention's lengths
EAGER_ONLY = ("eager attention only (SDPA's fused kernel keeps the scores on chip, where no "
              "sequence length sets an alignment); ")
# a convolution's implicit GEMM has two dims a user can pad, its channels (m is images ×
# positions): the axis of (m, n, k) that holds the plain channels, per op and phase ...
_CHANNEL_AXIS = {
    ("convolution", "forward"): 1, ("convolution", "backward_dx"): 2,
    ("convolution", "backward_dw"): 0, ("conv_transpose", "forward"): 1,
    ("conv_transpose", "backward_dx"): 2, ("conv_transpose", "backward_dw"): 0,
}
# ... and the axis that holds the other channels times the kernel taps (GemmSite.taps), where a
# padded channel count is matched and padded in whole channels
_TAPS_AXIS = {
    ("convolution", "forward"): 2, ("convolution", "backward_dx"): 1,
    ("convolution", "backward_dw"): 1, ("conv_transpose", "forward"): 2,
    ("conv_transpose", "backward_dx"): 1, ("conv_transpose", "backward_dw"): 1,
}
# a transposed convolution is recorded as its dgrad GEMM, laid out as a convolution's: its
# output channels on the plain axis, its input channels times the taps on the unfolded one
_CHANNEL_ROLE = {"convolution": "out_channels", "conv_transpose": "out_channels"}
_TAPS_ROLE = {"convolution": "in_channels", "conv_transpose": "in_channels"}
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
    # the padded dim is a sequence length of eager attention's QKᵀ and PV products alone: with
    # SDPA (one fused kernel on a GPU) these GEMMs do not run and the padding saves nothing
    eager_attention_only: bool = False

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


def _io_bytes(g: GemmBatch) -> torch.Tensor:
    """A, B and C each moved once, (N,)."""
    return g.batch * ((g.m * g.k + g.k * g.n) * g.in_bytes + g.m * g.n * g.out_bytes)


def _module_label(paths: Sequence[str]) -> list[str]:
    """Group repeated layers: ``12 × mlp.c_fc`` for ``transformer.h.{0..11}.mlp.c_fc``."""
    groups: dict[str, list[str]] = {}
    for p in dict.fromkeys(paths):
        groups.setdefault(module_template(p)[0], []).append(p)
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
    idx: torch.Tensor  # (c,) GEMM indices into the run
    mask: torch.Tensor  # (c, 3) which of m, n, k equal ``value``
    eager_only: bool = False  # it pads eager attention's sequence lengths only


@dataclass(frozen=True)
class _Block:
    """One candidate padded to one size: its rows of the batch that is re-predicted."""

    cand: _Candidate
    size: int
    multiple: int
    lo: int  # the padded rows are lo:hi of the batch
    hi: int


@dataclass(frozen=True)
class _Run:
    """What advice reads of a run: its GEMMs as records and as a batch, with the dims
    (N, 3 for m, n, k) and the elements per paddable unit of each (``_channel_units``)."""

    sites: list[GemmSite]
    base: GemmBatch
    dims: torch.Tensor
    unit: torch.Tensor


def _channel_units(sites: Sequence[Any]) -> torch.Tensor:
    """(N, 3) elements per paddable unit of each GEMM's m, n, k: a convolution's kernel taps
    on its unfolded axis (C_in·taps forward), 1 everywhere else."""
    unit = torch.ones((len(sites), 3), dtype=torch.long)
    for i, s in enumerate(sites):
        axis = _TAPS_AXIS.get((s.op, s.phase))
        if axis is not None:
            unit[i, axis] = s.taps
    return unit


def _paddable(sites: Sequence[GemmSite]) -> torch.Tensor:
    """(N, 3) the axes a user can pad: all three, but for a convolution only its channels
    (m is images × positions)."""
    paddable = torch.ones((len(sites), 3), dtype=torch.bool)
    for i, s in enumerate(sites):
        axis = _CHANNEL_AXIS.get((s.op, s.phase))
        if axis is not None:
            paddable[i] = False
            paddable[i, axis] = True
            paddable[i, _TAPS_AXIS[(s.op, s.phase)]] = True
    return paddable


def _attention_lengths(sites: Sequence[GemmSite]) -> torch.Tensor:
    """(N, 3) the axes of each GEMM that hold a sequence length of eager attention.

    QKᵀ and PV are two forward products of one module and batch, PV reading the scores QKᵀ
    writes: QKᵀ is (queries, keys, head dim) and PV (queries, head dim, keys), so PV's m is
    QKᵀ's m and PV's k QKᵀ's n. In every GEMM of those two nodes (their backward ones too) the
    axes that hold the query or key count are sequence lengths."""
    lengths = torch.zeros((len(sites), 3), dtype=torch.bool)
    products: dict[tuple[str, int], list[GemmSite]] = {}
    for s in sites:
        if s.op in _PRODUCT_OPS and s.phase == "forward":
            products.setdefault((s.module, s.batch), []).append(s)
    seq: dict[tuple[str, str], set[int]] = {}  # (module, node) -> its sequence lengths
    for group in products.values():
        for qk in group:
            for pv in group:
                if pv is not qk and pv.m == qk.m and pv.k == qk.n:
                    for node in (qk.node, pv.node):
                        seq.setdefault((qk.module, node), set()).update((qk.m, qk.n))
    for i, s in enumerate(sites):
        found = seq.get((s.module, s.node))
        if found:
            lengths[i] = torch.tensor([d in found for d in (s.m, s.n, s.k)])
    return lengths


def _candidates(sites: Sequence[GemmSite], config: Mapping[str, int],
                dims: torch.Tensor) -> list[_Candidate]:
    """Candidates over ``dims`` in channel units (``_channel_units``)."""
    paddable = _paddable(sites)
    lengths = _attention_lengths(sites)
    fields: dict[int, str] = {}
    for name, value in config.items():
        fields.setdefault(int(value), name)
    tokens = {s.m for i, s in enumerate(sites)
              if s.op in _LINEAR_OPS and s.phase == "forward" and not lengths[i, 0]}
    out = []
    for value in torch.unique(dims).tolist():
        value = int(value)
        if value < 8 or value % MULTIPLES[-1] == 0:
            continue
        hit = (dims == value) & paddable  # (N, 3)
        rows = torch.nonzero(hit.any(dim=1)).flatten()
        if not len(rows):  # on axes no one pads (a convolution's positions)
            continue
        if not (hit & ~lengths).any():  # eager attention's sequence length, and nothing else
            out.append(_Candidate(value, SEQUENCE, rows, hit[rows], eager_only=True))
            continue
        field = fields.get(value) or ("tokens (batch × seq)" if value in tokens else None)
        if field is not None:
            out.append(_Candidate(value, field, rows, hit[rows]))
            continue
        # siblings share a dim through their data (fc1's out_features is fc2's in_features; one
        # conv's out_channels the next one's in_channels), so a dim is padded across the layers
        # of one parent module, and across its repeats
        by_group: dict[str, list[int]] = {}
        for i in rows.tolist():
            by_group.setdefault(module_template(sites[i].module)[0].rpartition(".")[0],
                                []).append(i)
        for members in by_group.values():
            idx = torch.tensor(members, dtype=torch.long)
            out.append(_Candidate(value, None, idx, hit[idx]))
    return out


def _sizes(run: _Run, c: _Candidate, multiples: Sequence[int]) -> dict[int, int]:
    """Padded size -> the smallest multiple that gives it; fp8 GEMMs pad to multiples of 16."""
    fp8 = any(DTYPES[run.sites[i].dtype].peak_key == "fp8" for i in c.idx.tolist())
    sizes: dict[int, int] = {}
    for mult in sorted(m for m in multiples if not fp8 or m % FP8_MULTIPLE == 0):
        sizes.setdefault(padded_size(c.value, mult), mult)
    sizes.pop(c.value, None)
    return sizes


def _padded(run: _Run, c: _Candidate, size: int) -> GemmBatch:
    """The candidate's GEMMs with ``size`` in place of its dim: compulsory bytes grow with the
    operands, and an operand whose alignment its padded dim set gets the new one."""
    rows = run.base.select(c.idx)
    old = run.dims[c.idx]  # (c, 3)
    new = torch.where(c.mask, size * run.unit[c.idx], old).to(torch.float64)
    grown = replace(rows, m=new[:, 0], n=new[:, 1], k=new[:, 2])
    # A's contiguous dim is m when transposed, else k; B's is k when transposed, else n
    a_t = torch.tensor([run.sites[i].a_transposed for i in c.idx.tolist()])
    b_t = torch.tensor([run.sites[i].b_transposed for i in c.idx.tolist()])
    a_axis = torch.where(a_t, 0, 2)
    b_axis = torch.where(b_t, 2, 1)
    aligned: dict[str, torch.Tensor] = {}
    for key, axis, elem in (("a_align_bytes", a_axis, rows.in_bytes),
                            ("b_align_bytes", b_axis, rows.in_bytes),
                            ("c_align_bytes", torch.ones_like(a_axis), rows.out_bytes)):
        padded = c.mask.gather(1, axis[:, None]).squeeze(1)
        current = getattr(rows, key)
        was_set_by_dim = current == alignment_bytes(
            old.gather(1, axis[:, None]).squeeze(1).to(elem.dtype), elem)
        aligned[key] = torch.where(padded & was_set_by_dim, alignment_bytes(
            new.gather(1, axis[:, None]).squeeze(1), elem), current)
    # a fused kernel keeps its on-chip share of the compulsory bytes
    dram = rows.dram_bytes * _io_bytes(grown) / _io_bytes(rows)
    return replace(grown, dram_bytes=dram, **aligned)


def padding_advice(
    gemms: Sequence[GemmEstimate],
    predictor: Predictor,
    device: DeviceSpec,
    *,
    model_ms: float,
    config: Mapping[str, int] | None = None,
    multiples: Sequence[int] = MULTIPLES,
    min_saving_pct: float = 0.01,
) -> list[PaddingAdvice]:
    """Ranked padding advice for a run's GEMMs, best whole-model saving first.

    ``predictor`` is the one that priced ``gemms`` on ``device``: it prices their padded
    shapes (the unpadded ones again, in the same batch). ``model_ms`` is the whole run's
    time; ``config`` maps config fields to their dims (``capture.config_dims``), so a dim that
    one names is padded wherever it occurs. Only changes that save at least
    ``min_saving_pct`` % of the run are returned; a change predicted slower is never advised.
    """
    # a GPU's fused attention kernel is priced by the attention model, not as its two GEMMs
    sites = [g.site for g in gemms if g.bound != "fused"]
    if not sites:
        return []
    base = GemmBatch.from_sites(sites)
    run = _Run(sites, base, torch.stack([base.m, base.n, base.k], dim=1).long(),
               _channel_units(sites))
    cands = _candidates(sites, config or {}, run.dims // run.unit)
    parts, blocks, start = [base], [], len(base)  # the base rows first
    for c in cands:
        for size, mult in _sizes(run, c, multiples).items():
            parts.append(_padded(run, c, size))
            blocks.append(_Block(c, size, mult, start, start + len(c.idx)))
            start += len(c.idx)
    if not blocks:
        return []
    batch = GemmBatch.concat(parts)
    pred = predict_distinct(predictor, batch, device)
    return _best(run, blocks, batch, pred, model_ms, min_saving_pct)


def _best(run: _Run, blocks: Sequence[_Block], batch: GemmBatch, pred: Prediction,
          model_ms: float, min_saving_pct: float) -> list[PaddingAdvice]:
    """Each candidate's best padding that saves time, ranked; within 1% of the best saving,
    the smaller padding wins."""
    t = pred.time_ms.to(torch.float64)
    flops = torch.tensor([float(s.flops) for s in run.sites], dtype=torch.float64)
    best: dict[int, tuple[float, PaddingAdvice]] = {}  # candidate -> its best padding
    for blk in blocks:
        c = blk.cand
        before = float(t[c.idx].sum())
        after = float(t[blk.lo:blk.hi].sum())
        saving = before - after
        if saving <= 0 or 100.0 * saving / model_ms < min_saving_pct:
            continue
        old = run.dims[c.idx].to(torch.float64)
        new = torch.stack([batch.m[blk.lo:blk.hi], batch.n[blk.lo:blk.hi],
                           batch.k[blk.lo:blk.hi]], dim=1)
        extra = float((flops[c.idx] * (new.prod(1) / old.prod(1) - 1)).sum())
        advice = _make_advice(run.sites, model_ms, blk, before, after,
                              extra / float(flops[c.idx].sum()), pred, batch)
        prev = best.get(id(c))
        if prev is None or saving > prev[0] * 1.01 or (
            saving >= prev[0] * 0.99 and blk.size < prev[1].suggested
        ):
            best[id(c)] = (saving, advice)
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


def _dim_label(sites: Sequence[GemmSite], c: _Candidate, j: int) -> str:
    """Every role the dim plays, GEMM ``j``'s first: "out_features (n) / in_features (k)"
    when one layer writes what its sibling reads; backward GEMMs' plain "dim" only if alone;
    "sequence" for eager attention's lengths."""
    axes = c.mask.long().argmax(dim=1).tolist()  # each GEMM's first padded axis
    labels = list(dict.fromkeys(
        f"{'sequence' if c.eager_only else _role(sites[i], axes[i])} ({_AXES[axes[i]]})"
        for i in [j, *range(len(sites))]))
    return " / ".join([x for x in labels if not x.startswith("dim ")] or labels)


def _moved(det: Mapping[str, torch.Tensor], gi: int, pi: int) -> list[str]:
    """The predictor's stages that padding moves by more than 1%, from row gi to row pi."""
    return [
        f"{label} {float(det[key][gi]):.3g} -> {float(det[key][pi]):.3g}"
        for key, label in _STAGES
        if key in det and abs(float(det[key][pi]) - float(det[key][gi]))
        > 0.01 * abs(float(det[key][gi]))
    ]


def _cause(batch: GemmBatch, det: Mapping[str, torch.Tensor], gi: int, pi: int, axis: int,
           size: int, value: int) -> tuple[str, str]:
    """(kind, words) of why padding row gi (in the base) to row pi (padded) saves time."""
    # that GEMM's padded axis in elements: the channel count, or channels·taps on a
    # convolution's unfolded axis
    was = int(getattr(batch, _AXES[axis])[gi])
    now = int(getattr(batch, _AXES[axis])[pi])
    aligns = ("a_align_bytes", "b_align_bytes", "c_align_bytes")
    old_align = min(float(getattr(batch, k)[gi]) for k in aligns)
    new_align = min(float(getattr(batch, k)[pi]) for k in aligns)
    if new_align > old_align:
        # the narrowest operand's element: C's (fp8 GEMMs write bf16) when C is the narrowest
        cd = DTYPES[DTYPE_NAMES[int(batch.dtype_index[gi])]]
        eb = cd.out_bytes if float(batch.c_align_bytes[gi]) < min(
            float(batch.a_align_bytes[gi]), float(batch.b_align_bytes[gi])) else cd.in_bytes
        return "alignment", (
            f"{was} × {eb} B = {was * eb} B rows allow only {old_align:.0f}-byte loads "
            f"({old_align / eb:.0f} of {16 // eb} elements per 16-byte vector, off the tensor-core "
            "kernels' 16-byte load path); "
            f"{now} allows {new_align:.0f}-byte loads"
        )
    # waves as tiles / slots, whether the predictor counts them whole (the hybrid: ⌈tiles /
    # slots⌉; stream-K's already are tiles / slots, with every slot busy to the end):
    # (waves before, after, last-wave fill before, after)
    if "waves" in det and "last_wave_fill" in det:
        fill = det["last_wave_fill"]
        w0, w1 = (waves_as_share(float(det["waves"][i]), float(fill[i])) for i in (gi, pi))
        f0, f1 = float(fill[gi]), float(fill[pi])
        if f1 > f0 or math.ceil(w1) < math.ceil(w0):
            return "wave quantization", (
                f"{w0:.2f} waves: the last wave is {100 * f0:.0f}% full; at {size}: "
                f"{w1:.2f} waves, the last {100 * f1:.0f}% full"
            )
    # the tile width along the padded axis, before and after (k is stepped through, not tiled)
    tile_key = ("tile_m", "tile_n", "")[axis]
    if tile_key in det and float(det[tile_key][gi]) >= 1 and float(det[tile_key][pi]) >= 1:
        t0, t1 = float(det[tile_key][gi]), float(det[tile_key][pi])
        if tile_fill(was, t0) < tile_fill(now, t1):
            return "tile quantization", (
                f"{was} fills {100 * tile_fill(was, t0):.0f}% of its {t0:.0f}-wide "
                f"tiles; {now} fills {100 * tile_fill(now, t1):.0f}% of {t1:.0f}-wide tiles"
            )
    return "kernel choice", f"the predictor's cost for {size} is lower than for {value}"


def _make_advice(sites: Sequence[GemmSite], model_ms: float, blk: _Block, before: float,
                 after: float, extra_frac: float, pred: Prediction,
                 batch: GemmBatch) -> PaddingAdvice:
    c = blk.cand
    padded = [sites[i] for i in c.idx.tolist()]
    j = int(torch.argmax(pred.time_ms[c.idx]))  # the costliest padded GEMM explains the cause
    gi, pi = int(c.idx[j]), blk.lo + j
    axis = int(c.mask.long().argmax(dim=1)[j])  # its first padded axis
    kind, cause = _cause(batch, pred.details, gi, pi, axis, blk.size, c.value)
    numbers = f"padded GEMMs {before:.4f} -> {after:.4f} ms"
    moved = _moved(pred.details, gi, pi)
    if moved:
        numbers += f" ({', '.join(moved)})"
    return PaddingAdvice(
        modules=tuple(_module_label([s.module for s in padded])),
        dim=_dim_label(padded, c, j),
        config_field=c.field,
        current=c.value,
        suggested=blk.size,
        multiple=blk.multiple,
        gemms=len(padded),
        extra_flops_pct=100.0 * extra_frac,
        gemm_ms_before=before,
        gemm_ms_after=after,
        model_ms_before=model_ms,
        model_ms_after=model_ms - (before - after),
        cause_kind=kind,
        cause=(EAGER_ONLY if c.eager_only else "") + f"{kind}: {cause}; {numbers}",
        eager_attention_only=c.eager_only,
    )


def waves_as_share(waves: float, last_wave_fill: float) -> float:
    """Waves as tiles / slots: whole waves less the idle share of the last one, or, for a
    stream-K grid (a fraction of waves, every slot busy to the end), its waves as they are.

    >>> waves_as_share(4.0, 0.25), waves_as_share(3.5, 1.0)
    (3.25, 3.5)
    """
    return waves - 1.0 + last_wave_fill if float(waves).is_integer() else waves
