"""A serving step at any token count from a few captures, so that a model is captured once for
every step shape a simulation or a sweep prices.

A step's records (``llm.step.Step``, read here without importing it) are polynomials in its
``tokens`` T and ``sampled`` S: a GEMM's rows, an op's elements and bytes are affine in T and
S, and the attention's scores (causal FLOPs, the score matrix's elements) are quadratic in T. Four captures, at (T0, S0),
(T0 + 1, S0), (T0 + 2, S0) and (T0, S0 + 1), give every integer field as
``f0 + α·dT + γ·dT·(dT − 1)/2 + β·dS`` exactly (dT = T − T0, dS = S − S0).

What is not polynomial is checked, never assumed: the captures must hold the same records
(ops, modules, kernels, dropped copies); an operand's alignment that changes with T or S must
be the alignment of the dim that changes (``alignment_bytes``); and a check capture at the
largest token count the caller prices must equal its derived step, since a byte count capped
by a model dim (a gather reads at most its table) bends the line past that dim. T = 1 is
captured apart: a one-token step's graph differs (no causal mask, other fusions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

from ..hardware.dtypes import DTYPES
from ..records.types import AttentionShape, alignment_bytes

__all__ = ["BASE_SAMPLED", "BASE_TOKENS", "StepFamily"]

BASE_TOKENS = 32  # T0; T0 + 1 and T0 + 2 are aligned differently, so alignments are told apart
BASE_SAMPLED = 16  # S0
_ALIGN = {"a_align_bytes": "in", "b_align_bytes": "in", "c_align_bytes": "out"}
# (dT, dS) of the four base captures
_POINTS = ((0, 0), (1, 0), (2, 0), (0, 1))


class StepFamily:
    """The steps of one model (config, dtype) at every (tokens, sampled): ``of(T, S)`` derived
    from four base captures for 2 ≤ T ≤ ``max_tokens``, captured (``capture(T, S)``) at T = 1
    or where the captures do not fit a polynomial (``derived`` is False then)."""

    def __init__(self, capture: Callable[[int, int], Any], max_tokens: int) -> None:
        self.capture, self.max_tokens = capture, max_tokens
        t0, s0 = BASE_TOKENS, BASE_SAMPLED
        self.reason = ""
        self._records: dict[str, list[_Poly]] = {}
        self._sampled: tuple[list[int], list[int], list[int]] | None = None
        try:
            steps = [capture(t0 + dt, s0 + ds) for dt, ds in _POINTS]
            self._fit(steps)
            check = max(max_tokens, t0 + 3)
            if self.of(check, s0) != capture(check, s0):
                raise ValueError(f"the step of {check} tokens is not the polynomial's")
        except ValueError as e:
            self._records, self.reason = {}, str(e)
        if self._records:
            self._sampled = self._split()

    @property
    def derived(self) -> bool:
        """Whether steps of two or more tokens are derived (else each is captured)."""
        return bool(self._records)

    @property
    def separable(self) -> bool:
        """Whether a step is a part of its tokens and a part of its sampled tokens alone (the
        lm_head's rows, the logits), so that ``sampled_part`` prices the second apart."""
        return self._sampled is not None

    def sampled_part(self, sampled: int) -> Any:
        """The records of a step that depend on its sampled tokens (and not on its tokens),
        with the kernels that run them, at ``sampled``: a step of its own."""
        if self._sampled is None:
            raise ValueError(f"the steps of {self.base.model_name} do not separate: {self.reason}")
        sites, others, kernels = self._sampled
        ds = sampled - BASE_SAMPLED
        where = {i: j for j, i in enumerate(others)}
        return replace(
            self.base, sites=tuple(self._records["sites"][i].at(0, ds) for i in sites),
            others=tuple(self._records["others"][i].at(0, ds) for i in others),
            kernels=tuple(replace(self._records["kernels"][k].at(0, ds),
                                  ops=tuple(where[i] for i in self.base.kernels[k].ops))
                          for k in kernels),
            dropped=frozenset(where[i] for i in self.base.dropped if i in where))

    def _split(self) -> tuple[list[int], list[int], list[int]] | None:
        """The records of the sampled part: (sites, others, kernels) by position, or None
        where a record of it depends on the tokens too."""
        recs = self._records
        sites = [i for i, p in enumerate(recs["sites"]) if p.depends()[1]]
        ops = {i for i, p in enumerate(recs["others"]) if p.depends()[1]}
        kernels = [j for j, (k, p) in enumerate(zip(self.base.kernels, recs["kernels"]))
                   if p.depends()[1] or ops & set(k.ops)]
        for j in kernels:
            ops.update(self.base.kernels[j].ops)
        parts = ([recs["sites"][i] for i in sites] + [recs["others"][i] for i in ops]
                 + [recs["kernels"][j] for j in kernels])
        if any(p.depends()[0] for p in parts):
            return None
        return sites, sorted(ops), kernels

    def _fit(self, steps: list[Any]) -> None:
        base = steps[0]
        for name in ("model_name", "dropped", "module_types", "config", "lm_head", "experts"):
            if any(getattr(s, name) != getattr(base, name) for s in steps[1:]):
                raise ValueError(f"the base captures differ in {name}")
        self.base = base
        for name in ("sites", "others", "kernels"):
            if len({len(getattr(s, name)) for s in steps}) > 1:
                raise ValueError(f"the base captures hold different numbers of {name}")
            self._records[name] = [_Poly(list(r)) for r in zip(*(getattr(s, name)
                                                                for s in steps))]
        for p in self._records["sites"]:
            p.fit_alignments()

    def of(self, tokens: int, sampled: int) -> Any:
        """The step of ``tokens`` tokens sampling ``sampled`` of them (1 ≤ S ≤ T)."""
        if not 1 <= sampled <= tokens:
            raise ValueError(f"a step samples 1 to its {tokens} tokens, got sampled={sampled}")
        if tokens < 2 or not self._records or tokens > max(self.max_tokens, BASE_TOKENS + 3):
            return self.capture(tokens, sampled)
        dt, ds = tokens - BASE_TOKENS, sampled - BASE_SAMPLED
        sites, others, kernels = (tuple(p.at(dt, ds) for p in self._records[name])
                                  for name in ("sites", "others", "kernels"))
        return replace(self.base, sites=sites, others=others, kernels=kernels)


class _Poly:
    """One record's integer fields (nested attention shapes too) as
    ``f0 + α·dT + γ·dT·(dT − 1)/2 + β·dS``; its other fields equal in every capture."""

    def __init__(self, records: list[Any]) -> None:
        base = records[0]
        if any(type(r) is not type(base) for r in records):
            raise ValueError(f"the base captures hold different records: {type(base).__name__}")
        self.base = base
        self.terms: dict[str, tuple[int, int, int]] = {}  # field -> (α, γ, β)
        self.nested: dict[str, _Poly] = {}
        self.align_dims: dict[str, str] = {}
        for f in fields(base):
            v = [getattr(r, f.name) for r in records]
            if all(isinstance(x, AttentionShape) for x in v):
                self.nested[f.name] = _Poly(v)
            elif isinstance(v[0], int) and not isinstance(v[0], bool):
                terms = (v[1] - v[0], v[2] - 2 * v[1] + v[0], v[3] - v[0])
                if terms != (0, 0, 0):
                    self.terms[f.name] = terms
            elif any(x != v[0] for x in v[1:]):
                raise ValueError(f"the base captures differ in {type(base).__name__}.{f.name}: "
                                 f"{v}")

    def fit_alignments(self) -> None:
        """An alignment that changes with T or S follows the dim (m, n or k) whose alignment
        it equals at every base capture."""
        site = self.base
        for name, which in _ALIGN.items():
            if name not in self.terms:
                continue
            elem = DTYPES[site.dtype if which == "in" else site.out_dtype].in_bytes
            want = [self._value(name, dt, ds) for dt, ds in _POINTS]
            for dim in ("m", "n", "k"):
                if dim in self.terms and want == [
                        alignment_bytes(self._value(dim, dt, ds), elem) for dt, ds in _POINTS]:
                    self.align_dims[name] = dim
                    break
            else:
                raise ValueError(f"{site.module} ({site.op}): {name} changes with the tokens but "
                                 "follows none of its dims")

    def depends(self) -> tuple[bool, bool]:
        """(on the tokens, on the sampled tokens): whether any field changes with them."""
        on_t = any(a or g for a, g, _ in self.terms.values())
        on_s = any(b for _, _, b in self.terms.values())
        for nested in self.nested.values():
            t, s = nested.depends()
            on_t, on_s = on_t or t, on_s or s
        return on_t, on_s

    def _value(self, name: str, dt: int, ds: int) -> int:
        a, g, b = self.terms.get(name, (0, 0, 0))
        return int(getattr(self.base, name)) + a * dt + g * (dt * (dt - 1) // 2) + b * ds

    def at(self, dt: int, ds: int) -> Any:
        values: dict[str, Any] = {name: self._value(name, dt, ds) for name in self.terms
                                  if name not in _ALIGN}
        for name, dim in self.align_dims.items():
            elem = DTYPES[self.base.dtype if _ALIGN[name] == "in"
                          else self.base.out_dtype].in_bytes
            values[name] = alignment_bytes(values[dim], elem)
        for name, nested in self.nested.items():
            values[name] = nested.at(dt, ds)
        return replace(self.base, **values) if values else self.base
