"""``estimate --diffusers-config``: one denoising step of a diffusers model, built on the meta
device from its config JSON (nothing is downloaded).

A ``UNet2DConditionModel`` (Stable Diffusion 1.x/2.x, SDXL) denoises latents of
``--image-size`` / ``--vae-factor`` pixels a side, conditioned on ``--seq`` text embeddings of
the config's cross-attention width (SDXL adds its pooled text embedding and six size ids). A
``DiTTransformer2DModel`` takes latents and a class label. ``--batch`` counts latents: a step
with classifier-free guidance runs the conditional and the unconditional batch, so use twice
the number of images.

Needs diffusers: ``pip install diffusers``; from a checkout, ``pip install -e '.[diffusion]'``
(imported only here).
"""

from __future__ import annotations

from typing import Any

from ..suggest import unknown
from . import UsageError, read_config
from .tasks import Sizes

__all__ = ["CLASSES", "DEFAULT_TEXT_TOKENS", "VAE_FACTOR", "build"]

CLASSES: tuple[str, ...] = ("UNet2DConditionModel", "DiTTransformer2DModel")
VAE_FACTOR = 8  # the Stable Diffusion and DiT autoencoders downsample 3 times: 2**3
DEFAULT_TEXT_TOKENS = 77  # the CLIP text encoder's context
# SDXL's time ids: original height and width, crop top and left, target height and width
SDXL_TIME_IDS = 6


def _diffusers() -> Any:
    try:
        import diffusers
    except ImportError as e:
        raise UsageError("--diffusers-config needs diffusers: pip install diffusers (from a "
                         "checkout of torch_gemm_cost: pip install -e '.[diffusion]')") from e
    return diffusers


def load_config(path: str) -> dict[str, Any]:
    """The config JSON that --diffusers-config names (a file, or a directory holding
    config.json)."""
    return read_config("--diffusers-config", path)


def _latent_side(config: Any, sizes: Sizes, vae_factor: int) -> int:
    """Latent pixels a side: --image-size over the VAE factor, else the config's sample_size."""
    if sizes.image_size is None:
        side = config.get("sample_size")
        if isinstance(side, (list, tuple)):
            side = side[0]
        if not isinstance(side, int):
            raise UsageError("the config has no sample_size: give --image-size")
        return side
    if sizes.image_size % vae_factor:
        lo = sizes.image_size // vae_factor * vae_factor
        near = f"{lo} or {lo + vae_factor}" if lo else f"{vae_factor}"
        raise UsageError(f"--image-size {sizes.image_size} is not a multiple of the VAE factor "
                         f"{vae_factor}; use {near}")
    return sizes.image_size // vae_factor


def _unet_inputs(config: Any, sizes: Sizes, side: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    import torch

    def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.ones(*shape, dtype=dtype, device="meta")

    width = config["encoder_hid_dim"] or config["cross_attention_dim"]
    if isinstance(width, (list, tuple)):
        if len(set(width)) != 1:
            raise UsageError(f"cross_attention_dim {list(width)} differs between blocks: "
                             f"write a pkg.module:function with the text embeddings it takes")
        width = width[0]
    seq = DEFAULT_TEXT_TOKENS if sizes.seq is None else sizes.seq
    b = sizes.batch
    kwargs: dict[str, Any] = {"encoder_hidden_states": meta(b, seq, width), "return_dict": False}
    addition = config["addition_embed_type"]
    if addition == "text_time":  # SDXL
        pooled = (config["projection_class_embeddings_input_dim"]
                  - SDXL_TIME_IDS * config["addition_time_embed_dim"])
        kwargs["added_cond_kwargs"] = {"text_embeds": meta(b, pooled),
                                       "time_ids": meta(b, SDXL_TIME_IDS)}
    elif addition is not None:
        raise UsageError(f"addition_embed_type {addition!r}: --diffusers-config builds the "
                         f"inputs of 'text_time' (SDXL) or none; write a pkg.module:function")
    if config["class_embed_type"] is not None:
        raise UsageError(f"class_embed_type {config['class_embed_type']!r}: --diffusers-config "
                         f"builds class labels only from num_class_embeds; write a "
                         f"pkg.module:function")
    if config["num_class_embeds"] is not None:
        kwargs["class_labels"] = meta(b, dtype=torch.long)
    sample = meta(b, config["in_channels"], side, side)
    return (sample, meta(b)), kwargs


def _dit_inputs(config: Any, sizes: Sizes, side: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    import torch

    if sizes.seq is not None:
        raise UsageError("--seq does not apply to a DiT: it is conditioned on a class label")
    if side % config["patch_size"]:
        raise UsageError(f"a latent of {side} pixels a side does not split into patches of "
                         f"{config['patch_size']}; change --image-size")
    b = sizes.batch
    sample = torch.ones(b, config["in_channels"], side, side, device="meta")
    labels = torch.ones(b, dtype=torch.long, device="meta")
    return (sample,), {"timestep": labels, "class_labels": labels, "return_dict": False}


def build(path: str, sizes: Sizes, vae_factor: int = VAE_FACTOR
          ) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """The model of a diffusers config JSON on the meta device, and one denoising step's
    inputs: (model, args, kwargs)."""
    import torch

    raw = load_config(path)
    name = raw.get("_class_name", CLASSES[0])
    if name not in CLASSES:
        raise UsageError(f"--diffusers-config {path}: "
                         f"{unknown('_class_name', name, CLASSES, n=1)} This builds "
                         f"{', '.join(CLASSES)}.")
    if sizes.audio_s is not None:
        raise UsageError("--audio-s does not apply to --diffusers-config")
    cls = getattr(_diffusers(), name)
    with torch.device("meta"):
        model = cls.from_config(raw)
    config = model.config  # the defaults filled in
    side = _latent_side(config, sizes, vae_factor)
    inputs = _unet_inputs if name == "UNet2DConditionModel" else _dit_inputs
    args, kwargs = inputs(config, sizes, side)
    return model, args, kwargs
