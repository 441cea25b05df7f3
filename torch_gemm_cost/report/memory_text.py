"""A run's memory as text: what it holds, its peak against the device's memory, and the
largest batch that fits."""

from __future__ import annotations

from ..records.memory import MAX_BATCH, MemoryEstimate

__all__ = ["gib", "memory_text"]


def gib(n_bytes: float) -> str:
    """Bytes in GiB, the unit of a vendor's "80 GB" of HBM.

    >>> gib(85_899_345_920), gib(3 * 2**20)
    ('80.0 GiB', '0.00293 GiB')
    """
    value = n_bytes / 2**30
    return f"{value:.1f} GiB" if value >= 10 else f"{value:.3g} GiB"


def memory_text(memory: MemoryEstimate) -> str:
    """Two or three lines: the parts, the peak against the device, and whether it fits."""
    m = memory
    parts = [f"weights {gib(m.weights_bytes)}"]
    if m.mode == "train":
        parts.append(f"gradients {gib(m.grads_bytes)}")
        states = m.optimizer_bytes - m.master_weights_bytes
        master = f" + fp32 master {gib(m.master_weights_bytes)}" if m.master_weights_bytes else ""
        parts.append(f"{m.optimizer} states {gib(states)}{master}")
        ckpt = (f", {m.checkpointed_modules} modules checkpointed"
                if m.checkpointed_modules else "")
        parts.append(f"activations saved for backward {gib(m.activations_bytes)}{ckpt}")
    else:
        parts.append(f"activations (live peak) {gib(m.activations_bytes)}")
    if m.kv_cache_bytes:
        parts.append(f"KV cache {gib(m.kv_cache_bytes)}")
    precision = ", mixed precision" if m.mixed_precision else ""
    lines = [f"memory ({m.mode}{precision}): " + ", ".join(parts)]
    if m.device_bytes is None:
        lines.append(f"peak {gib(m.peak_bytes)}; the device's memory size is unknown")
        return "\n".join(lines)
    share = 100.0 * m.peak_bytes / m.device_bytes
    verdict = "fits" if m.fits else "DOES NOT FIT"
    line = f"peak {gib(m.peak_bytes)} of {gib(m.device_bytes)} ({share:.0f}%): {verdict}"
    if m.max_batch is not None:
        most = f"{m.max_batch}" if m.max_batch < MAX_BATCH else f"{MAX_BATCH} or more"
        line += (f"; largest batch that fits: {most} (this batch: {m.batch})" if m.max_batch
                 else "; not even a batch of 1 fits")
    lines.append(line)
    return "\n".join(lines)
