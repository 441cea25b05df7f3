"""Training plans for many GPUs."""
