"""Which broken offsets crash TorchRec's Triton TBE on a GPU: the H100 campaign's faulting case, taken apart.

The campaign on 3f2fe5f3 ended in an illegal memory access on a weighted case with bad ids and three broken
offsets (``benchmarks/results/campaign_torchrec_3f2fe5f3_h100.json``). This runs that case's variants, each
broken offset alone and all together, weighted and not, with and without its bad ids, in this project's
supervised worker (a crash restarts it, so one variant's fault cannot land on the next), and prints one line
per variant: what the check said.

    python -m benchmarks.torchrec_offsets_probe --sut-source DIR [--out FILE.jsonl]

GPU campaigns feed this SUT no broken offsets, so the capability check is passed by here on purpose.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = ROOT / "benchmarks" / "results" / "campaign_torchrec_3f2fe5f3_h100.json"


def variants(case: dict) -> list[tuple[str, dict]]:
    """(label, case dict) for each subset of the case's broken offsets (each alone, all), weights, bad ids."""
    offsets = case["bad"]["bad_offsets"]
    subsets = [[o] for o in offsets] + [offsets]
    out = []
    for subset, weighted, ids in itertools.product(subsets, (True, False), (True, False)):
        bad = {**case["bad"], "bad_offsets": subset, "weighted": weighted,
               "bad_ids": case["bad"]["bad_ids"] if ids else []}
        spec = {**case["spec"], "weighted": weighted}
        label = f"offsets={'+'.join(subset)} weighted={weighted} bad_ids={ids}"
        out.append((label, {**case, "bad": bad, "spec": spec}))
    return out


def main(argv=None) -> int:
    from fuzz.execution.supervisor import shared
    from fuzz.sut.protocol import address
    from cases import case_from_dict
    from tbe import KernelConfig

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sut-source", required=True)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    failure = json.loads(CAMPAIGN.read_text())["failure"]
    config = KernelConfig(**failure.get("config_overrides") or {})
    sut = address("torchrec-triton", args.sut_source)
    records = []
    for label, case in variants(failure["case"]):
        try:
            result = shared().run(case_from_dict(case), config, sut=sut)
            record = {"variant": label, "ok": result.ok, "kind": str(result.kind),
                      "headline": result.headline if not result.ok else None}
        except Exception as e:  # noqa: BLE001  (the harness's own failure: said, and the next variant runs)
            record = {"variant": label, "ok": None, "kind": "harness", "headline": f"{type(e).__name__}: {e}"}
        records.append(record)
        print(json.dumps(record), flush=True)
    if args.out is not None:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
