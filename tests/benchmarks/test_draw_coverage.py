"""benchmarks.draw_coverage: the cells a campaign's draws reach, without running kernels."""

from __future__ import annotations

from benchmarks.draw_coverage import draw_coverage, main
from tbe import KernelConfig


def test_draw_coverage_counts_every_draw_and_splits_reachable_cells(tmp_path, capsys):
    cov = draw_coverage(KernelConfig(), 25, 2000, 4, seed_value=1)
    assert cov["examples"] == 25
    assert cov["covered"] + len(cov["zero"]) == cov["reachable"] and cov["covered"] > 20
    assert not cov["unexpected"], cov["unexpected"]  # a draw's cells lie in the campaign's reachable set
    out = tmp_path / "c.json"
    assert main(["--examples", "5", "--max-lookups", "500", "--seed", "2", "--out", str(out)]) == 0
    assert "seed 2:" in capsys.readouterr().out and out.is_file()
