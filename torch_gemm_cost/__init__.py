"""torch_gemm_cost: where a model's GPU time goes, GEMM by GEMM, before it runs.

    report = torch_gemm_cost.estimate(model, (input_ids,), device="h100_sxm5_80gb",
                                      dtype=torch.bfloat16)
    print(report)
"""

from .devices import DeviceSpec, get_device, list_devices
from .dtypes import resolve_dtype
from .gemms import GemmSite, OtherOp
from .report import CostReport, GemmEstimate, OpEstimate

__version__ = "0.1.0"

__all__ = [
    "CostReport",
    "DeviceSpec",
    "GemmEstimate",
    "GemmSite",
    "OpEstimate",
    "OtherOp",
    "get_device",
    "list_devices",
    "resolve_dtype",
]
