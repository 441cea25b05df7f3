"""``LlmPlan``: a serving plan's record (``records.LlmPlanRecord``) with its text, so that
``print(plan)`` shows the plan; the text itself is ``llm.text``'s."""

from __future__ import annotations

from . import text
from .records import LlmPlanRecord

__all__ = ["LlmPlan"]


class LlmPlan(LlmPlanRecord):
    """A serving plan of one model on one device (the fields of ``LlmPlanRecord``), printed as
    its table of batch sizes and what the plan is of."""

    def table(self) -> str:
        """One line per batch size: latencies, throughput, memory and the roofline limits."""
        return text.plan_table(self)

    def footer(self) -> str:
        """What the plan is of: model, device, formats, lengths, max batch, assumptions' gist."""
        return text.plan_footer(self)

    def layer_table(self, batch: int | None = None, depth: int | None = 2) -> str:
        """The decode step's cost table at ``batch`` (default: the largest), by module."""
        return text.format_llm_layers(self, batch, depth)

    def __str__(self) -> str:
        return text.format_llm_plan(self)
