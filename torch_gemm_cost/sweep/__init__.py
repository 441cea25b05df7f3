"""Sweeps: one command (``estimate``, ``llm``, ``serve-sim``) over every combination of option
values that a YAML file lists, a row per combination, run on a local process pool or Ray.

- ``spec``: the YAML read and checked (option names as the command line spells them);
- ``rows``: a combination run as its command runs it, its figures or its error;
- ``run``: the calls spread over the workers, the rows written as CSV or Parquet;
- ``pareto``: the Pareto front of latency against GPUs (or cost) and its plot.
"""

from .pareto import pareto_front, plot_pareto
from .run import run_sweep, write_rows
from .spec import SweepSpec, read_sweep

__all__ = ["SweepSpec", "pareto_front", "plot_pareto", "read_sweep", "run_sweep", "write_rows"]
