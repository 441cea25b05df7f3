"""Training plans for many GPUs (``plan_training``) and the search over layouts
(``search_training_plans``), priced through the same predict stage as ``estimate``: one job a
module, in the order a plan runs them.

- ``model``: the model built from its config and one micro-batch's training step captured,
  each record placed in its layer and given its tensor-parallel role (``graph``);
- ``shard``: one GPU's share of the records; ``compute``: them priced per segment;
- ``layout``: the layout and its checks; ``schedule``: the pipeline schedule, op by op;
- ``comm``: the collectives and their overlap; ``memory``: bytes per GPU; ``optimizer``: the
  optimizer step's kernels; ``planner``: a layout put together into a step;
- ``plan``: ``plan_training``; ``search``: ``search_training_plans``; ``assumptions``: what a
  plan assumes; ``records`` and ``result``: the plan's records; ``text``: their text.
"""

from .layout import Layout
from .memory import MemoryBreakdown
from .plan import plan_training
from .records import Rejected, StageRow, TrainingPlanRecord, TrainingSearchRecord
from .result import TrainingPlan, TrainingSearch
from .search import search_training_plans
from .text import (
    format_comm_profile,
    format_training_assumptions,
    format_training_plan,
    format_training_search,
)

__all__ = ["Layout", "MemoryBreakdown", "Rejected", "StageRow", "TrainingPlan",
           "TrainingPlanRecord", "TrainingSearch", "TrainingSearchRecord",
           "format_comm_profile", "format_training_assumptions", "format_training_plan",
           "format_training_search", "plan_training", "search_training_plans"]
