"""A serving workload: request lengths drawn from a distribution, and when the requests arrive
(Poisson or evenly spaced at a rate, or a fixed number of clients each sending its next request
when the last one finishes). Randomness comes from one seed.

    Lengths.parse("lognormal:512:256")    # mean 512 tokens, standard deviation 256
    Lengths.parse("uniform:128:1024")     # every length from 128 to 1024 alike
    Lengths.parse("file:lengths.txt")     # one length a line, drawn with replacement
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..suggest import check_choice

__all__ = ["ARRIVALS", "KINDS", "Lengths", "Request", "arrival_times_ms", "lengths_of"]

KINDS = ("constant", "uniform", "normal", "lognormal", "file")
ARRIVALS = ("poisson", "constant")


@dataclass(frozen=True)
class Request:
    """One request: when it arrives, its prompt's tokens and the tokens it generates."""

    id: int
    arrival_ms: float
    prompt: int
    gen: int


@dataclass(frozen=True)
class Lengths:
    """A distribution of token counts: ``constant`` (``a``), ``uniform`` (integers ``a`` to
    ``b``), ``normal`` and ``lognormal`` (mean ``a``, standard deviation ``b`` of the lengths
    themselves), or ``file`` (the lengths in ``path``, drawn with replacement). Every draw is
    rounded and at least 1."""

    kind: str
    a: float = 0.0
    b: float = 0.0
    values: tuple[int, ...] = ()  # a file's lengths
    path: str = ""

    def __post_init__(self) -> None:
        check_choice("length distribution", self.kind, KINDS)
        if self.kind == "file":
            if not self.values:
                raise ValueError(f"lengths file {self.path!r} holds no lengths")
            return
        if not math.isfinite(self.a) or self.a < 1:
            raise ValueError(f"a {self.kind} length needs a mean (or low end) of at least 1, "
                             f"got {self.a:g}; nearest good: 1")
        if self.kind == "uniform" and self.b < self.a:
            raise ValueError(f"uniform lengths from {self.a:g} to {self.b:g}: the high end is "
                             f"below the low end; nearest good: uniform:{self.a:g}:{self.a:g}")
        if self.kind in ("normal", "lognormal") and not self.b >= 0:
            raise ValueError(f"{self.kind} lengths need a standard deviation of at least 0, got "
                             f"{self.b:g}; nearest good: 0")

    @classmethod
    def parse(cls, text: str) -> Lengths:
        """``N``, ``constant:N``, ``uniform:LO:HI``, ``normal:MEAN:STD``,
        ``lognormal:MEAN:STD`` or ``file:PATH``."""
        kind, _, rest = text.partition(":")
        if not rest:
            try:
                return cls("constant", float(int(text)))
            except ValueError:
                raise ValueError(f"lengths {text!r}: give a token count (512) or a "
                                 "distribution (uniform:128:1024, normal:512:128, "
                                 "lognormal:512:256, file:PATH)") from None
        kind = check_choice("length distribution", kind, KINDS)
        if kind == "file":
            return cls.read(rest)
        parts = rest.split(":")
        want = 1 if kind == "constant" else 2
        try:
            nums = [float(p) for p in parts]
        except ValueError:
            nums = []
        if len(nums) != want:
            raise ValueError(f"lengths {text!r}: {kind} takes {want} number(s), e.g. "
                             f"{_EXAMPLES[kind]}")
        return cls(kind, nums[0], nums[1] if len(nums) > 1 else 0.0)

    @classmethod
    def read(cls, path: str) -> Lengths:
        """The lengths in a text file, one a line (blank lines and ``#`` comments skipped)."""
        file = Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"lengths file {path!r}: no such file")
        values = []
        for n, line in enumerate(file.read_text().splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            try:
                v = int(line)
            except ValueError:
                raise ValueError(f"{path}, line {n}: {line!r} is not a token count") from None
            if v < 1:
                raise ValueError(f"{path}, line {n}: length {v} is below 1")
            values.append(v)
        return cls("file", values=tuple(values), path=str(path))

    def draw(self, n: int, rng: random.Random) -> list[int]:
        """``n`` lengths."""
        if self.kind == "constant":
            return [max(1, round(self.a))] * n
        if self.kind == "uniform":
            return [rng.randint(round(self.a), round(self.b)) for _ in range(n)]
        if self.kind == "file":
            return [rng.choice(self.values) for _ in range(n)]
        if self.kind == "normal":
            return [max(1, round(rng.gauss(self.a, self.b))) for _ in range(n)]
        # lognormal with the lengths' own mean a and standard deviation b
        sigma2 = math.log1p((self.b / self.a) ** 2)
        mu = math.log(self.a) - sigma2 / 2
        return [max(1, round(rng.lognormvariate(mu, math.sqrt(sigma2)))) for _ in range(n)]

    @property
    def max(self) -> float:
        """The largest length a draw can take (inf for normal and lognormal)."""
        if self.kind == "constant":
            return max(1, round(self.a))
        if self.kind == "uniform":
            return round(self.b)
        if self.kind == "file":
            return max(self.values)
        return math.inf if self.b > 0 else max(1, round(self.a))

    def __str__(self) -> str:
        if self.kind == "constant":
            return str(round(self.a))
        if self.kind == "file":
            return f"file:{self.path}"
        return f"{self.kind}:{self.a:g}:{self.b:g}"


_EXAMPLES = {"constant": "constant:512", "uniform": "uniform:128:1024",
             "normal": "normal:512:128", "lognormal": "lognormal:512:256"}


def lengths_of(value: Any, name: str) -> Lengths:
    """A ``Lengths`` from an int, a string ``Lengths.parse`` reads, or a ``Lengths``."""
    if isinstance(value, Lengths):
        return value
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a token count or a distribution, got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"{name} must be at least 1 token, got {value}; nearest good: 1")
        return Lengths("constant", float(value))
    if isinstance(value, str):
        return Lengths.parse(value)
    raise TypeError(f"{name} must be a token count, a distribution string (e.g. "
                    f"'lognormal:512:256') or a Lengths, got {type(value).__name__}")


def arrival_times_ms(n: int, rate_qps: float, arrival: str, rng: random.Random) -> list[float]:
    """When ``n`` requests arrive at ``rate_qps`` requests a second: Poisson (exponential gaps,
    as vLLM's benchmark_serving sends them) or ``constant`` gaps; the first at 0."""
    arrival = check_choice("arrival", arrival, ARRIVALS)
    gap_ms = 1e3 / rate_qps
    out, t = [], 0.0
    for i in range(n):
        if i:
            t += rng.expovariate(1.0 / gap_ms) if arrival == "poisson" else gap_ms
        out.append(t)
    return out
