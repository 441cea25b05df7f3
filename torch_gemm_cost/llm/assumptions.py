"""What a serving plan assumes, with its sources, in the order the plan lists them."""

from __future__ import annotations

from ..hardware.catalog import DeviceSpec
from .experts import ExpertParallel
from .schedule import CUDA_GRAPH_SIZES, DECODE_POINTS
from .weights import FP4_BLOCK, GROUP_SIZE, WEIGHT_BYTES

__all__ = ["assumptions", "expert_parallelism"]


def assumptions(tp: int, fmt: str | None, kernel: str, budget: int, utilization: float,
                max_num_seqs: int, *, pp: int = 1, stages: tuple[int, ...] = (),
                comm: str = "", spec: DeviceSpec | None = None,
                experts: ExpertParallel | None = None) -> tuple[str, ...]:
    """What a plan assumes, with its sources, in the order the plan prints them: ``stages``
    the layers of each pipeline stage, ``comm`` what priced the collectives
    (``StepCollectives.source``), ``spec`` the device (its fp4 rate named), ``experts`` the
    expert parallelism."""
    out = [
        ("Engine: vLLM's V1 engine. The batch's requests arrive together; their prompts are "
        f"prefilled first, in forward passes of at most {budget} tokens (chunked prefill, "
        "max_num_batched_tokens: 8192 is vLLM's default for its OpenAI server on H100-class "
        "GPUs, vllm/engine/arg_utils.py), then decoded together, one token per sequence a step."),
        (f"Scheduler: at most max_num_seqs = {max_num_seqs} sequences at once (vLLM's "
        "max_num_seqs; 256 is its OpenAI server's default, raised to 1024 on GPUs of 70 GiB or "
        "more but A100s in recent versions, vllm/engine/arg_utils.py). A batch above it is "
        "flagged: vLLM would run max_num_seqs of its requests and queue the rest, which the "
        "plan does not model."),
        ("TTFT: a request's first token comes with the prefill pass that finishes its prompt. "
        "TTFT mean averages that over the batch's requests, the figure serving benchmarks quote "
        "(vLLM's benchmark_serving prints Mean, Median and P99 TTFT); TTFT max is the last "
        "request's, every prefill pass. TPOT averages the gen - 1 decode steps after the first "
        "token, as benchmark_serving defines it ((latency - TTFT) / (output tokens - 1)); the "
        "batch's latency is TTFT max + (gen - 1) x TPOT. Decode attention is priced at "
        f"{DECODE_POINTS} KV lengths from prompt + 1 to prompt + gen - 1 and integrated by "
        "Simpson's rule."),
        ("Kernels: the model as torch.compile (inductor) fuses it, the residual add with "
        "RMSNorm, SiLU with mul, the rotary embedding of q and k in one kernel (vLLM's "
        "rotary_embedding op), priced with the fused-op constants fitted on vLLM's kernels "
        "(vidur); q/k/v and gate/up, which read one input, as one GEMM "
        "each (vLLM's QKVParallelLinear, MergedColumnParallelLinear); one KV-cache write kernel "
        "a layer (reshape_and_cache_flash); no copy of the attention output (FlashAttention "
        "writes the token-major layout o_proj reads); the lm_head on the sampled tokens only."),
        (f"Attention: {kernel}, the kernel vLLM runs on this device for this head size and KV "
        "dtype, priced by the fused-attention model (fitted on vLLM's kernels) with a cold L2; "
        "a prefill step's chunks against their own context (varlen). FlashAttention 3's varlen "
        "schedule is planned once a step by vLLM's metadata builder (aot_schedule, get_scheduler_metadata), not in each "
        "layer's call; that one small kernel a step is not priced."),
        ("CUDA graphs as vLLM V1 runs them (cudagraph_mode FULL_AND_PIECEWISE, its default "
        "since v0.11, docs.vllm.ai design/cuda_graphs; capture sizes up to "
        f"{CUDA_GRAPH_SIZES[-1]} tokens, cudagraph_capture_sizes): a decode-only step of at most "
        f"{CUDA_GRAPH_SIZES[-1]} tokens replays one full graph, attention included, each kernel "
        "costing its own GPU time, at least its floor, with no launch gaps; a step holding a "
        f"prefill chunk of at most {CUDA_GRAPH_SIZES[-1]} tokens replays piecewise graphs "
        "between the layers' attention calls, which run eagerly, one launch gap a layer (the op "
        "model's launch_ms); a larger step runs without graphs, every kernel paying its launch "
        "gap, as estimate prices an eager model. So a short prompt's TTFT carries its layers' "
        "attention launches and a long one's every launch."),
    ]
    if fmt in ("int8", "int4"):
        out.append(
            f"Weights: {fmt} in GPTQ's symmetric format, groups of {GROUP_SIZE} with one 16-bit "
            f"scale each ({WEIGHT_BYTES[fmt]:.4f} bytes a weight), dequantized in the GEMM's "
            "main loop (Marlin on Ampere/Ada, Machete on Hopper, as vLLM picks them), the "
            "activations run in 16-row MMA steps. Marlin publishes near-ideal ~4x speedups "
            "over fp16 up to batches of 16-32 tokens (github.com/IST-DASLab/marlin); Machete "
            "matches fp16 when compute-bound (vLLM csrc/quantization/machete, Neural Magic "
            "2024). Embedding, lm_head, norms and MoE router stay in the activations' dtype.")
    elif fmt == "w4a8":
        out.append(
            f"Weights: w4a8, int4 weights in groups of {GROUP_SIZE} with one 16-bit scale each "
            f"({WEIGHT_BYTES[fmt]:.4f} bytes a weight) against fp8 (e4m3) activations, on fp8 "
            "tensor cores at the fp8 dense peak (CUTLASS's mixed-input GEMM, vLLM's "
            "CutlassW4A8 kernel on Hopper), each Linear's input cast to fp8 by a kernel of its "
            "own; priced as the GEMM predictor's fp8 GEMMs with the weights read at their int4 "
            "size. No w4a8 GEMM was measured here: the efficiency is fp8's.")
    elif fmt in FP4_BLOCK:
        rate = spec.peak("fp4") if spec is not None else None
        peak = f" ({rate / 1e12:.0f} TFLOP/s dense on {spec.id})" if rate and spec else ""
        scale = "fp8 (e4m3)" if fmt == "nvfp4" else "8-bit power-of-two (e8m0)"
        out.append(
            f"Weights: {fmt}, weights and activations in 4-bit e2m1 blocks of {FP4_BLOCK[fmt]} "
            f"with one {scale} scale each ({8 * WEIGHT_BYTES[fmt]:.2f} bits a weight), on "
            f"Blackwell's fp4 tensor cores at the fp4 dense peak{peak}, each Linear's input "
            "quantized by a kernel of its own (vLLM's ModelOpt/compressed-tensors NVFP4 W4A4 on "
            "CUTLASS; MXFP4 checkpoints such as gpt-oss may run with wider activations there, "
            "which this does not model). The GEMM predictor has no fp4 fit: each fp4 GEMM is "
            "priced as its fp8 GEMM (CUTLASS scaled-mm, the nearest fitted precision) on the "
            "device with the fp4 rate in place of the fp8 one, so its efficiency is fp8's; "
            "nothing fp4 was measured, and the times are less certain than the other "
            "formats'. Embedding, lm_head, norms and MoE router stay in the activations' dtype.")
    elif fmt == "fp8":
        out.append(
            "Weights: fp8 (e4m3) weights and activations on fp8 tensor cores, one scale per "
            "tensor; each Linear's bf16 input cast to fp8 by a kernel of its own, as vLLM's "
            "Fp8LinearMethod does with a static scale (the GEMM predictor's cast term). "
            "Embedding, lm_head, norms and MoE router stay in the activations' dtype.")
    if comm:
        out.append(f"Collectives: {comm}.")
    if experts is not None:
        out.append(expert_parallelism(experts))
    if pp > 1:
        out.append(
            f"Pipeline parallelism {pp}: the decoder layers split {'/'.join(map(str, stages))} "
            "as vLLM's get_pp_indices splits them (evenly, the remainder one a stage from the "
            "second-to-last backwards; vllm/distributed/utils.py), the embedding on the first "
            "stage and the final norm, lm_head and sampler on the last. A step's time on a "
            "stage is the stage's share of the whole step (its layers over the model's), plus "
            "the send of the step's hidden states and residual (2 x tokens x hidden x 2 bytes, "
            "vLLM's IntermediateTensors) to the next stage: each tp rank sends its 1/tp share "
            "and the next stage all-gathers it (send_tensor_dict with all_gather_group). vLLM "
            "V1 keeps pp batches in flight (EngineCore.step_with_batch_queue, batch_queue_size "
            "= pipeline_parallel_size), each of requests not already in flight (a request's "
            "next step waits for its last, vllm/v1/core/sched/scheduler.py): the prefill passes "
            "follow one another through the stages (a pass enters a stage once the stage and "
            "the pass before it there are done), and the decoding batch runs as min(pp, batch) "
            "micro-batches in flight, each of ceil(batch / in flight) sequences, the state a "
            "loaded server's requests reach. A sequence's time per token is a micro-batch's "
            "trip through the stages, or the busiest stage's time for every micro-batch if "
            "longer. NB: a batch that arrives together and is prefilled in one pass would stay "
            "one batch in V1 and decode without overlap; serve-sim runs the scheduler and shows "
            "it. Memory is the most loaded stage's.")
    if tp > 1:
        out.append(
            f"Tensor parallelism {tp}, Megatron's sharding as vLLM does it: column-parallel "
            "q/k/v and gate/up, row-parallel o and down, attention heads split, KV heads split "
            "where tp divides them and replicated (one a GPU) where tp is a multiple of them, "
            "the vocabulary padded to a multiple of 64 and split. Each step runs 2 all-reduces "
            "a layer of tokens x hidden x 2 bytes, one after the embedding, and an all-gather "
            "of the sampled tokens' logits, priced as the Collectives item says. vLLM's custom "
            "all-reduce (small messages over NVLink) is faster than NCCL there and is not "
            "modelled.")
    out.append(
        f"Memory: usable = {utilization:g} x the device's memory in bytes (vLLM's "
        "gpu_memory_utilization, default 0.9, docs.vllm.ai engine arguments). KV cache: 2 x "
        "layers x kv_heads x head_dim x (prompt + gen) x batch x bytes (a sliding-window layer "
        "holds its window; vLLM's 16-token blocks not rounded up). Activations: a forward of "
        "the token budget, as vLLM's profiling run reserves it: what one token keeps live in "
        "the costlier half of a decoder layer (the residual stream and its normed copy, then "
        "QKV and the attention output, or the MLP's gate/up output and its activation, top-k "
        "copies in an MoE), plus the batch's logits in fp32. CUDA-graph pools, NCCL buffers "
        "and the CUDA context are left to the reserve; max_batch is at most the token budget.")
    out.append("Not priced: sampling (one reduction over the logits a step), the host's "
               "scheduler and detokenizer, preemption.")
    return tuple(out)


