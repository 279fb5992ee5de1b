"""The gate cascade's logic without kernels: verdicts and exit codes, the performance judgement,
interleaved timing, shapes and their batches, resource limits, edge reseeding, CLI input errors."""

from __future__ import annotations

import json
import math
import statistics

import pytest
import torch

from fuzz.budgets import Budget
from fuzz.gate.cascade import CascadeOptions, CascadeResult, Level
from fuzz.status import Decision, Status
from fuzz.cli import main
from strategies.edges import edge_cases, reseed
from fuzz.gate.perf import PerfResult, judge, run_perf
from fuzz.gate.timing import NOISE_FLOOR, Entry, interleaved
from fuzz.gate.shapes import PRESETS, PerfShape, load_shapes, make_ids, make_workload, segment_lengths
from fuzz.gate.static import LIMITS, over_limits
from tbe import KernelConfig

TINY = Budget("tiny", seconds=1.0, shrink_seconds=1.0, max_examples=1, max_lookups=300)


def cascade(statuses: str, require_perf: bool = False) -> CascadeResult:
    """A result whose levels a..d have the given statuses: p(ass), f(ail), n(ot run)."""
    names = {"p": Status.PASS, "f": Status.FAIL, "n": Status.NOT_RUN}
    levels = {k: Level(k, names[s], [] if s == "p" else [f"why {k}"]) for k, s in zip("abcd", statuses)}
    opts = CascadeOptions(budget=TINY, require_perf=require_perf)
    return CascadeResult(KernelConfig(), KernelConfig(), KernelConfig().to_dict(), opts, levels)


@pytest.mark.parametrize("statuses, require_perf, verdict, code, first", [
    ("pppn", False, Decision.UNVERIFIED, 0, None),   # no GPU: correctness verified, performance not
    ("pppn", True, Decision.UNVERIFIED, 1, None),
    ("nppn", False, Decision.UNVERIFIED, 1, None),   # a correctness level that did not run never passes
    ("pfnn", False, Decision.KEEP, 1, "b"),
    ("pppf", False, Decision.KEEP, 1, "d"),
    ("fppp", False, Decision.KEEP, 1, "a"),          # with --keep-going the first failure is still named
])
def test_verdicts_and_exit_codes(statuses, require_perf, verdict, code, first):
    res = cascade(statuses, require_perf)
    assert (res.verdict, res.exit_code) == (verdict, code)
    assert (res.first_failure.key if res.first_failure else None) == first
    if first:
        assert res.reasons[0].startswith(f"level ({first}) fails")
    if statuses.endswith("n") and verdict == Decision.UNVERIFIED:
        assert any("performance unverified" in r for r in res.reasons)


def test_accept_needs_every_level_and_states_the_speedup():
    res = cascade("pppp")
    perf = PerfResult(1.03, [entry("s", "forward", [1.0] * 3, [0.9] * 3)])
    judge(perf)
    res.levels["d"].result = perf
    assert res.verdict == Decision.ACCEPT and res.exit_code == 0 and "1.111 >= gamma 1.03" in res.reasons[0]


# ----------------------------------------------------------------------------- performance judgement
def entry(shape, phase, base, cand, base2=None):
    """Rounds all in the order A, B, A'."""
    return Entry(shape, phase, 1000, 1, list(base), list(cand), list(base2 if base2 is not None else base))


def test_entry_statistics():
    # A, B, A' = 1, 0.5, 1 (ratio 2); B, A, B' = 0.4, 1, 0.625 (1 / sqrt(0.25) = 2); A, B, A' = 1, 0.5, 1.21 (2.2)
    e = Entry("s", "iteration", 1000, 1, base=[1.0, 1.0, 1.0], cand=[0.5, 0.4, 0.5], again=[1.0, 0.625, 1.21],
              flipped=[False, True, False])
    assert e.speedup == pytest.approx((2.0 + math.sqrt(2.0 * 2.2)) / 2)  # median of adjacent rounds' geometric means
    assert e.noise == pytest.approx(abs(math.log(0.4 / 0.625)))          # the outer function's largest disagreement
    assert e.base_ms == pytest.approx(1.0) and e.cand_ms == pytest.approx(0.5)
    assert not e.slower
    assert entry("s", "forward", [1.0] * 3, [1.0] * 3).noise == NOISE_FLOOR


