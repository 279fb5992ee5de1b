"""Mutation testing (``tbe-fuzz mutate``): sites, sampling, the runner's verdicts, resumption, the probes.

The runner tests use a tiny fake project and a fake check (a script that reads the mutated
file), so they cover copying, parallel runs, timeouts, signals and resumption in seconds.
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fuzz.mutate import kernel_graph

from fuzz.mutate import operators as mutants
from fuzz.cli import main
from fuzz.mutate.runner import Check, Runner, load_state
from fuzz.mutate.report import counts, score
from tests.paths import REPO


FAKE = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def helper(v, FAULT_X: tl.constexpr):
        if FAULT_X:
            v = v + 7
        return tl.minimum(v, 3.0)


    @triton.jit
    def kernel(x_ptr, n, FAULT_X: tl.constexpr):
        """docstring 12"""
        i = tl.arange(0, 16)
        m = i < n
        v = tl.load(x_ptr + i, mask=m, other=0.0)
        tl.store(x_ptr + i, helper(v, FAULT_X) * 2, mask=m)
        tl.debug_barrier()
        tl.atomic_add(x_ptr, 1.0, sem="acq_rel", scope="gpu")
        for j in range(0, n):
            v += 1


    def host(x):
        return x < 1
''')

# the fake check: a cmp or const mutant fails, a loop-end mutant hangs, a removed store dies by a signal
SCRIPT = textwrap.dedent('''
    import os, pathlib, signal, sys, time
    src = pathlib.Path("tbe/k.py").read_text()
    if "<=" in src or ">=" in src or "0.0)" not in src:
        sys.exit(1)
    if "range(0, n + 1)" in src:
        time.sleep(60)
    if "    pass\\n    tl.debug" in src:
        os.kill(os.getpid(), signal.SIGKILL)
    sys.exit(0)
''')


class FakeCheck(Check):
    def command(self) -> list[str]:
        return [sys.executable, "-c", SCRIPT]


def fake_project(root: Path) -> Path:
    (root / "tbe").mkdir(parents=True)
    (root / "tbe" / "k.py").write_text(FAKE)
    return root


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------- sites
def test_sites_cover_the_operator_families_and_skip_faults_shapes_and_host_code(tmp_path):
    root = fake_project(tmp_path)
    sites = mutants.all_sites(root)
    ops = {s.operator for s in sites}
    assert {"cmp", "mask", "other", "arith", "remove", "barrier", "atomic", "loop", "aug", "minmax"} <= ops, ops
    descriptions = {s.description for s in sites}
    assert {"mask dropped", "mask negated", "sem=acq_rel -> relaxed", "scope=gpu -> cta",
            "tl.debug_barrier(...) removed", "tl.store(...) removed", "loop end + 1", "+= -> = (accumulation lost)",
            "tl.minimum -> tl.maximum"} <= descriptions, descriptions
    text = FAKE.splitlines()
    fault_line = next(i + 1 for i, line in enumerate(text) if "v + 7" in line)
    assert not [s for s in sites if s.line == fault_line], "planted-fault code is never mutated"
    assert not [s for s in sites if "arange" in text[s.line - 1] and s.operator == "const"], "shape arguments"
    assert {s.function for s in sites} == {"helper", "kernel"}, "host code is never mutated"
    for s in sites:
        mutated = mutants.apply(FAKE, s)
        ast.parse(mutated)
        changed = [i for i, (a, b) in enumerate(zip(FAKE.splitlines(), mutated.splitlines())) if a != b]
        assert changed and min(changed) + 1 >= s.line, s


def test_diff_shows_only_the_mutated_line(tmp_path):
    root = fake_project(tmp_path)
    site = next(s for s in mutants.all_sites(root) if s.description == "< -> <=")
    d = mutants.diff(FAKE, site)
    assert "-    m = i < n\n+    m = i <= n\n" in d and d.count("\n-") == 1


def test_sample_is_seeded_and_ids_round_trip(tmp_path):
    sites = mutants.all_sites(fake_project(tmp_path))
    a, b = mutants.sample(sites, 5, 1), mutants.sample(sites, 5, 1)
    assert a == b and len(a) == 5 and a != mutants.sample(sites, 5, 2)
    assert all(mutants.Site.from_dict(s.to_dict()) == s for s in a)
    assert len({s.id for s in sites}) == len(sites)


def test_real_kernels_have_sites_in_every_file_and_helpers_map_to_kernels():
    sites = mutants.all_sites(REPO)
    assert {Path(s.path).name for s in sites} >= {"forward.py", "forward_small_table.py", "bounds_check.py",
                                                  "classify.py", "backward_short.py", "backward_long.py"}
    calls = kernel_graph.callers(REPO)
    assert "_short_kernel" in kernel_graph.kernels_of("gather_grad", calls)
    # a block-gradient function passed to the shared column loop reaches the kernels that pass it
    assert kernel_graph.kernels_of("_workspace_block", calls) == ["_apply_kernel", "_chunk_kernel"]
    assert "_run_block" not in kernel_graph.kernels_of("gather_grad", calls)
    assert kernel_graph.kernels_of("_forward_kernel", calls) == ["_forward_kernel"]


# ----------------------------------------------------------------------------- runner
def test_runner_verdicts_parallel_resume_and_the_user_tree_untouched(tmp_path):
    root = fake_project(tmp_path / "proj")
    before = tree_hash(root)
    sites = [s for s in mutants.all_sites(root) if s.description in (
        "< -> <=", "loop end + 1", "tl.store(...) removed", "scope=gpu -> cta")]
    assert len(sites) == 4
    out = tmp_path / "rep"
    header = {"seed": 0}
    runner = Runner(root, FakeCheck(timeout=5.0), 2, out, equivalence=False, progress=lambda line: None)
    try:
        results = runner.run(sites, header, lambda rs: None)
    finally:
        runner.cleanup()
    by = {o.site.description: o for o in results}
    assert by["< -> <="].verdict == "killed" and by["< -> <="].rc == 1
    assert by["loop end + 1"].verdict == "timeout"
    assert by["tl.store(...) removed"].verdict == "killed" and by["tl.store(...) removed"].rc < 0
    assert by["scope=gpu -> cta"].verdict == "survived"
    assert "+    m = i <= n" in by["< -> <="].diff
    assert tree_hash(root) == before, "the user's tree must never be written"
    assert counts(results) == {"killed": 2, "timeout": 1, "survived": 1, "equivalent": 0}
    assert score(results) == pytest.approx(3 / 4)
    # resuming runs nothing again; other settings are refused
    assert {o.site.id for o in load_state(out.with_suffix(".jsonl"), header)} == {s.id for s in sites}
    lines: list[str] = []
    again = Runner(root, FakeCheck(timeout=5.0), 2, out, equivalence=False, progress=lines.append)
    try:
        assert len(again.run(sites, header, lambda rs: None)) == 4 and "0 to run" in lines[0]
        with pytest.raises(ValueError, match="seed"):
            again.run(sites, {"seed": 1}, lambda rs: None)
    finally:
        again.cleanup()


def test_equivalence_is_never_claimed_for_memory_ordering_or_unexecuted_lines(tmp_path):
    root = fake_project(tmp_path)
    runner = Runner(root, FakeCheck(), 1, tmp_path / "r", progress=lambda line: None)
    try:
        runner.probe = {"probes": {}, "lines": {"tbe/k.py": []}}
        sites = mutants.all_sites(root)
        atomic = next(s for s in sites if s.operator == "atomic")
        assert runner.judge_equivalence(atomic, root)[0] == "survived"
        cmp = next(s for s in sites if s.operator == "cmp")
        verdict, why = runner.judge_equivalence(cmp, root)
        assert verdict == "survived" and "not executed" in why
    finally:
        runner.cleanup()


# ----------------------------------------------------------------------------- CLI
def test_cli_lists_a_seeded_sample(capsys):
    assert main(["mutate", "--list", "--mutants", "3", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert out.count("--- a/tbe/") == 3 and "3 of " in out
    assert main(["mutate", "--list", "--mutants", "3", "--seed", "5"]) == 0
    assert capsys.readouterr().out == out


@pytest.mark.parametrize("argv, needle", [(["mutate", "--operators", "nope"], "nope"),
                                          (["mutate", "--check", "x"], "--check"),
                                          (["mutate", "--files", "no_such_file", "--list"], "no mutation site")])
def test_cli_rejects_bad_mutate_options(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and needle in capsys.readouterr().err


# ----------------------------------------------------------------------------- probes
@pytest.mark.slow
def test_probes_execute_every_jit_statement_outside_fault_code(tmp_path):
    """The probe batch is the equivalence test's evidence: it must reach every kernel line."""
    out = tmp_path / "fp.json"
    subprocess.run([sys.executable, "-m", "fuzz.mutate.probe", "--out", str(out), "--trace"], cwd=REPO, check=True,
                   timeout=900)
    import json

    executed = {k: set(v) for k, v in json.loads(out.read_text())["lines"].items()}
    missed = []
    for path, lo, hi in kernel_graph.iter_jit_lines(REPO):
        tree = ast.parse((REPO / path).read_text())
        fault = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.If) and any(isinstance(x, ast.Name) and x.id.startswith("FAULT_")
                                             for x in ast.walk(n.test)):
                fault |= {s.lineno for b in n.body for s in ast.walk(b) if isinstance(s, ast.stmt)}
        for n in ast.walk(tree):
            if (isinstance(n, ast.stmt) and lo <= n.lineno <= hi and n.lineno not in fault
                    and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))):
                if n.lineno not in executed.get(path, set()):
                    missed.append(f"{path}:{n.lineno}")
    assert not missed, missed


def test_cli_site_selects_one_mutant_and_rejects_unknown_ids(capsys):
    site = mutants.all_sites(REPO)[7]
    assert main(["mutate", "--site", site.id, "--list"]) == 0
    assert f"{site.id}  {site.function}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["mutate", "--site", "tbe/no.py:1:1:cmp:000000", "--list"])
    assert exc.value.code == 2 and "no such site" in capsys.readouterr().err


def test_a_mutants_copy_holds_every_package_the_check_imports():
    """The copy a mutant runs in holds every top-level package of the project (a package left out would make the
    unmutated check fail to import, and every mutant with it)."""
    from fuzz.mutate.runner import COPIED
    from tests.test_layers import PACKAGES

    assert set(PACKAGES) - {"benchmarks"} <= set(COPIED)
