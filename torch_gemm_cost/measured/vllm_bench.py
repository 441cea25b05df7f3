"""``vllm bench serve --save-result`` JSON read into the figures a host profile is made of.

The file is what vLLM's serving benchmark writes (vllm/benchmarks/serve.py, ``main``): one JSON
object (``--append-result`` appends one a line) holding the run's set-up (``request_rate``,
``"inf"`` when every request is sent at once; ``burstiness``, 1 for Poisson gaps;
``max_concurrency``, null for none), its totals (``completed``, ``total_input_tokens``,
``total_output_tokens``) and each latency's statistics (``median_ttft_ms``,
``median_itl_ms``, ``median_tpot_ms``, ...). With ``--save-detailed`` it holds every request's
lengths too (``input_lens``, ``output_lens``); without, the lengths are the totals' means.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..suggest import nearest

__all__ = ["BenchServe", "parse_vllm_bench", "read_vllm_bench"]


@dataclass(frozen=True)
class BenchServe:
    """One ``vllm bench serve`` run: its load (``concurrency`` clients at most, requests sent
    at ``rate_qps``, None for all at once), its requests' lengths (each request's where the
    file has them, else the means), and the medians of its time to first token and of the gap
    between tokens (ms)."""

    source: str
    concurrency: int | None
    rate_qps: float | None
    completed: int
    prompt_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    ttft_p50_ms: float
    itl_p50_ms: float
    model: str = ""

    @property
    def load(self) -> str:
        parts = [f"concurrency {self.concurrency}"] if self.concurrency is not None else []
        if self.rate_qps is not None:
            parts.append(f"Poisson {self.rate_qps:g} QPS")
        return ", ".join(parts)


def _field(data: dict[str, Any], name: str, source: str) -> Any:
    if name not in data:
        near = nearest(name, [str(k) for k in data])
        hint = f" (the file has {', '.join(map(repr, near))})" if near else ""
        raise ValueError(f"{source}: no {name!r} field{hint}; `vllm bench serve --save-result` "
                         "writes it (with the default --percentile-metrics ttft,tpot,itl)")
    return data[name]


def _number(data: dict[str, Any], name: str, source: str, low: float = 0.0) -> float:
    v = _field(data, name, source)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not low <= v < math.inf:
        raise ValueError(f"{source}: {name} must be a number of at least {low:g}, got {v!r}")
    return float(v)


def parse_vllm_bench(data: Any, source: str = "<result>") -> BenchServe:
    """The figures of one result object. A ValueError names ``source`` and the field that is
    missing or bad."""
    if not isinstance(data, dict):
        raise TypeError(f"{source}: a `vllm bench serve` result is a JSON object, got "
                         f"{type(data).__name__}")
    rate = _field(data, "request_rate", source)
    if rate == "inf" or rate == math.inf:
        rate_qps = None
    elif isinstance(rate, (int, float)) and not isinstance(rate, bool) and 0 < rate < math.inf:
        rate_qps = float(rate)
    else:
        raise ValueError(f"{source}: request_rate must be a positive number or \"inf\", got "
                         f"{rate!r}")
    if rate_qps is not None and data.get("burstiness", 1.0) != 1.0:
        raise ValueError(f"{source}: burstiness {data['burstiness']!r}: only Poisson arrivals "
                         "(burstiness 1) are simulated; nearest good: 1")
    conc = _field(data, "max_concurrency", source)
    if conc is not None and (isinstance(conc, bool) or not isinstance(conc, int) or conc < 1):
        raise ValueError(f"{source}: max_concurrency must be a whole number of at least 1 or "
                         f"null, got {conc!r}")
    if conc is None and rate_qps is None:
        raise ValueError(f"{source}: request_rate \"inf\" without max_concurrency sends every "
                         "request at once; profile a load of a rate or a concurrency (e.g. "
                         "--max-concurrency 1)")
    completed = int(_number(data, "completed", source, 1))
    ins, outs = data.get("input_lens"), data.get("output_lens")
    if isinstance(ins, list) and isinstance(outs, list) and len(ins) == len(outs) and ins:
        prompt_lens, output_lens = _lens(ins, "input_lens", source), \
            _lens(outs, "output_lens", source)
    else:
        prompt = _number(data, "total_input_tokens", source, 1) / completed
        gen = _number(data, "total_output_tokens", source, 1) / completed
        prompt_lens, output_lens = (max(1, round(prompt)),), (max(1, round(gen)),)
    return BenchServe(source=source, concurrency=conc, rate_qps=rate_qps, completed=completed,
                      prompt_lens=prompt_lens, output_lens=output_lens,
                      ttft_p50_ms=_number(data, "median_ttft_ms", source),
                      itl_p50_ms=_number(data, "median_itl_ms", source),
                      model=str(data.get("model_id") or ""))


def _lens(values: list[Any], name: str, source: str) -> tuple[int, ...]:
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int) or v < 1]
    if bad:
        raise ValueError(f"{source}: {name} holds {bad[0]!r}; token counts of at least 1")
    return tuple(values)


def read_vllm_bench(path: str | os.PathLike[str]) -> BenchServe:
    """The one result a ``--save-result`` file holds (a file of appended results must hold
    one)."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"vllm bench result {str(path)!r}: no such file")
    text = file.read_text()
    try:
        return parse_vllm_bench(json.loads(text), str(path))
    except json.JSONDecodeError as e:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) > 1 and all(_is_json(line) for line in lines):
            raise ValueError(f"{path}: {len(lines)} results (--append-result); keep the one "
                             "of the load to profile in a file of its own") from None
        raise ValueError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True
