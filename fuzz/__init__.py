"""The fuzz driver: campaigns, failing-case artifacts and replay, the config gate, self-test, reports.

It is built in layers, lowest first. A module imports its own unit and lower layers only; units on one
row are peers and do not import each other (``tests/test_layers.py`` holds the same table and checks
every import, inside functions too). Each subpackage's ``__init__`` is its public face.

| layer | units | holds |
|---|---|---|
| 0 | `fuzz`, `fuzz.errors`, `fuzz.lazy` | this face; the exceptions; faces that import on first use |
| 1 | `fuzz.status`, `fuzz.profiles`, `fuzz.time_split`, `fuzz.glossary` | statuses and kinds; Hypothesis profiles and size caps; the time split; where the docs explain a printed term |
| 2 | `fuzz.budgets` | campaign budgets |
| 3 | `fuzz.sut` | systems under test: protocol, adapters, the module a case builds |
| 4 | `fuzz.compile` | warm-up, specializations, launches, sm_90 compiles |
| 5 | `fuzz.memcheck` | sanitizer, weak memory, PTX, sync analysis, race stress |
| 6 | `fuzz.judge` | one case's checks against the oracles, known findings, teeth |
| 7 | `fuzz.execution` | supervised workers, artifacts, the verdict inside a test |
| 8 | `fuzz.campaign` | search, triage, replay, reports, pictures, progress |
| 9 | `fuzz.gate`, `fuzz.selftest`, `fuzz.mutate` | the config gate; planted-fault detectors; mutation testing |
| 10 | `fuzz.tune` | config search through the gate |
| 11 | `fuzz.cli` | the command line |
| 12 | `fuzz.__main__` | ``python -m fuzz`` |

Below ``fuzz`` lie ``tbe`` (the kernels), then ``oracles`` and ``strategies``, which see only ``tbe``'s
data types; ``benchmarks`` and ``tests`` sit above it.
"""
