"""Training plans and collective profiles as text: the rendering of ``trainplan``, which
predicts nothing."""

from __future__ import annotations

from ..predict.comm_profile import CommProfile, bus_factor

__all__ = ["format_comm_profile"]


def format_comm_profile(profile: CommProfile) -> str:
    """One line per measured group: its message sizes and the bus bandwidth at the largest."""
    from tabulate import tabulate

    body = []
    for collective, n, g in profile.groups():
        lo, hi = profile.size_range(collective, n, g) or (0.0, 0.0)
        t_ms = profile.time_ms(collective, hi, n, g) or 0.0
        busbw = hi * bus_factor(collective, n) / (t_ms * 1e-3) if t_ms else 0.0
        body.append([collective, n, g, _size(lo), _size(hi), busbw / 1e9])
    table = tabulate(body, headers=["collective", "GPUs", "per node", "from", "to",
                                    "busbw GB/s at largest"], floatfmt=".1f")
    gpu = f" of {profile.gpu_name}" if profile.gpu_name else ""
    return f"{table}\ncollective profile{gpu} from {', '.join(profile.sources)}"


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"
