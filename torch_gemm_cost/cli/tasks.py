"""The HF tasks of ``estimate --hf-config``: which model head each builds, and the inputs its
forward takes, made on the meta device from the config alone (nothing is downloaded).

One small builder per task turns the config and the sizes the command line asks for
(``--batch``, ``--seq``, ``--image-size``, ``--audio-s``) into ``(args, kwargs)``:

    causal-lm, seq-cls, masked-lm, token-cls, pretraining   input_ids (batch, seq)
    seq2seq          input_ids and decoder_input_ids (batch, seq)
    image-cls        pixel_values (batch, num_channels, size, size)
    speech-seq2seq   log-mel input_features for --audio-s seconds, decoder_input_ids (batch, seq)
    image-text       CLIP-style, both towers: input_ids (batch, seq) and pixel_values
    vision2seq       pixel_values and decoder_input_ids (vision-encoder-decoder), or one
                     sequence of image tokens then --seq text tokens (LLaVA)

``auto`` picks the task whose model class the config's ``architectures`` names, else the
first task that builds the config's model type.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..suggest import unknown
from . import UsageError

__all__ = ["ATTENTIONS", "AUTO", "DEFAULT_SEQ", "SDPA", "TASKS", "Sizes", "Task", "build",
           "check_task", "fitting", "pick"]

AUTO = "auto"
# the attention implementations ``build`` takes (None: transformers' own choice, SDPA where the
# model has it, as for a model built by hand and given to ``estimate()``)
SDPA = "sdpa"
ATTENTIONS = (SDPA, "eager")
DEFAULT_SEQ = 1024
DEFAULT_IMAGE_SIZE = 224  # ImageNet's, for configs that name no image size (ResNet, ConvNeXt)
# log-mel frames per second of audio: Whisper's and Speech2Text's feature extractors take a
# 25 ms window every 10 ms (160 samples at 16 kHz)
MEL_FRAMES_PER_S = 100

Inputs = tuple[tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class Sizes:
    """The input sizes asked for; None: the config's own, or the default."""

    batch: int
    seq: int | None = None
    image_size: int | None = None
    audio_s: float | None = None


@dataclass(frozen=True)
class Task:
    """One model head: the transformers Auto class that builds it (the first one this
    transformers has), the mapping of model types it builds, the sizes it reads besides
    ``batch``, and its inputs."""

    name: str
    auto_classes: tuple[str, ...]
    mappings: tuple[str, ...]  # names in transformers.models.auto.modeling_auto
    sizes: tuple[str, ...]  # "seq", "image_size", "audio_s"
    inputs: Callable[[Any, Any, Sizes], Inputs]  # (model, config, sizes)
    encoder_decoder: bool = False


def _meta_ids(batch: int, seq: int) -> Any:
    import torch

    return torch.ones(batch, seq, dtype=torch.long, device="meta")


def _meta_floats(*shape: int) -> Any:
    import torch

    return torch.ones(*shape, device="meta")


def _max_positions(config: Any) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "n_ctx"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _seq(sizes: Sizes, limit: int | None, default: int = DEFAULT_SEQ) -> int:
    """--seq, or the default capped at the model's positions; more than it has is an error."""
    if sizes.seq is None:
        return min(default, limit or default)
    if limit is not None and sizes.seq > limit:
        raise UsageError(f"--seq {sizes.seq} exceeds the model's {limit} positions; "
                         f"use --seq {limit}")
    return sizes.seq


def _square(value: Any, what: str) -> int:
    """One side of a square image from a config's image_size (an int or an (h, w) pair)."""
    if isinstance(value, (list, tuple)):
        if len(set(value)) != 1:
            raise UsageError(f"{what} {list(value)} is not square; give --image-size")
        value = value[0]
    return int(value)