def test_a_disturbed_round_does_not_turn_a_faster_candidate_slower():
    """Both candidate runs of one B, A, B' round slowed alike (another process beside them): the A/A noise cannot
    see it, and it would sway two of the four adjacent-round terms. The round is named and left out; the same
    entry without it reads the same speedup."""
    base = [4.272, 4.262, 4.240, 4.268, 4.338]
    cand = [4.230, 4.241, 4.226, 7.047, 4.269]
    again = [4.287, 4.230, 4.251, 6.957, 4.262]
    flipped = [False, True, False, True, False]
    e = Entry("sgd", "iteration", 1, 5, base, cand, again, flipped)
    assert e.disturbed == [3] and e.speedup > 1 and not e.slower
    calm = Entry("sgd", "iteration", 1, 5, *([x[r] for r in (0, 1, 2, 4)] for x in (base, cand, again, flipped)))
    assert calm.disturbed == [] and e.speedup == pytest.approx(calm.speedup)
    assert (e.base_ms, e.cand_ms) == pytest.approx((calm.base_ms, calm.cand_ms))  # the report's columns agree
    slow = Entry("sgd", "iteration", 1, 5, base, [1.1 * x for x in base], [1.1 * x if f else y for x, y, f in
                                                                         zip(base, again, flipped)], flipped)
    assert slow.disturbed == [] and slow.slower  # a uniformly slower candidate is no disturbance


@pytest.mark.parametrize("cand, noisy, gamma, status, needle", [
    ([0.95] * 3, False, 1.03, Status.PASS, None),               # 5% faster everywhere
    ([1.0] * 3, False, 1.03, Status.FAIL, "below gamma 1.03"),   # same speed: not worth shipping
    ([1.0] * 3, False, 1.0, Status.PASS, None),                  # ... unless made for correctness
    ([1.002] * 3, True, 1.0, Status.PASS, None),                 # slower by less than the noise
    ([1.2] * 3, False, 1.0, Status.FAIL, "slower, beyond its noise"),
])
def test_perf_judgement(cand, noisy, gamma, status, needle):
    base2 = [1.03, 1.0, 1.0] if noisy else None
    res = PerfResult(gamma, [entry("a", "forward", [1.0] * 3, [0.95] * 3, base2),
                             entry("b", "iteration", [1.0] * 3, cand, base2)])
    judge(res)
    assert res.status == status, res.reasons
    assert needle is None or any(needle in r for r in res.reasons)


def test_one_slow_shape_fails_even_when_the_mean_is_fast():
    res = PerfResult(1.03, [entry(f"s{i}", "forward", [1.0] * 3, [0.7] * 3) for i in range(4)]
                     + [entry("slow", "iteration", [1.0] * 3, [1.1] * 3)])
    judge(res)
    assert res.geomean() > 1.2 and res.status == Status.FAIL
    assert [e.shape for e in res.slower] == ["slow"] and "slow iteration" in res.reasons[0]


def test_a_crash_fails_the_level():
    res = PerfResult(1.03, [entry("a", "forward", [1.0] * 3, [0.5] * 3),
                            Entry("b", "forward", error="the candidate raised OutOfResources: shared memory")])
    judge(res)
    assert res.status == Status.FAIL and "OutOfResources" in res.reasons[0]


