"""Capture: a model and example inputs in, an FX graph with shapes out, on meta or fake tensors
(``core``: the recorder, ``torch.export`` and the fallbacks), and the one reader of an HF
config's sizes (``hf_config``)."""