def expert_parallelism(ep: ExpertParallel) -> str:
    """What expert parallelism assumes, with its sources."""
    dp = (f"{ep.dp} data-parallel attention ranks of {ep.tp} GPU{'s' * (ep.tp > 1)} each "
          "(vLLM's --data-parallel-size), each serving 1/dp of the sequences, all ranks "
          "stepping together with equal shares; " if ep.dp > 1 else
          "no data-parallel ranks (EP = TP), every GPU holding every token; ")
    comm = ("each MoE layer dispatches every token's top-k copies of its hidden state to its "
            "experts' GPUs and combines their outputs back, two all-to-alls of tokens x k / tp "
            "x hidden x 2 bytes a GPU (vLLM's all2all backends, e.g. pplx or DeepEP), priced as "
            "the Collectives item says" if ep.dp > 1 else
            "the experts' partial outputs are summed by the all-reduce tensor parallelism runs "
            "after the MoE anyway, so no all-to-all runs (vLLM uses all2all kernels only with "
            "data parallelism)")
    return (f"Expert parallelism {ep.ep} (vLLM's --enable-expert-parallel: the EP group is the "
            f"TP x DP GPUs): {dp}the {ep.experts} experts whole, {ep.local_experts} a GPU, "
            f"attention and the rest tensor-parallel over {ep.tp}; a GPU's experts compute "
            f"tokens x {ep.top_k} / {ep.tp} rows a step, routed uniformly over its experts (the "
            f"expected number reached, each of ceil(rows / reached) rows: no load imbalance, no "
            f"EPLB); {comm}. NB: the router and the routing ops are priced on the GPU's "
            f"{ep.local_experts} experts, not all {ep.experts} (a small share of a step).")
