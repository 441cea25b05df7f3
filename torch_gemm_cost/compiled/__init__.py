"""What ``torch.compile`` makes of the records: inductor's fusion of the non-GEMM ops into
kernels (``fusion``) and its rewrite of hand-written attention into SDPA
(``attention_rewrite``)."""
