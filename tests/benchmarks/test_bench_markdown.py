"""The benchmark tables (benchmarks.bench_markdown): which time is bold, the standing, the count of shapes
where ours leads, and the CLI's refusals."""

from __future__ import annotations

import json

import pytest

from benchmarks.bench_markdown import main, standing, table
from benchmarks.pictures import bench_rows


def record(shape, ours, torchrec, fbgemm, suffix="_device_ms"):
    r = {"shape": shape, "floor_forward_ms": 0.2, "floor_iteration_ms": 1.0}
    for impl, (fwd, it) in (("triton", ours), ("torchrec", torchrec), ("fbgemm", fbgemm)):
        if fwd is not None:
            r[f"{impl}_forward{suffix}"], r[f"{impl}_iteration{suffix}"] = fwd, it
    return r


def test_the_fastest_tbe_is_bold_and_the_standing_is_the_best_other_over_ours():
    rows = bench_rows([record("L200", (1.10, 3.90), (1.17, 3.80), (1.12, 4.40))], "device")
    text = table(rows)
    line = next(t for t in text.splitlines() if t.startswith("| L200"))
    assert "**1.10** / 1.17 / 1.12" in line and "3.90 / **3.80** / 4.40" in line
    assert "| 1.018 | 0.974 |" in line  # 1.12 / 1.10 ahead; 3.80 / 3.90 behind
    assert "on 0 of 1 shapes" in text


def test_small_times_keep_three_decimals_and_a_tie_counts_as_at_or_ahead():
    rows = bench_rows([record("small", (0.025, 0.073), (0.15, 0.21), (0.025, 0.16))], "device")
    text = table(rows)
    assert "**0.025** / 0.15 / **0.025**" in text and "on 1 of 1 shapes" in text


def test_a_missing_implementation_is_a_dash_and_leaves_the_shape_uncounted():
    rows = bench_rows([record("A", (1.0, 2.0), (None, None), (None, None)), record("B", (1.0, 2.0), (1.5, 2.5),
                                                                                    (None, None))], "device")
    assert standing(rows[0].ms["forward"]) is None and standing(rows[1].ms["forward"]) == pytest.approx(1.5)
    text = table(rows)
    assert "| A | **1.00** / - / - / - / 0.20" in text
    assert "on 1 of 1 shapes compared (1 without both standings)" in text


def test_cli_reads_files_in_order_and_refuses_missing_or_empty_ones(tmp_path, capsys):
    f = tmp_path / "b.jsonl"
    f.write_text(json.dumps(record("A", (1.0, 2.0), (1.5, 2.5), (1.2, 2.2), "_ms")) + "\n")
    assert main([str(f), "--time", "events"]) == 0
    assert "| A | **1.00**" in capsys.readouterr().out
    for bad in (tmp_path / "none.jsonl", tmp_path / "empty.jsonl"):
        if bad.name == "empty.jsonl":
            bad.write_text("\n")
        with pytest.raises(SystemExit) as exc:
            main([str(bad)])
        assert exc.value.code == 2 and bad.name.split(".")[0] in capsys.readouterr().err
