"""torch_gemm_cost: where a model's GPU time goes, GEMM by GEMM, before it runs.

    report = torch_gemm_cost.estimate(model, (input_ids,), device="h100_sxm5_80gb",
                                      dtype=torch.bfloat16)
    print(report)
"""

from .advise import PaddingAdvice
from .api import annotate, compare, estimate
from .hardware.catalog import DeviceSpec, get_device, list_devices
from .hardware.datasheet import load_spec_file
from .hardware.dtypes import resolve_dtype
from .llm import LlmPlan, LlmPlanRow, format_llm_layers, format_llm_plan, plan_llm
from .predict.collectives import predict_collective_ms
from .predict.price import GemmEstimate, OpEstimate
from .predict.query import explain, predict_gemm_ms
from .records import GemmSite, OtherOp, register_gemm_handler
from .report import CostReport, format_advice, format_comparison
from .serving import ServingSim, simulate_serving
from .trainplan import TrainingPlan, TrainingSearch, plan_training, search_training_plans

__version__ = "0.1.0"

__all__ = [
    "CostReport",
    "DeviceSpec",
    "GemmEstimate",
    "GemmSite",
    "LlmPlan",
    "LlmPlanRow",
    "OpEstimate",
    "OtherOp",
    "PaddingAdvice",
    "ServingSim",
    "TrainingPlan",
    "TrainingSearch",
    "annotate",
    "compare",
    "estimate",
    "explain",
    "format_advice",
    "format_comparison",
    "format_llm_layers",
    "format_llm_plan",
    "get_device",
    "list_devices",
    "load_spec_file",
    "plan_llm",
    "plan_training",
    "predict_collective_ms",
    "predict_gemm_ms",
    "register_gemm_handler",
    "resolve_dtype",
    "search_training_plans",
    "simulate_serving",
]