def test_interleaved_timing_order_and_arithmetic(monkeypatch):
    """A, B, A' and B, A, B' in turn, each over ``calls`` calls after one untimed call, on a clock the functions
    advance (1 ms for the baseline, 3 ms for the candidate; the baseline drifts by 0.1 ms per call)."""
    from fuzz.gate import timing as perf_timing

    clock = {"t": 0.0, "calls": 0}
    order = []

    def fast():
        order.append("a")
        clock["t"] += 1e-3 + 1e-4 * clock["calls"]
        clock["calls"] += 1

    def slow():
        order.append("b")
        clock["t"] += 3e-3

    monkeypatch.setattr(perf_timing.time, "perf_counter", lambda: clock["t"])
    a, b, again, flipped = interleaved(fast, slow, rounds=3, calls=2, sync=lambda: None)
    assert "".join(order) == "aaabbbaaa" + "bbbaaabbb" + "aaabbbaaa" and flipped == [False, True, False]
    assert b == pytest.approx([3.0] * 3) and again[1] == pytest.approx(3.0)
    assert a[0] == pytest.approx(1.15) and again[0] == pytest.approx(1.45)  # drift, seen by A and A'
    e = Entry("clock", "forward", 1, 2, a, b, again, flipped)
    ratios = [math.sqrt(a[0] * again[0]) / 3.0, a[1] / 3.0, math.sqrt(a[2] * again[2]) / 3.0]
    assert e.speedup == pytest.approx(statistics.median([math.sqrt(ratios[0] * ratios[1]),
                                                         math.sqrt(ratios[1] * ratios[2])])) and e.slower
    assert e.noise == pytest.approx(max(abs(math.log(a[0] / again[0])), abs(math.log(a[2] / again[2]))))


def test_a_cost_of_switching_functions_does_not_read_as_a_slower_candidate(monkeypatch):
    """Two identical functions whose first call after the other one costs half again (a cold cache): the
    candidate must not read slower than the baseline for it."""
    from fuzz.gate import timing as perf_timing

    clock = {"t": 0.0, "last": None}

    def call(name):
        clock["t"] += 1e-3 * (1.5 if clock["last"] not in (None, name) else 1.0)
        clock["last"] = name

    monkeypatch.setattr(perf_timing.time, "perf_counter", lambda: clock["t"])
    e = Entry("switch", "forward", 1, 2, *interleaved(lambda: call("a"), lambda: call("b"), rounds=5, calls=2,
                                                      sync=lambda: None))
    assert e.speedup == pytest.approx(1.0) and not e.slower


@pytest.mark.parametrize("rounds", [3, 5, 6])
def test_a_switching_cost_longer_than_the_untimed_call_does_not_read_as_a_slower_candidate(monkeypatch, rounds):
    """Two identical functions whose first three calls after the other one cost double: one untimed call
    cannot absorb it, and with A, B, A' in every round A follows A' while B always follows the other
    function (the candidate read 20% slower); alternating the order puts the cost on both."""
    from fuzz.gate import timing as perf_timing

    clock = {"t": 0.0, "last": None, "since": 0}

    def call(name):
        clock["since"] = 0 if clock["last"] != name else clock["since"] + 1
        clock["t"] += 1e-3 * (2.0 if clock["last"] is not None and clock["since"] < 3 else 1.0)
        clock["last"] = name

    monkeypatch.setattr(perf_timing.time, "perf_counter", lambda: clock["t"])
    e = Entry("switch", "forward", 1, 4, *interleaved(lambda: call("a"), lambda: call("b"), rounds=rounds, calls=4,
                                                      sync=lambda: None))
    assert e.speedup == pytest.approx(1.0) and not e.slower


def test_perf_level_is_not_run_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    res = run_perf(KernelConfig(), KernelConfig(fwd_gather_unweighted=1), PRESETS["quick"])
    assert res.status == Status.NOT_RUN and "no CUDA device" in res.reasons[0] and not res.entries


# ----------------------------------------------------------------------------- shapes
@pytest.mark.parametrize("band, hot", [((1, 3), 0), ((4, 31), 0), ((32, 255), 0), ((256, 600), 0), ((1, 3), 5000)])
def test_band_batches_hold_their_segment_lengths(band, hot):
    shape = PerfShape("t", 100_000, 8, bags=400, pooling=20, band=band, hot=hot)
    ids = make_ids(shape, "cpu", seed=3)
    sl = segment_lengths(ids)
    assert ids.numel() == shape.lookups and int(ids.max()) < shape.rows
    inside = ((sl >= band[0]) & (sl <= band[1])).sum()
    assert int(inside) >= sl.numel() - 1 - (1 if hot else 0)   # only the remainder run and the hot row differ
    if hot:
        assert int(sl.max()) == hot


