"""The GEMM models: the hybrid predictor (``hybrid``) and its stages (``tiles``, ``cache``,
``intensity``, ``power``, ``features``, ``mlp``), the pure roofline (``roofline``) and a
calibrated device's own fit (``calibrated``)."""
