"""Serving plans of a causal LM (``plan_llm``), priced through the same predict stage as
``estimate``: one job a module, in the order a plan runs them.

- ``shape``: the serving shape of a config (through ``hf_config``, the one config reader);
  ``shard``: one GPU's config under tensor parallelism; ``model``: the config and its meta model;
  ``pipeline``: pipeline stages and batches in flight through them; ``experts``: expert
  parallelism; ``comm``: the collectives;
- ``step``: a forward pass captured once per shape, in the serving engine's layout;
  ``affine``: every shape of a model's step from four captures;
- ``weights``: quantized weight formats; ``pricing``: a step priced by ``price_records`` with
  the serving engine's additions explicit; ``attention``: the serving engine's attention kernel;
  ``pricer``: a plan's passes priced (dense, attention, launches, collectives, stages);
- ``schedule``: prefill chunks and decode contexts; ``memory``: weights, KV cache, activations
  and the largest batch; ``checks``: the arguments; ``assumptions``: what a plan assumes;
- ``plan``: ``plan_llm``; ``records``: ``LlmPlanRecord`` and ``LlmPlanRow``; ``text``: their text;
  ``result``: ``LlmPlan``, the record that prints as its text.
"""

from .plan import plan_llm
from .records import LlmPlanRecord, LlmPlanRow
from .result import LlmPlan
from .text import format_llm_assumptions, format_llm_layers, format_llm_plan

__all__ = ["LlmPlan", "LlmPlanRecord", "LlmPlanRow", "format_llm_assumptions", "format_llm_layers",
           "format_llm_plan", "plan_llm"]
