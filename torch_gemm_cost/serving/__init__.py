"""Serving under load: a workload of requests served by vLLM V1's scheduler, step by step, each
step priced as ``plan_llm`` prices one. One job a module, in the order a simulation runs them:

- ``workload``: request lengths (a count or a distribution) and arrivals (Poisson, constant,
  closed loop);
- ``dense``: a step's GEMMs and kernels priced through ``llm.pricing``, cached by shape, the
  model captured once (``llm.affine``);
  ``cost``: a step's time (dense, attention, collectives);
- ``scheduler``: vLLM V1's scheduler (continuous batching, chunked prefill, preemption);
- ``host``: the host's share (``HostPath``): vLLM's API server as one server the requests and
  their streamed tokens queue on, and the engine core's host time a step; ``host_fit``: a
  ``HostPath`` calibrated from a ``vllm bench serve --save-result`` run at one load;
- ``simulate``: ``simulate_serving`` and ``ServingEngine``; ``slo``: the largest rate that
  meets a latency objective; ``result``: ``ServingSim``; ``text``: its text.
"""

from .host import HostPath
from .result import Percentiles, RequestLatency, ServingSim
from .simulate import ServingEngine, simulate_serving
from .workload import Lengths

__all__ = ["HostPath", "Lengths", "Percentiles", "RequestLatency", "ServingEngine", "ServingSim",
           "simulate_serving"]
