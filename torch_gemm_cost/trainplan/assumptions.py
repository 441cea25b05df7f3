"""What a training plan assumes, with its sources, in the order the plan lists them."""

from __future__ import annotations

from .layout import Layout
from .memory import MEMORY_UTILIZATION

__all__ = ["assumptions"]


def assumptions(layout: Layout, optimizer: str | None, attention: str, compiled: bool,
                comm_source: str) -> tuple[str, ...]:
    """What a plan of ``layout`` assumes, with its sources."""
    out = [
        ("Compute: one micro-batch's training step captured once at full width, as "
         "estimate(mode='train') captures it (the loss of model(ids, labels=ids) and its "
         f"backward pass, attention as transformers' '{attention}'), priced by the GEMM "
         "predictor and the op cost model; each GPU prices its own share. "
         + ("Its other ops run as torch.compile (inductor) fuses them, forward and backward "
            "(estimate(compiled=True))." if compiled else "Its other ops run eagerly, one "
            "kernel each.")),
        ("Tensor parallelism as Megatron-LM splits a transformer (Shoeybi et al. 2019, §3), "
         "read off the captured graph: column-parallel GEMMs where the input is replicated, "
         "row-parallel where it is split, attention heads split, the vocabulary split in the "
         "embedding and the LM head (vocab-parallel cross-entropy). The tensor-parallel "
         "collectives run between kernels and are waited for; a tensor-parallel group sits "
         "in one node (Megatron's rank order tp-cp-ep-dp-pp)."),
        ("Pipeline: Megatron's 1F1B schedule (PipeDream-Flush; interleaved with v chunks a "
         "GPU when interleave > 1), Narayanan et al. 2021 §2.2, simulated op by op with each "
         "stage's own times, so the bubble is (pp - 1)/m of the ideal for equal stages and "
         "(pp - 1)/(m·v) interleaved. Layers split evenly; the first stage also runs the "
         "embeddings, the last the final norm, LM head and loss. Sends between nodes with "
         "tp > 1 use the scatter/gather of §4.1."),
        ("Data parallelism overlapped as PyTorch DDP, FSDP and Megatron-Core "
         "(--overlap-grad-reduce, --overlap-param-gather) run it: gradients reduced in "
         "per-layer buckets once each layer's backward (of the last micro-batch) is done, "
         "updated weights gathered under the next forward; the step waits for the last "
         "bucket and for whatever outlasts the compute. Gradients are reduced in the model's "
         "dtype. A tied embedding's gradient is all-reduced between the first and last "
         "stage after the backward (not overlapped)."),
        (f"Collectives: {comm_source}. step_interval_ms repeats the step with every "
         "collective the profile does not cover at both host classes, the fitted constants "
         "and NCCL's own (its tuning model's latencies and 0.8 of each link's datasheet "
         "bandwidth), within a node widened to how far the measured hosts spread around a "
         "prior that never saw them (collective_interval_ms): the low and the high end, "
         "whichever class is stated."),
        ("Memory per GPU: 16-bit weights and gradients with fp32 master weights and Adam "
         "moments under mixed precision (2 + 2 + 12 bytes a parameter, ZeRO §3), 4 + 4 + 8 in "
         "fp32; ZeRO 1/2/3 shard states, gradients, weights over the dp·cp ranks. "
         "Activations per layer by Korthikanti et al. 2022 eq. 1-2 written per tensor "
         "(FlashAttention keeps no scores; selective recomputation drops attention's core, "
         "full keeps each layer's input); a stage holds its in-flight micro-batches "
         "(1F1B: pp - stage). "
         f"fits: the fullest GPU within {MEMORY_UTILIZATION:g} of its memory (the rest for "
         "the CUDA context, NCCL buffers and the allocator's fragmentation)."),
    ]
    if optimizer is None:
        out.append("No optimizer step: forward and backward alone, no optimizer states.")
    elif optimizer == "fused_adam":
        out.append("Optimizer: one fused Adam kernel a step (apex FusedAdam as Megatron-LM "
                   "runs it), over each GPU's shard of the fp32 master weights.")
    else:
        out.append(f"Optimizer: torch.optim.{'AdamW' if optimizer == 'adamw' else 'Adam'}'s "
                   "foreach path (8 kernels), over each GPU's shard of the fp32 master "
                   "weights.")
    if layout.cp > 1:
        out.append("Context parallelism: load-balanced ring attention (Megatron-Core): each "
                   "GPU runs seq / cp tokens, its attention core cp times the captured chunk's, "
                   "K and V passed around the ring under attention's compute.")
    if layout.ep > 1:
        out.append(f"Expert parallelism (Megatron-Core's MoE layer, all-to-all dispatcher): "
                   f"each GPU holds 1/{layout.ep} of every MoE layer's experts, the ep ranks "
                   "drawn from the data- and context-parallel ones (tp apart); each layer's "
                   "tokens are dispatched to their experts and combined back by two "
                   "all-to-alls forward "
                   "and two backward, waited for. The router's load is balanced (a meta-device "
                   "capture routes every expert the same tokens), so each expert GEMM runs "
                   f"{layout.ep}x the tokens of 1/{layout.ep} of the experts. The experts' "
                   "gradients are reduced, and ZeRO shards their states, over the dp·cp / ep "
                   "ranks holding the same experts. Not priced: the router's load imbalance "
                   "and its capacity factor, token dropping.")
    out.append("Not priced: data loading, the gradient-norm clip, the learning-rate schedule, "
               "the host's launch overhead between steps, compute slowed by collectives "
               "running beside it.")
    return tuple(out)
