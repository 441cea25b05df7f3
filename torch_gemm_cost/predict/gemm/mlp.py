"""Stage 5's learned part: a small MLP from normalized features to SM utilization in (0, 1).

Weights are plain named tensors so that they save to JSON and train with the physical constants.
"""

from __future__ import annotations

import torch

__all__ = ["MLP_PARAM_NAMES", "init_mlp", "mlp_utilization"]

MLP_PARAM_NAMES: tuple[str, ...] = ("mlp_w1", "mlp_b1", "mlp_w2", "mlp_b2", "mlp_w3", "mlp_b3")


def init_mlp(n_features: int, hidden: int, generator: torch.Generator,
             util_init: float = 0.85) -> dict[str, torch.Tensor]:
    """Seeded init; the output starts near ``util_init`` for every input."""

    def uniform(rows: int, cols: int, scale: float) -> torch.Tensor:
        return (torch.rand(rows, cols, generator=generator, dtype=torch.float64) * 2 - 1) * scale

    bias = torch.logit(torch.tensor(util_init, dtype=torch.float64))
    return {
        "mlp_w1": uniform(n_features, hidden, (3.0 / n_features) ** 0.5),
        "mlp_b1": torch.zeros(hidden, dtype=torch.float64),
        "mlp_w2": uniform(hidden, hidden, (3.0 / hidden) ** 0.5),
        "mlp_b2": torch.zeros(hidden, dtype=torch.float64),
        "mlp_w3": uniform(hidden, 1, 0.1 * (3.0 / hidden) ** 0.5).flatten(),
        "mlp_b3": bias.reshape(1),
    }


def mlp_utilization(features: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
    """(N, F) features -> (N,) utilization in (0, 1)."""
    h = torch.tanh(features @ p["mlp_w1"] + p["mlp_b1"])  # (N, H)
    h = torch.tanh(h @ p["mlp_w2"] + p["mlp_b2"])  # (N, H)
    return torch.sigmoid(h @ p["mlp_w3"] + p["mlp_b3"])  # (N,)
