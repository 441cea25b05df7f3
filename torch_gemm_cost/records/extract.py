"""Extraction: a captured graph's GEMM and non-GEMM records, forward and backward.

``extract(captured, dtype, mode=...)`` walks a captured graph (see ``capture``) and returns its
``GemmSite`` and ``OtherOp`` records in execution order, storing each node's records in
``node.meta["torch_gemm_cost"]``. Every spelling counts: ``linear``, ``addmm`` (HF ``Conv1D``
becomes ``conv1d``), ``mm``, ``bmm``, ``baddbmm``, ``addbmm``, ``mv``, ``dot``, ``matmul`` in
every broadcast case, ``einsum`` (the bmm calls torch runs for it, ``records.einsum``),
scaled-dot-product attention (see ``handlers``) and recurrent layers (``records.rnn``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..capture.graph import NO_GRAD
from ..hardware.dtypes import DTYPES, ComputeDtype, resolve_dtype
from ..suggest import check_choice
from .backward import _backward_other, _backward_sites, _bias_grad, _gradient_sums
from .copies import NCHW_LAYOUT, OPERAND_COPY, nchw_output_elems, operand_copies
from .einsum import einsum_other_ops
from .forward import _other, _sdpa_softmax, _site
from .handlers import ForwardGemm, HandlerContext, bind_arguments, gemm_handler, op_name
from .nodes import _module_of, _tensors
from .op_classes import _NO_GRAD
from .rnn import RNN_GATES, rnn_other_ops
from .sizing import _Ctx
from .types import GemmSite, OtherOp

__all__ = ["META_KEY", "PHASES", "extract"]

META_KEY = "torch_gemm_cost"  # node.meta[META_KEY]: tuple of the node's GemmSite/OtherOp records
PHASES: tuple[str, ...] = ("forward", "backward_dx", "backward_dw", "backward")


def extract(
    captured: Any,
    dtype: str | torch.dtype | ComputeDtype,
    *,
    mode: str = "inference",
    native_dtype: torch.dtype | None = None,
) -> tuple[tuple[GemmSite, ...], tuple[OtherOp, ...]]:
    """GEMM and non-GEMM records of a captured graph, in execution order; annotates each node.

    ``dtype`` is the compute dtype every GEMM runs in. Floating activations of ``native_dtype``
    (the model's own dtype; None: every floating tensor) are costed at that dtype's storage
    size, 16-bit for fp8/int8 compute; other tensors keep their own size.

    A non-GEMM op moves each distinct input once plus its outputs (broadcast dims once);
    views and no-op conversions move nothing; a gather (embedding, index) moves its indices and
    the rows it reads and writes.

    SDPA becomes ``sdpa_qk`` (QKᵀ) and ``sdpa_pv`` (PV) with a ``softmax`` OtherOp between them.
    Its bytes follow a fused (flash) kernel: QKᵀ reads Q and K, PV reads V and writes O, and the
    scores never reach DRAM (only an explicit mask is read). Under ``is_causal`` both GEMMs are
    marked ``causal`` and their FLOPs count only the kept scores, 2·batch·d·kept with
    kept = ``causal_kept_entries(q_len, kv_len)`` (about half).

    ``mode="train"`` adds, in reverse order after the forward pass:

    - per GEMM, the gradient of A (``backward_dx``: dA = dC·Bᵀ) if A needs grad, and of B
      (``backward_dw``: dB = Aᵀ·dC, for a Linear weight dW = dYᵀ·X) if B needs grad, as PyTorch's
      autograd formulas compute them. Attention: dQ, dK, dP and dV, with the causal discount.
    - per non-view op whose output needs grad, an OtherOp with phase ``backward`` that moves
      2× the forward bytes. NB: a rule of thumb (read the saved input and the output grad,
      write the input grad).
    - per GEMM with a fused bias that needs grad (Linear, addmm, HF Conv1D), the bias gradient:
      a ``reduction`` OtherOp (``aten.sum``, phase ``backward``) that reads dC and writes the
      bias's gradient. Optimizer steps are not here (see ``optimizer_ops``).
    - per tensor that feeds k > 1 ops needing grad, k − 1 gradient sums (``aten.add``, node
      ``<name>.grad_sum``), each reading two gradients and writing one. This is where a residual
      stream pays for its branch; the ``add`` that joins the branch back passes dy through.
    """
    check_choice("mode", mode, ("inference", "train"))
    walk = _Walk(captured, resolve_dtype(dtype), native_dtype, train=mode == "train")
    for node in captured.graph_module.graph.nodes:
        walk.visit(node)
    return walk.records()


class _Walk:
    """One extraction: which nodes need grad, the forward records in execution order, and each
    node's backward records (autograd runs them in reverse)."""

    def __init__(self, captured: Any, cd: ComputeDtype, native: torch.dtype | None,
                 train: bool) -> None:
        self.cd, self.ctx, self.train = cd, _Ctx(cd, native), train
        self.model_name: str = captured.model_name
        self.causal_modules: frozenset[str] = getattr(captured, "causal_modules", frozenset())
        self.placeholder_grad: Mapping[str, bool] = captured.requires_grad
        self.requires: dict[Any, bool] = {}
        self.fwd_gemms: list[GemmSite] = []
        self.fwd_others: list[OtherOp] = []
        self.bwd: dict[Any, list[GemmSite | OtherOp]] = {}  # per node, in forward order

    def tensor(self, x: Any) -> Any:
        return x.meta.get("val") if hasattr(x, "meta") else x

    def requires_grad(self, x: Any) -> bool:
        return bool(self.requires.get(x, False)) if hasattr(x, "meta") else False

    def visit(self, node: Any) -> None:
        """Record one node: its forward records, and its backward ones in train mode."""
        if node.op == "placeholder":
            self.requires[node] = bool(self.placeholder_grad.get(node.name, False))
            self.bwd[node] = []
            return
        if node.op != "call_function":
            return
        name = op_name(node.target)
        out_tensors = _tensors(node.meta.get("val"))
        self.requires[node] = (
            not node.meta.get(NO_GRAD)
            and name.rstrip("_") not in _NO_GRAD
            and any(t.dtype.is_floating_point for t in out_tensors)
            and any(self.requires.get(i, False) for i in node.all_input_nodes)
        )
        self.bwd[node] = []
        if name == "getitem" or not out_tensors:
            return
        module, module_type = _module_of(node, self.model_name)
        handler = gemm_handler(name)
        ctx = HandlerContext(self.tensor, self.requires_grad, self.cd.in_bytes,
                             module in self.causal_modules)
        fwds = handler(bind_arguments(node), ctx) if handler is not None else []
        if fwds:
            copies = [self._copy(node, arg, val, module, module_type)
                      for arg, val in operand_copies(node)]
            if name == "einsum":  # the copies, products and sums its replay runs
                copies += einsum_other_ops(node, self.ctx, module, module_type)
            self.fwd_others.extend(copies)
            records, back = self._gemms(node, fwds, out_tensors[0], module, module_type, ctx)
            records[:0] = copies
            site = next(r for r in records if isinstance(r, GemmSite))
            layout = nchw_output_elems(fwds[0], DTYPES[site.dtype], out_tensors[0])
            if layout:  # the tensor-core convolution's output, written back to NCHW
                transform = self._nchw_layout(node, out_tensors[0], module, module_type)
                records.append(transform)
                self.fwd_others.append(transform)
            if name in RNN_GATES:  # the cell kernel of every step, and its backward
                cells = rnn_other_ops(node, self.ctx, module, module_type, ctx)
                self.fwd_others.extend(cells)
                records += cells
                if self.train and self.requires[node]:
                    back[:0] = [_backward_other(c) for c in cells]
        else:
            records, back = self._other(node, name, out_tensors, module, module_type)
        node.meta[META_KEY] = tuple(records) + tuple(back)
        self.bwd[node] = back

    def _copy(self, node: Any, arg: Any, val: torch.Tensor, module: str, module_type: str
              ) -> OtherOp:
        """The copy kernel that lays GEMM ``node``'s operand ``arg`` out for its library call
        (``operand_copies``): reads and writes the operand once."""
        return OtherOp(module=module, module_type=module_type, op="aten.clone",
                       node=f"{node.name}.{OPERAND_COPY}.{arg.name}", phase="forward",
                       op_class="copy", dtype=self.ctx.act_name, numel=val.numel(),
                       dram_bytes=2 * self.ctx.tensor_bytes(val))

    def _nchw_layout(self, node: Any, out: torch.Tensor, module: str, module_type: str
                     ) -> OtherOp:
        """The kernel that transposes convolution ``node``'s output from the NHWC its
        tensor-core kernel writes to NCHW (``nchw_output_elems``): reads and writes it once."""
        return OtherOp(module=module, module_type=module_type, op="aten.clone",
                       node=f"{node.name}.{NCHW_LAYOUT}", phase="forward", op_class="copy",
                       dtype=self.ctx.act_name, numel=out.numel(),
                       dram_bytes=2 * self.ctx.tensor_bytes(out))

    def _gemms(self, node: Any, fwds: Sequence[ForwardGemm], out: torch.Tensor, module: str,
               module_type: str, handler_ctx: HandlerContext
               ) -> tuple[list[GemmSite | OtherOp], list[GemmSite | OtherOp]]:
        """A GEMM node's records: its GEMMs (SDPA's softmax between them) and their backward."""
        records: list[GemmSite | OtherOp] = []
        back: list[GemmSite | OtherOp] = []
        for f in fwds:
            site = _site(f, self.ctx, module, module_type, node.name)
            records.append(site)
            self.fwd_gemms.append(site)
            if f.op == "sdpa_qk":
                soft = _sdpa_softmax(node, f, self.ctx, module, module_type, handler_ctx)
                records.append(soft)
                self.fwd_others.append(soft)
                if self.train and self.requires[node]:
                    back[:0] = [_backward_other(soft)]
            if self.train and not node.meta.get(NO_GRAD):  # backward runs in reverse, in a node too
                back[:0] = _backward_sites(f, site)
                if f.bias_grad_elems:
                    back.append(_bias_grad(site, f.bias_grad_elems, out, self.ctx))
        return records, back

    def _other(self, node: Any, name: str, out_tensors: list[torch.Tensor], module: str,
               module_type: str) -> tuple[list[GemmSite | OtherOp], list[GemmSite | OtherOp]]:
        """A non-GEMM node's record and, where its output needs grad, its backward."""
        other = _other(node, name, node.all_input_nodes, out_tensors, self.ctx, module,
                       module_type)
        self.fwd_others.append(other)
        back: list[GemmSite | OtherOp] = []
        if self.train and self.requires[node] and other.op_class != "view":
            back.append(_backward_other(other))
        return [other], back

    def records(self) -> tuple[tuple[GemmSite, ...], tuple[OtherOp, ...]]:
        """Every GEMM and every other op: the forward pass, then (train) the backward pass."""
        if self.train:
            for node, back in self.bwd.items():
                sums = _gradient_sums(node, self.requires, self.ctx, self.model_name)
                if sums:  # autograd sums a tensor's gradients before the op that made it runs
                    back[:0] = sums
                    node.meta[META_KEY] = node.meta.get(META_KEY, ()) + tuple(sums)
        bwd_gemms: list[GemmSite] = []
        bwd_others: list[OtherOp] = []
        for back in reversed(self.bwd.values()):
            for r in back:
                if isinstance(r, GemmSite):
                    bwd_gemms.append(r)
                else:
                    bwd_others.append(r)
        return tuple(self.fwd_gemms + bwd_gemms), tuple(self.fwd_others + bwd_others)
