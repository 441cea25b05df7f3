"""The one way an error names a bad value and the good ones nearest to it.

Closeness is difflib's similarity ratio of the two spellings (twice the matched characters over
the characters of both), so a typo, a missing suffix or a swapped pair of letters finds its name.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Sequence
from typing import TypeVar

__all__ = ["check_choice", "nearest", "nearest_divisors", "unknown"]

T = TypeVar("T")
SHOWN = 12  # known values an error lists where none is near; it counts the rest


def nearest(value: object, known: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """Up to ``n`` of ``known`` whose spelling is within ``cutoff`` of ``value``'s, closest
    first.

    'bfloat61' and 'bfloat16' share 'bfloat' and then one of '6', '1': ratio 2·7/16 = 0.875;
    'float16' shares 'float' and one more: 2·6/(8 + 7) = 0.8; 'int8' shares only 't':
    2·1/(8 + 4) = 0.17, under the cutoff.

    >>> nearest("bfloat61", ["int8", "float16", "bfloat16"])
    ['bfloat16', 'float16']
    """
    return difflib.get_close_matches(str(value), list(known), n=n, cutoff=cutoff)


def nearest_divisors(n: int, value: int, k: int = 2) -> list[int]:
    """The ``k`` divisors of ``n`` nearest ``value``, nearest first (the smaller on a tie).

    >>> nearest_divisors(8, 3), nearest_divisors(12, 5, 3)
    ([2, 4], [4, 6, 3])
    """
    good = [d for d in range(1, n + 1) if n % d == 0]
    return sorted(good, key=lambda d: (abs(d - value), d))[:k]


def unknown(kind: str, value: object, known: Iterable[str], *, close: Sequence[str] | None = None,
            n: int = 3, cutoff: float = 0.6) -> str:
    """The message for a ``kind`` that is none of ``known``: it names ``value`` and the nearest
    known ones (``close``, by default ``nearest(value, known, n, cutoff)``), or every known one
    where none is near (the first ``SHOWN`` of them, and how many more). It ends a sentence,
    so a caller may add one.

    >>> unknown("dtype", "fp17", ["fp8", "fp16", "fp32"])
    "unknown dtype 'fp17'; did you mean 'fp16'?"
    >>> unknown("mode", "serve", ["inference", "train"])
    "unknown mode 'serve'; one of 'inference', 'train'."
    >>> print(unknown("key", "zz", "abcdefghijklmn"))
    unknown key 'zz'; one of 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l' and 2 more.
    """
    known = list(known)
    close = nearest(value, known, n, cutoff) if close is None else close
    if close:
        return f"unknown {kind} {value!r}; did you mean {', '.join(map(repr, close))}?"
    more = f" and {len(known) - SHOWN} more" if len(known) > SHOWN else ""
    return f"unknown {kind} {value!r}; one of {', '.join(map(repr, known[:SHOWN]))}{more}."


def check_choice(kind: str, value: T, good: Collection[T]) -> T:
    """``value`` where it is one of ``good``, else a ValueError naming it and the nearest good
    one (``unknown``).

    >>> check_choice("mode", "train", ("inference", "train"))
    'train'
    >>> check_choice("mode", "infer", ("inference", "train"))
    Traceback (most recent call last):
    ...
    ValueError: unknown mode 'infer'; did you mean 'inference'?
    """
    if value in good:
        return value
    raise ValueError(unknown(kind, value, [str(g) for g in good]))