def test_presets_cover_every_band_and_a_hot_row_past_a_million():
    bands = [s.band for s in PRESETS["bands"] if s.hot == 0]
    assert bands == [(1, 3), (4, 31), (32, 255), (256, 4096)]
    assert max(s.hot for s in PRESETS["quick"]) > 1_000_000


def test_production_batches_are_table_major_with_the_lengths_and_columns_their_shape_names():
    shape = PerfShape("t", 50, 8, bags=7, pooling=4, tables=3, dims=(4, 16), lengths="variable", weighted=True)
    wl = make_workload(shape, "cpu", seed=2)
    lengths = wl.offsets.diff()
    assert wl.offsets[0] == 0 and int(wl.offsets[-1]) == wl.indices.numel() == shape.lookups
    assert int(lengths.min()) == 1 and int(lengths.max()) == 2 * shape.pooling - 1  # 1 .. 7: mean 4
    assert lengths.numel() == 3 * 7 and shape.specs == [(50, 4), (50, 16), (50, 4)]
    assert wl.grad.shape == (7, 4 + 16 + 4) and wl.per_sample_weights.numel() == shape.lookups
    assert 0 <= int(wl.indices.min()) and int(wl.indices.max()) < 50  # ids local to their table
    fixed = PerfShape("f", 50, 8, bags=7, pooling=4, tables=3)
    assert fixed.lookups == 3 * 7 * 4 and fixed.bag_lengths.unique().tolist() == [4]
    long = PerfShape("v", 50, 8, bags=1000, pooling=40, lengths="variable")
    assert abs(long.lookups / 1000 - 40) < 0.5  # the spread keeps the named mean


def test_presets_load_together_and_hold_production_forms():
    both = load_shapes("bench,production")
    assert [s.name for s in both] == [s.name for s in PRESETS["bench"] + PRESETS["production"]]
    prod = PRESETS["production"]
    assert {s.pooling for s in prod} >= {1, 8, 40, 200} and {"fixed", "variable"} <= {s.lengths for s in prod}
    assert max(s.tables for s in prod) >= 64 and any(len(set(d for _, d in s.specs)) == 3 for s in prod)
    assert any(s.weights_dtype == "fp16" and s.output_dtype == "fp32" for s in prod)
    assert any(s.rows <= 64 for s in prod)  # the small hot table of the histogram forward
    with pytest.raises(ValueError, match="unique"):
        load_shapes("bench,bench")


def test_shapes_file_round_trip_and_errors(tmp_path):
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps([s.to_dict() for s in PRESETS["bands"][:2] + PRESETS["production"][-3:]]))
    assert load_shapes(str(path)) == PRESETS["bands"][:2] + PRESETS["production"][-3:]
    for content, needle in [('[{"name": "x", "rows": 10, "dim": 4, "bags": 0}]', "bags"),
                            ('[{"name": "x", "rows": 10, "dim": 4, "tables": 2, "hot": 3}]', "tables"),
                            ('[{"name": "x", "rows": 10, "dim": 4, "dims": [4, 0]}]', "dims"),
                            ('[{"name": "x", "rows": 10, "dim": 4, "lengths": "zipf"}]', "lengths"),
                            ('[{"name": "x", "rows": 10, "dim": 4, "output_dtype": "int8"}]', "output_dtype"),
                            ('[{"name": "x", "rows": 10, "dim": 4, "speed": 1}]', "speed"),
                            ('[{"name": "x", "rows": 10, "dim": 4, "band": [5, 2]}]', "band"),
                            ("[]", "non-empty"), ("{nope", "not valid JSON")]:
        path.write_text(content)
        with pytest.raises(ValueError, match=needle):
            load_shapes(str(path))
    with pytest.raises(ValueError, match="neither a shape preset"):
        load_shapes("no-such-preset")