def _image(config: Any, sizes: Sizes) -> tuple[int, int]:
    """(channels, side) of the images a vision config takes, --image-size overriding the side."""
    side = sizes.image_size
    if side is None:
        own = getattr(config, "image_size", None)
        side = DEFAULT_IMAGE_SIZE if own is None else _square(own, "the config's image_size")
    return int(getattr(config, "num_channels", 3)), side


def _pixels(model: Any, config: Any, sizes: Sizes) -> tuple[Any, dict[str, Any]]:
    """pixel_values, and interpolate_pos_encoding where the size differs from the config's
    and the model can interpolate its position embeddings (ViT, CLIP, DeiT)."""
    channels, side = _image(config, sizes)
    extra: dict[str, Any] = {}
    own = getattr(config, "image_size", None)
    if (sizes.image_size is not None and own is not None and side != _square(own, "image_size")
            and "interpolate_pos_encoding" in inspect.signature(model.forward).parameters):
        extra["interpolate_pos_encoding"] = True
    return _meta_floats(sizes.batch, channels, side, side), extra


def _no_cache(config: Any) -> dict[str, Any]:
    """use_cache=False where the config (or its language model's) caches: the capture wants
    the logits, not a cache."""
    caches = getattr(config, "use_cache", None)
    if caches is None:
        caches = getattr(getattr(config, "text_config", None), "use_cache", False)
    return {"use_cache": False} if caches else {}


def _text(model: Any, config: Any, sizes: Sizes) -> Inputs:
    return (_meta_ids(sizes.batch, _seq(sizes, _max_positions(config))),), {}


def _causal(model: Any, config: Any, sizes: Sizes) -> Inputs:
    args, _ = _text(model, config, sizes)
    return args, _no_cache(config)


def _seq2seq(model: Any, config: Any, sizes: Sizes) -> Inputs:
    ids = _meta_ids(sizes.batch, _seq(sizes, _max_positions(config)))
    return (ids,), {"decoder_input_ids": ids, **_no_cache(config)}


def _image_cls(model: Any, config: Any, sizes: Sizes) -> Inputs:
    vision = getattr(config, "vision_config", None) or config  # CLIP's vision tower, say
    pixels, extra = _pixels(model, vision, sizes)
    return (pixels,), extra


def _speech_seq2seq(model: Any, config: Any, sizes: Sizes) -> Inputs:
    """Whisper: (batch, num_mel_bins, frames), and its encoder takes exactly its 30 s window;
    Speech2Text: (batch, frames, mel bins × channels), up to its positions after two stride-2
    convolutions."""
    mel = getattr(config, "num_mel_bins", None)
    per_channel = getattr(config, "input_feat_per_channel", None)
    if mel is not None:
        frames = 2 * config.max_source_positions  # conv2 halves the frames into positions
        window_s = frames / MEL_FRAMES_PER_S
        if sizes.audio_s is not None and sizes.audio_s != window_s:
            raise UsageError(f"--audio-s {sizes.audio_s:g}: {type(config).__name__}'s encoder "
                             f"takes exactly {window_s:g} s ({frames} log-mel frames; shorter "
                             f"audio is padded to it); use --audio-s {window_s:g}")
        features = _meta_floats(sizes.batch, mel, frames)
    elif per_channel is not None:
        audio_s = 30.0 if sizes.audio_s is None else sizes.audio_s
        frames = round(audio_s * MEL_FRAMES_PER_S)
        limit_s = 4 * config.max_source_positions / MEL_FRAMES_PER_S
        if not 4 <= frames <= 4 * config.max_source_positions:
            raise UsageError(f"--audio-s {audio_s:g}: {type(config).__name__} takes 0.04 to "
                             f"{limit_s:g} s of audio; use --audio-s 30")
        features = _meta_floats(sizes.batch, frames, per_channel * config.input_channels)
    else:
        raise UsageError(f"--task speech-seq2seq builds log-mel inputs for Whisper and "
                         f"Speech2Text configs (num_mel_bins or input_feat_per_channel); "
                         f"{type(config).__name__} has neither: write a pkg.module:function")
    limit = getattr(config, "max_target_positions", None) or _max_positions(config)
    ids = _meta_ids(sizes.batch, _seq(sizes, limit))
    return (), {"input_features": features, "decoder_input_ids": ids, **_no_cache(config)}


