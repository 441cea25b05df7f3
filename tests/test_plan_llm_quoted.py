"""A serving plan says what serving benchmarks quote: the mean TTFT beside the last request's,
batches above vLLM's ``max_num_seqs`` flagged, and, on a terminal, which stage it is in."""

from __future__ import annotations

import json

import pytest

import torch_gemm_cost as tgc
from torch_gemm_cost.cli import build_parser, main
from torch_gemm_cost.cli import llm as llm_cli
from torch_gemm_cost.llm.schedule import prefill_order, prefill_steps

pytest.importorskip("transformers")

TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "vocab_size": 1024, "max_position_embeddings": 4096, "tie_word_embeddings": False}


def tiny_plan(**kw):
    args = {"device": "h100_sxm5_80gb", "dtype": "bf16", "prompt": 512, "gen": 64,
            "batches": [1, 64]}
    return tgc.plan_llm(TINY, **{**args, **kw})


def test_prefill_passes_run_in_order_and_say_who_finishes():
    # 3 prompts of 3000 under 8192: the first pass holds two whole prompts and 2192 tokens of
    # the third, which the second pass (808 tokens) finishes
    assert prefill_order(3, 3000, 8192) == [
        (8192, 2, ((3000, 3000), (3000, 3000), (2192, 2192))), (808, 1, ((808, 3000),))]
    # passes alike but apart keep their places: prompts of 3 under a budget of 2 run passes
    # of (2), (1 + 1) and (2) tokens, finishing 0, 1 and 1 prompts, then the same again
    order = prefill_order(4, 3, 2)
    assert [(t, k) for t, k, _ in order] == [(2, 0), (2, 1), (2, 1), (2, 0), (2, 1), (2, 1)]
    assert order[0] == order[3] and order[1] == order[4]
    assert prefill_steps(4, 3, 2) == {order[0]: 2, order[1]: 2, order[2]: 2}


def test_ttft_mean_is_over_the_requests_and_max_is_the_last():
    plan = tiny_plan()
    one, many = plan.rows
    # one request: its first token is the batch's last
    assert one.ttft_mean_ms == one.ttft_max_ms
    # 64 prompts of 512 under 8192: 4 alike passes of T ms, each finishing 16 prompts. The
    # requests' first tokens come at T, 2T, 3T, 4T, 16 each: mean 16·(1+2+3+4)·T / 64 = 2.5 T,
    # max 4 T
    assert many.prefill_steps == 4
    assert many.ttft_mean_ms == pytest.approx(2.5 / 4 * many.ttft_max_ms, rel=1e-12)
    # the batch's latency runs to the last request's first token and the decode after it
    assert many.request_ms == pytest.approx(many.ttft_max_ms + 63 * many.tpot_ms)
    row = plan.to_dict()["rows"][1]
    assert (row["ttft_mean_ms"], row["ttft_max_ms"]) == (many.ttft_mean_ms, many.ttft_max_ms)
    header = plan.table().splitlines()[0]
    assert "TTFT mean" in header and "TTFT max" in header
    assert any("TTFT mean averages that over the batch's requests" in a
               for a in plan.assumptions)


def test_batches_above_max_num_seqs_are_flagged_in_the_record_and_the_text():
    plan = tiny_plan(batches=[1, 8], max_num_seqs=4)
    assert plan.max_num_seqs == 4
    assert [r.above_max_num_seqs for r in plan.rows] == [False, True]
    data = plan.to_dict()
    assert data["max_num_seqs"] == 4
    assert [r["above_max_num_seqs"] for r in data["rows"]] == [False, True]
    lines = str(plan).splitlines()
    assert lines[2].split()[0] == "1" and lines[3].split()[0] == "8*"
    assert lines[-1].startswith("* batch 8: above max_num_seqs 4")
    # the largest batch that fits in memory is far above 4: the footer says so
    assert plan.max_batch > 4 and f"max batch {plan.max_batch} by memory, above max_num_seqs 4" \
        in plan.footer()
    # vLLM's default, 256: none of these is flagged and no footnote is printed
    default = tiny_plan(batches=[1, 8])
    assert default.max_num_seqs == 256 and not any(r.above_max_num_seqs for r in default.rows)
    assert not str(default).splitlines()[-1].startswith("*")
    with pytest.raises(ValueError, match="max_num_seqs must be an integer of at least 1, got 0"):
        tiny_plan(max_num_seqs=0)


def _config(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def test_cli_takes_max_num_seqs_and_flags_the_rows(tmp_path, capsys):
    rc = main(["llm", "--hf-config", _config(tmp_path), "--prompt", "256", "--gen", "16",
               "--batch", "2,8", "--max-num-seqs", "4", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["max_num_seqs"] == 4
    assert [r["above_max_num_seqs"] for r in data["rows"]] == [False, True]


def test_progress_shows_each_stage_on_a_terminal_only(tmp_path, capsys, monkeypatch):
    from collections import OrderedDict

    from torch_gemm_cost.llm import pricer as plan_module

    # a step priced by an earlier plan of this process is not captured again: start afresh
    monkeypatch.setattr(plan_module, "_PRICED", OrderedDict())
    argv = ["llm", "--hf-config", _config(tmp_path), "--prompt", "256", "--gen", "16",
            "--batch", "2,8"]
    assert llm_cli.run(build_parser().parse_args(argv), stderr_tty=True) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert "TTFT mean" in out
    # each line: seconds since the start, then the stage
    assert all(line.startswith("[") and " s] " in line for line in lines), err
    stages = [line.split(" s] ", 1)[1] for line in lines]
    assert stages[0] == "check: the device, the config and the sizes"
    assert "build: the llama model on the meta device" in stages
    assert "price: batch 2 (1 of 2), prefill" in stages
    assert "price: batch 8 (2 of 2), decode" in stages
    assert "capture: a forward pass of 512 tokens, sampling 2" in stages
    # --quiet on a terminal, and a stderr that is no terminal (a pipe, a file), show nothing
    assert llm_cli.run(build_parser().parse_args([*argv, "--quiet"]), stderr_tty=True) == 0
    assert capsys.readouterr().err == ""
    assert main(argv) == 0  # capsys's stderr is no terminal
    assert capsys.readouterr().err == ""