# ----------------------------------------------------------------------------- static limits, edges
def test_resource_limits():
    ok = {"num_warps": 4, "registers": 128, "local_bytes": 0, "shared_bytes": 65536}
    assert over_limits(ok) == []
    assert "spills" in over_limits({**ok, "local_bytes": 16})[0]
    assert "255" in over_limits({**ok, "registers": 256, "num_warps": 1})[0]
    assert "register file" in over_limits({**ok, "registers": 160, "num_warps": 16})[0]
    assert "shared" in over_limits({**ok, "shared_bytes": LIMITS["shared_bytes"] + 1})[0]


def test_per_bucket_entries_no_bucket_produces_are_named():
    from fuzz.gate.static import StaticResult, _validate

    res = StaticResult()
    config = KernelConfig(dim_buckets=(8, 32), fwd_bucket_tiles=((8, 2, 2, 1),),
                          bwd_short_bucket_runs=((32, 4), (128, 2)))
    assert _validate(config, res)
    assert len(res.notes) == 1 and "bwd_short_bucket_runs names BLOCK_D [128]" in res.notes[0]


def test_each_seed_draws_fresh_edge_batches():
    base = KernelConfig()
    cases, _ = edge_cases(base, base.replace(long_run_threshold=128, fused_bounds_check=True), cap=4000)
    assert reseed(cases, 0) == cases
    again = reseed(cases, 2)
    assert [lbl for lbl, _ in again] == [lbl for lbl, _ in cases]
    assert all(a.seed != b.seed for (_, a), (_, b) in zip(cases, again) if hasattr(a, "seed"))
    assert all(type(a) is type(b) for (_, a), (_, b) in zip(cases, again))


# ----------------------------------------------------------------------------- CLI input errors
@pytest.mark.parametrize("extra, needle", [
    (["--levels", "xyz"], "--levels"), (["--gamma", "fast"], "--gamma"), (["--shapes", "nope"], "--shapes"),
    (["--seeds", "0"], "--seeds"), (["--candidate", "/no/such.json"], "/no/such.json"),
])
def test_gate_cli_rejects_bad_input(tmp_path, extra, needle, capsys):
    base = tmp_path / "base.json"
    KernelConfig().save(base)
    argv = ["gate", "--baseline", str(base), "--candidate", str(base)] + extra
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and needle in err and "Traceback" not in err


def test_an_invalid_candidate_fails_level_a_without_running_the_rest(tmp_path, capsys):
    base, cand = tmp_path / "base.json", tmp_path / "cand.json"
    KernelConfig().save(base)
    cand.write_text(json.dumps({"chunk_size": 0, "fwd_gather_unweighted": 3}))
    assert main(["gate", "--baseline", str(base), "--candidate", str(cand), "--report", str(tmp_path / "r")]) == 1
    out = capsys.readouterr().out
    assert "KEEP the baseline" in out and "first failing level: (a)" in out and "chunk_size" in out
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["first_failing_level"] == "a" and report["exit_code"] == 1
    assert [report["levels"][k]["status"] for k in "bcd"] == [Status.NOT_RUN] * 3
    assert "| (a) |" in (tmp_path / "r" / "report.md").read_text()


