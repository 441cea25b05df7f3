"""One GPU's share of a training step's records under tensor (and sequence) parallelism.

Megatron's split, record by record (the roles of ``graph.graph_roles``):

- a column-parallel GEMM computes n / tp of its output features: its forward GEMM splits n,
  its input gradient dX = dY·Wᵀ splits the reduction k, its weight gradient splits the dim
  holding the weight's output features;
- a row-parallel GEMM reads k / tp input features: forward splits k, dX splits n, dW splits the
  dim holding the weight's input features;
- attention's GEMMs and SDPA calls run tp-th of the heads (their batch dim, heads × batch);
- every other op on a split tensor moves and computes a tp-th of it; replicated ops run whole,
  except under sequence parallelism (Korthikanti et al. 2022, §4.2.2), where the replicated ops
  inside the decoder layers (norms, dropout, residual adds) run on seq / tp tokens.

Expert parallelism (``ep``) gives each GPU ``experts / ep`` of a MoE layer's experts and, after
the all-to-all dispatch, the tokens that ``ep`` GPUs routed to them: an expert's grouped GEMM
runs a ``ep``-th of its experts (its batch) on ``ep`` times the tokens of each (its tokens dim:
m of the forward and of dX, the reduction k of dW), for the same FLOPs (NB: the router's load
is taken as balanced, as a meta-device capture routes it).

A split dim is found by where autograd's formulas put the forward dim in each gradient GEMM
(``records.backward``): dX = dC·Bᵀ is (m, k, n) of the forward's (m, n, k); a Linear's
dW = dYᵀ·X is (n, k, m), a (k, n)-stored weight's dB = Aᵀ·dC is (k, n, m). Operand alignments
are re-read on the split dims; FLOPs scale exactly, compulsory bytes by the operands' new sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..hardware.dtypes import DTYPES
from ..records import GemmSite, OtherOp
from ..records.types import FusedKernel, alignment_bytes
from .model import TrainingStep

__all__ = ["VOCAB_MULTIPLE", "regroup_experts", "shard_records", "split_site"]

# Megatron-LM pads the vocabulary to a multiple of 128·tp to split it (--make-vocab-size-
# divisible-by 128, megatron/training/tokenizer: _vocab_size_with_padding)
VOCAB_MULTIPLE = 128

# gradient GEMM dims, each from which forward dim (m, n, k as 0, 1, 2)
_DX = (0, 2, 1)
_DW_WEIGHT = (1, 2, 0)  # a Linear's weight stored (n, k)
_DW_KN = (2, 1, 0)  # a weight stored (k, n), as HF's Conv1D holds it


def shard_records(step: TrainingStep, tp: int, sequence_parallel: bool, ep: int = 1
                  ) -> tuple[tuple[GemmSite, ...], tuple[OtherOp, ...], tuple[FusedKernel, ...]]:
    """The records one GPU of a ``tp``-way tensor-parallel group (and ``ep``-way expert-parallel
    group) runs for ``step``, and the fused kernels of a compiled step, each moving its ops'
    share."""
    forward: dict[str, GemmSite] = {s.node: s for s in step.sites if s.phase == "forward"}
    if ep > 1:
        return _regrouped(step, forward, ep, *shard_records(step, tp, sequence_parallel))
    if tp == 1:
        return step.sites, step.others, step.kernels
    vocab = int(step.shape.vocab_size or 0)
    sites = []
    for s, role, seg in zip(step.sites, step.site_role, step.site_segment):
        if role == "column":
            dim = _split_dim(s, forward.get(s.node), 1)
            if vocab and getattr(s, dim) == vocab:  # the LM head: Megatron pads the vocabulary
                s = _padded(s, dim, -(-vocab // (VOCAB_MULTIPLE * tp)) * VOCAB_MULTIPLE * tp)
            sites.append(split_site(s, dim, tp))
        elif role == "row":
            sites.append(split_site(s, _split_dim(s, forward.get(s.node), 2), tp))
        elif role == "head":
            sites.append(split_site(s, "batch", tp, what="heads × batch"))
        elif sequence_parallel and 0 <= seg < step.layers:
            sites.append(split_site(s, "m", tp, what="tokens"))
        else:
            sites.append(s)
    others = []
    for o, role, seg in zip(step.others, step.other_role, step.other_segment):
        in_layer = 0 <= seg < step.layers
        if role in ("split", "head", "column", "row") or (sequence_parallel and in_layer):
            others.append(_split_op(o, tp))
        else:
            others.append(o)
    kernels = []
    for k in step.kernels:  # a kernel moves its ops' bytes: what of them this GPU moves
        full = sum(step.others[i].dram_bytes for i in k.ops)
        mine = sum(others[i].dram_bytes for i in k.ops)
        kernels.append(replace(k, dram_bytes=round(k.dram_bytes * mine / full)) if full else k)
    return tuple(sites), tuple(others), tuple(kernels)


def _regrouped(step: TrainingStep, forward: dict[str, GemmSite], ep: int,
               sites: tuple[GemmSite, ...], others: tuple[OtherOp, ...],
               kernels: tuple[FusedKernel, ...]
               ) -> tuple[tuple[GemmSite, ...], tuple[OtherOp, ...], tuple[FusedKernel, ...]]:
    out = []
    for full, s, expert in zip(step.sites, sites, step.site_expert):
        if expert:  # the tokens dim as the full-width record holds it
            s = regroup_experts(s, _split_dim(full, forward.get(full.node), 0), ep)
        out.append(s)
    return tuple(out), others, kernels


def regroup_experts(site: GemmSite, tokens_dim: str, ep: int) -> GemmSite:
    """An expert GEMM of ``site.batch`` experts as one of ``ep`` GPUs runs it: a ``ep``-th of
    the experts on ``ep`` times the tokens each (``tokens_dim``), the FLOPs unchanged, the
    compulsory bytes recounted by operand (the weights' shrink, the activations' stay)."""
    if site.batch % ep:
        raise ValueError(f"ep={ep} does not divide the {site.batch} experts of "
                         f"{site.module or 'the model'}; nearest good: "
                         f"{' or '.join(map(str, _divisors_near(site.batch, ep)))}")
    dims = {"batch": site.batch, "m": site.m, "n": site.n, "k": site.k}
    old = _operand_elems(**dims)
    dims["batch"] //= ep
    dims[tokens_dim] *= ep
    now = _operand_elems(**dims)
    in_b, out_b = DTYPES[site.dtype].in_bytes, DTYPES[site.out_dtype].in_bytes
    full = (old[0] * in_b, old[1] * in_b, old[2] * out_b)
    scale = sum(f * n / o for f, n, o in zip(full, now, old) if o) / sum(full) \
        if sum(full) else 1.0
    # NB: operand alignments kept (a tokens dim ep times longer is at least as aligned)
    grown: dict[str, Any] = {tokens_dim: dims[tokens_dim]}
    return replace(site, batch=dims["batch"], **grown, dram_bytes=round(site.dram_bytes * scale))


def _split_dim(site: GemmSite, fwd: GemmSite | None, fwd_dim: int) -> str:
    """Which of the record's (m, n, k) holds the forward GEMM's dim ``fwd_dim`` (1: n, 2: k)."""
    if site.phase == "forward" or fwd is None:
        return "mnk"[fwd_dim]
    if site.phase == "backward_dx":
        perm = _DX
    else:
        perm = _DW_WEIGHT if fwd.b_transposed else _DW_KN
    dim = perm.index(fwd_dim)
    value = (fwd.m, fwd.n, fwd.k)[fwd_dim]
    if (site.m, site.n, site.k)[dim] != value:  # another layout: the dim holding the value
        dims = [d for d, v in zip("mnk", (site.m, site.n, site.k)) if v == value]
        if not dims:
            raise ValueError(f"{site.module} ({site.phase}): no dim of {site.shape} holds the "
                             f"forward's split dim {value}")
        return dims[0]
    return "mnk"[dim]


def split_site(site: GemmSite, dim: str, parts: int, what: str = "") -> GemmSite:
    """``site`` with ``dim`` (batch, m, n or k) divided into ``parts``: its FLOPs divided, its
    compulsory bytes recounted by operand, the alignment of each operand whose contiguous dim
    it is re-read."""
    value = getattr(site, dim)
    if value % parts:
        name = what or f"{site.module} {dim}"
        raise ValueError(f"{parts}-way tensor parallelism does not divide {name} = {value} of "
                         f"{site.module or 'the model'}; nearest good: "
                         f"{' or '.join(map(str, _divisors_near(value, parts)))}")
    new = value // parts
    in_b, out_b = DTYPES[site.dtype].in_bytes, DTYPES[site.out_dtype].in_bytes
    a_lead = "m" if site.a_transposed else "k"
    b_lead = "k" if site.b_transposed else "n"
    a_align = min(site.a_align_bytes, alignment_bytes(new, in_b)) if a_lead == dim \
        else site.a_align_bytes
    b_align = min(site.b_align_bytes, alignment_bytes(new, in_b)) if b_lead == dim \
        else site.b_align_bytes
    c_align = min(site.c_align_bytes, alignment_bytes(new, out_b)) if dim == "n" \
        else site.c_align_bytes
    dims = {"batch": site.batch, "m": site.m, "n": site.n, "k": site.k}
    old = _operand_elems(**dims)
    dims[dim] = new
    now = _operand_elems(**dims)
    share = [n / o if o else 0.0 for n, o in zip(now, old)]
    # split the compulsory bytes as A, B and C hold them at full size
    full = (old[0] * in_b, old[1] * in_b, old[2] * out_b)
    scale = sum(f * s for f, s in zip(full, share)) / sum(full) if sum(full) else 1.0
    return replace(site, **{dim: new}, flops=site.flops // parts,
                   dram_bytes=round(site.dram_bytes * scale), a_align_bytes=a_align,
                   b_align_bytes=b_align, c_align_bytes=c_align)


def _padded(site: GemmSite, dim: str, value: int) -> GemmSite:
    """``site`` with ``dim`` padded to ``value``: FLOPs and bytes grown with it."""
    scale = value / getattr(site, dim)
    dims: dict[str, Any] = {dim: value}
    return replace(site, **dims, flops=round(site.flops * scale),
                   dram_bytes=round(site.dram_bytes * scale))


def _operand_elems(batch: int, m: int, n: int, k: int) -> tuple[int, int, int]:
    return batch * m * k, batch * k * n, batch * m * n


def _split_op(op: OtherOp, parts: int) -> OtherOp:
    a = op.attention
    if a is not None:
        a = replace(a, heads=max(a.heads // parts, 1), kv_heads=max(a.kv_heads // parts, 1),
                    mask_bytes=a.mask_bytes // parts)
    return replace(op, numel=-(-op.numel // parts), dram_bytes=-(-op.dram_bytes // parts),
                   flops=op.flops // parts, attention=a)


def _divisors_near(n: int, value: int) -> Sequence[int]:
    good = [d for d in range(1, n + 1) if n % d == 0]
    return sorted(good, key=lambda d: (abs(d - value), d))[:2]
