"""What each planted-fault config adds to the default campaign's kernel specializations, on the CPU.

    python -m benchmarks.fault_specializations [--json]

Uses ``fuzz.compile.dry_run.keys_by_kernel`` (a few cases per override profile that reach every kernel;
no kernel runs, nothing compiles), so it takes a minute where ``tbe-fuzz warmup --dry-run --faults``
(the whole warm-up matrix of 13 campaigns) takes hours on two cores. Counts are of that sample, not of
the whole matrix. To measure other kernels with this harness, put their checkout's ``tbe`` first on
``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json


def measure() -> dict:
    from fuzz.compile import keys_by_kernel
    from tbe import KernelConfig, faults

    with faults.allow():
        base = keys_by_kernel(KernelConfig())
        out = {"default": {k: len(v) for k, v in sorted(base.items())}, "faults": {}}
        for name in sorted(faults.KNOWN):
            keys = keys_by_kernel(KernelConfig(faults=(name,)))
            new = {k: len(v - base.get(k, set())) for k, v in sorted(keys.items())}
            out["faults"][name] = {k: n for k, n in new.items() if n}
    out["default_total"] = sum(out["default"].values())
    out["faults_new_total"] = sum(sum(v.values()) for v in out["faults"].values())
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args()
    res = measure()
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"default: {res['default_total']} specializations on the sample")
    for name, new in res["faults"].items():
        print(f"  + {name}: {sum(new.values())} new ({', '.join(f'{k} {n}' for k, n in new.items()) or 'none'})")
    print(f"all faults together add {res['faults_new_total']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