def test_tune_needs_a_gpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    pytest.importorskip("optuna", reason="optuna==5.0.0 (requirements) is not installed: tune refuses for that first")
    assert main(["tune", "--time", "5"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_report_shows_the_per_shape_table_and_the_noise(tmp_path):
    from fuzz.gate import report as cascade_report

    res = cascade("pppf")
    res.candidate = KernelConfig(fwd_gather_unweighted=1)
    res.candidate_data = res.candidate.to_dict()
    # A and A' of the first round straddle 1.0 (noise 2 ln 1.01 = 2.0%), so every round reads 1 / 1.6
    perf = PerfResult(1.03, [entry("D128-lite", "forward", [1.01, 1.0, 1.0], [1.6] * 3, [1 / 1.01, 1.0, 1.0]),
                             entry("D128-lite", "iteration", [5.0] * 3, [5.2] * 3),
                             Entry("SL1-3", "forward", 100, error="the candidate raised RuntimeError: boom")],
                      rounds=3, target_ms=20.0, device="NVIDIA H200")
    judge(perf)
    res.levels["d"] = Level("d", perf.status, list(perf.reasons), result=perf)
    text = cascade_report.text(res)
    assert "KEEP the baseline" in text and "first failing level: (d)" in text
    assert "fwd_gather_unweighted: 8 -> 1" in text
    row = next(ln for ln in text.splitlines() if "D128-lite" in ln and "forward" in ln and "SLOWER" in ln)
    assert "0.625x" in row and "±2.0%" in row
    assert "boom" in text and "mean noise" in text
    cascade_report.write(res, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## Performance per shape" in md and "| D128-lite | forward |" in md and "SLOWER" in md
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["verdict"] == Decision.KEEP and data["levels"]["d"]["detail"]["entries"][0]["slower"] is True
    assert KernelConfig.from_dict(json.loads((tmp_path / "candidate.json").read_text())) == res.candidate


# ----------------------------------------------------------------------------- (b) beside a background build
class _Clock:
    """A stand-in for ``time`` in fuzz.gate.correctness: only the build's waits move it."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_the_gate_waits_for_each_cases_build_in_run_order_and_off_the_phase_clock(monkeypatch):
    import fuzz.gate.correctness as correctness
    from tests.passing_supervisor import PassingSupervisor

    base = KernelConfig()
    cand = base.replace(long_run_threshold=128)
    budget = Budget("t", seconds=50.0, shrink_seconds=0.0, max_examples=4, max_lookups=300)
    work = correctness.gate_work(base, cand, budget, seed=1)
    clock = _Clock()
    monkeypatch.setattr(correctness, "time", clock)

    class SlowBuild:  # every case's kernels take 100 s to build
        waited: list = []

        def wait(self, case, config, timeout):
            self.waited.append((case, config))
            clock.now += 100.0
            return True

    build = SlowBuild()
    g = correctness.run_gate(base, cand, budget, seed=1, supervisor=PassingSupervisor(), work=work, readiness=build)
    assert work.targeted and len(g.cases) == len(work.targeted) + budget.max_examples  # no case cut for the waits
    assert build.waited == correctness.build_pairs(work, base, cand)[:len(build.waited)]  # in the order they run
    assert g.build_wait_s == 100.0 * len(build.waited)


def test_the_cascade_builds_the_cases_of_b_and_c_in_the_background_and_b_waits_on_it(monkeypatch):
    import tbe.backend
    from fuzz.compile import background
    from fuzz.gate import cascade, correctness
    from fuzz.gate.oracle import matrix

    base = KernelConfig()
    cand = base.replace(long_run_threshold=128)
    budget = Budget("t", seconds=5.0, shrink_seconds=0.0, max_examples=3, max_lookups=300)
    started: list = []
    monkeypatch.setattr(tbe.backend, "INTERPRETED", False)
    monkeypatch.setattr(background, "start_cases", lambda pairs, progress=None: started.append(pairs) or "handle")
    opts = CascadeOptions(budget, seeds=(0, 1), levels="bc", oracle_cases=2)
    build, works = cascade._start_build(base, cand, opts, None)
    assert build == "handle" and sorted(works) == [0, 1]
    for seed in (0, 1):
        assert repr(works[seed].items) == repr(correctness.gate_work(base, cand, budget, seed).items)
    expected = correctness.build_pairs(works[0], base, cand) + correctness.build_pairs(works[1], base, cand)
    assert started == [expected + [(spec, cand) for _, spec in matrix(cand)[:2]]]
    monkeypatch.setattr(tbe.backend, "INTERPRETED", True)
    assert cascade._start_build(base, cand, opts, None) == (None, {})  # the interpreter: nothing to build
