"""``TrainingPlan`` and ``TrainingSearch``: the records of ``records`` with their text, so that
``print(plan)`` shows the plan; the text itself is ``text``'s."""

from __future__ import annotations

from . import text
from .records import TrainingPlanRecord, TrainingSearchRecord

__all__ = ["TrainingPlan", "TrainingSearch"]


class TrainingPlan(TrainingPlanRecord):
    """A training step on many GPUs (the fields of ``TrainingPlanRecord``), printed as its
    summary and its table of pipeline stages."""

    def stage_table(self) -> str:
        """One line per pipeline stage: layers, compute, collectives, memory."""
        return text.stage_table(self)

    def __str__(self) -> str:
        return text.format_training_plan(self)


class TrainingSearch(TrainingSearchRecord):
    """The ranked layouts of a search (the fields of ``TrainingSearchRecord``), printed as a
    table of the best and of why the others lose."""

    def __str__(self) -> str:
        return text.format_training_search(self)
