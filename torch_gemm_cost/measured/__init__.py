"""Measured rows of the data's schemas (DATA.md): one reader per schema, each the only one, and
the one path that prices such rows as they were measured.

``table`` reads a CSV's text; ``gemm``, ``vec``, ``attention`` and ``comm`` turn its rows into
the records the predictors take, deciding as they read what each row's time holds beyond the
kernel (launch overhead by timing, vLLM's fp8 input cast, warm re-runs, Vidur's true bytes).
``torch-gemm-cost predict-csv`` and the library's training and scoring read through here.
Beside them, the logs of measuring tools: ``nccl_tests`` (a collective profile) and
``vllm_bench`` (``vllm bench serve --save-result``: a serving run's load and latencies, which
``serving.host_fit`` makes a host profile of).
"""
