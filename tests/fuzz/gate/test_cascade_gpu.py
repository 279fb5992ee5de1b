"""The performance level and the tuner on a GPU: a really slower candidate is rejected at (d) with its
table, the baseline against itself is never called slower than its noise, and a short tune run
completes its trials. Shapes are bench-lite's (1.3M lookups) to keep each test near a minute.
"""

from __future__ import annotations

import pytest

from fuzz.budgets import Budget
from fuzz.gate import CascadeOptions, run_cascade
from fuzz.gate.report import text
from fuzz.status import Status
from fuzz.gate.shapes import PRESETS
from tbe import KernelConfig

pytestmark = pytest.mark.gpu
SHAPES = [PRESETS["bench-lite"][0], PRESETS["bench-lite"][3], PRESETS["bands"][0]]


def perf_only(candidate: KernelConfig, gamma: float = 1.03):
    opts = CascadeOptions(budget=Budget("none", 1, 1, 1, 1), levels="d", gamma=gamma, shapes=SHAPES)
    return run_cascade(KernelConfig(), candidate, opts)


# 16 short runs per program on 4 warps at a 16x grid: 2-3x slower iterations in the H200 sweep
# (benchmarks/results/sweep_h200.jsonl); a gather width no longer is (the bucket tiles set it)
@pytest.mark.parametrize("slower, surely", [(dict(bwd_short_runs_per_program=16, bwd_short_num_warps=4,
                                                  short_grid_multiplier=16), True),
                                            (dict(bwd_short_num_warps=8), False)])
def test_a_slower_candidate_is_rejected_at_d_with_its_table(slower, surely):
    """Sixteen short runs per program is surely slower; eight warps on one short run is expected to be
    (rejected either way unless it is 3% faster)."""
    res = perf_only(KernelConfig(**slower))
    report = text(res)
    print(report)
    perf = res.levels["d"].result
    assert res.verdict == "KEEP" and res.first_failure.key == "d" and perf.status == Status.FAIL, report
    assert "performance per shape:" in report and len(perf.measured) == 2 * len(SHAPES)
    if surely:
        assert perf.slower and "SLOWER" in report, "sixteen short runs a program must be slower than the noise"


def test_the_baseline_against_itself_is_not_slower_than_its_noise():
    res = perf_only(KernelConfig(), gamma=1.0)
    perf = res.levels["d"].result
    print(text(res))
    assert perf.status == Status.PASS and not perf.slower, perf.reasons
    assert 0.97 < perf.geomean() < 1.03  # A/A: no systematic bias between the A and B slots
    assert perf_only(KernelConfig()).verdict == "KEEP"  # and no speedup: gamma 1.03 keeps the baseline


def test_short_tune_run_completes_trials(tmp_path):
    pytest.importorskip("optuna", reason="optuna==5.0.0 not installed on this host")
    from fuzz.tune import search as tune
    from fuzz.tune import report as tune_report

    opts = tune.TuneOptions(shapes=SHAPES[:2], seconds=90.0, search_share=1.0, verify_top=1, out=tmp_path)
    res = tune.run_tune(KernelConfig(), opts)
    print(tune_report.text(res))
    assert res.trials[0].origin == "baseline" and res.trials[0].value is not None
    assert 0.95 < res.aa_value < 1.05
    assert len([t for t in res.trials if t.value is not None]) >= 3
    tune_report.write(res, tmp_path)
    assert (tmp_path / "tune.json").is_file()