def _image_text(model: Any, config: Any, sizes: Sizes) -> Inputs:
    """Both towers of a CLIP-style model: batch texts of --seq tokens and batch images."""
    text, vision = config.text_config, config.vision_config
    ids = _meta_ids(sizes.batch, _seq(sizes, _max_positions(text)))
    pixels, extra = _pixels(model, vision, sizes)
    return (), {"input_ids": ids, "pixel_values": pixels, **extra}


def _vision2seq(model: Any, config: Any, sizes: Sizes) -> Inputs:
    """A vision encoder-decoder (TrOCR, Donut): images in, --seq decoder tokens. A LLaVA-style
    model: its image tokens (one per patch, the CLS token too where the config keeps it) then
    --seq text tokens, one sequence per image."""
    if getattr(config, "encoder", None) is not None and getattr(config, "decoder", None):
        pixels, _ = _pixels(model, config.encoder, sizes)
        ids = _meta_ids(sizes.batch, _seq(sizes, _max_positions(config.decoder)))
        return (), {"pixel_values": pixels, "decoder_input_ids": ids, **_no_cache(config)}
    vision = getattr(config, "vision_config", None)
    token = getattr(config, "image_token_id", getattr(config, "image_token_index", None))
    strategy = getattr(config, "vision_feature_select_strategy", None)
    if vision is None or token is None or strategy not in ("default", "full"):
        raise UsageError(f"--task vision2seq builds vision-encoder-decoder and LLaVA-style "
                         f"configs (an image_token_id and a vision tower); "
                         f"{type(config).__name__} needs inputs of its own: write a "
                         f"pkg.module:function")
    import torch

    pixels, _ = _pixels(model, vision, sizes)
    side = pixels.shape[-1]
    image_tokens = (side // vision.patch_size) ** 2 + (strategy == "full")
    text = _seq(sizes, _max_positions(config.text_config), default=DEFAULT_SEQ - image_tokens)
    ids = torch.cat([torch.full((sizes.batch, image_tokens), token, device="meta"),
                     _meta_ids(sizes.batch, text)], dim=1)
    return (), {"input_ids": ids, "pixel_values": pixels, **_no_cache(config)}


_SEQ, _IMAGE = ("seq",), ("image_size",)
# in the order --task auto tries them when the config names no architecture it builds
TASKS: dict[str, Task] = {t.name: t for t in (
    Task("causal-lm", ("AutoModelForCausalLM",), ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",), _SEQ,
         _causal),
    Task("seq2seq", ("AutoModelForSeq2SeqLM",), ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",),
         _SEQ, _seq2seq, encoder_decoder=True),
    Task("speech-seq2seq", ("AutoModelForSpeechSeq2Seq",),
         ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",), ("seq", "audio_s"), _speech_seq2seq,
         encoder_decoder=True),
    Task("image-text", ("AutoModelForZeroShotImageClassification",),
         ("MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",), ("seq", "image_size"),
         _image_text),
    Task("image-cls", ("AutoModelForImageClassification",),
         ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",), _IMAGE, _image_cls),
    Task("vision2seq", ("AutoModelForImageTextToText", "AutoModelForVision2Seq"),
         ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES"),
         ("seq", "image_size"), _vision2seq),
    Task("masked-lm", ("AutoModelForMaskedLM",), ("MODEL_FOR_MASKED_LM_MAPPING_NAMES",), _SEQ,
         _text),
    Task("seq-cls", ("AutoModelForSequenceClassification",),
         ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",), _SEQ, _text),
    Task("token-cls", ("AutoModelForTokenClassification",),
         ("MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",), _SEQ, _text),
    Task("pretraining", ("AutoModelForPreTraining",), ("MODEL_FOR_PRETRAINING_MAPPING_NAMES",),
         _SEQ, _text),
)}
_FLAGS = {"seq": "--seq", "image_size": "--image-size", "audio_s": "--audio-s"}


def check_task(name: str) -> str:
    """``name`` if it is a task (or ``auto``), else an error naming the nearest ones."""
    names = [AUTO, *TASKS]
    if name in names:
        return name
    raise UsageError(unknown("task", name, names))


def _classes(task: Task, model_type: str) -> tuple[str, ...]:
    """The model classes ``task`` builds for ``model_type`` (none where it builds none)."""
    from transformers.models.auto import modeling_auto

    for mapping in task.mappings:
        names: Mapping[str, Any] | None = getattr(modeling_auto, mapping, None)
        if names is not None:
            found = names.get(model_type, ())
            return (found,) if isinstance(found, str) else tuple(found)
    return ()


def fitting(config: Any) -> list[str]:
    """The tasks that build a model of ``config``'s type."""
    return [name for name, task in TASKS.items() if _classes(task, config.model_type)]


def pick(config: Any) -> tuple[str, str]:
    """The task ``--task auto`` builds for ``config``, and why: the task whose class the config's
    ``architectures`` names, else the first that builds its model type (encoder-decoder tasks
    first for an encoder-decoder config)."""
    architectures = list(getattr(config, "architectures", None) or [])
    for name, task in TASKS.items():
        hit = next((a for a in architectures if a in _classes(task, config.model_type)), None)
        if hit is not None:
            return name, f"the config's architectures name {hit}"
    fits = fitting(config)
    if getattr(config, "is_encoder_decoder", False):
        fits.sort(key=lambda name: not TASKS[name].encoder_decoder)
    if not fits:
        raise UsageError(f"no task builds {type(config).__name__} (model_type "
                         f"{config.model_type!r}): write a pkg.module:function")
    named = f"names {', '.join(architectures)}" if architectures else "names no architectures"
    return fits[0], f"the first task that builds {config.model_type!r}; the config {named}"


def _check_sizes(task: Task, sizes: Sizes) -> None:
    for size, flag in _FLAGS.items():
        if getattr(sizes, size) is not None and size not in task.sizes:
            takes = " and ".join(_FLAGS[s] for s in task.sizes)
            raise UsageError(f"{flag} does not apply to --task {task.name}; it takes {takes}")


def build(config: Any, task_name: str, sizes: Sizes, attention: str | None = None
          ) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """The ``task_name`` model of ``config`` on the meta device, and its inputs. ``attention``
    is its ``attn_implementation`` (``ATTENTIONS``); None builds what transformers builds,
    SDPA where the model has it, else eager."""
    import torch
    import transformers

    task = TASKS[task_name]
    _check_sizes(task, sizes)
    if not _classes(task, config.model_type):
        fits = fitting(config)
        raise UsageError(f"--task {task.name} does not fit {type(config).__name__}; tasks that "
                         f"fit: {', '.join(fits) or 'none (write a pkg.module:function)'}")
    auto = next(getattr(transformers, a) for a in task.auto_classes if hasattr(transformers, a))
    with torch.device("meta"):
        try:
            model = auto.from_config(config, attn_implementation=attention)
        except ValueError as e:
            first = str(e).splitlines()[0]
            if "scaled_dot_product_attention" in first:
                raise UsageError(f"--attention {attention}: {type(config).__name__}'s model has "
                                 f"no SDPA attention in this transformers; use --attention "
                                 f"eager") from e
            raise UsageError(f"--task {task.name} does not fit {type(config).__name__}: "
                             f"{first}") from e
    args, kwargs = task.inputs(model, config, sizes)
    return model, args, kwargs
