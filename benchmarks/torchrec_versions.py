"""Campaigns against every TorchRec Triton TBE version: a table of version x verdict, first failure, examples.

Each version (``fuzz.sut.torchrec_triton.loader.snapshots``, oldest first) gets ``tbe-fuzz run --sut
torchrec-triton --sut-source DIR`` in a process of its own, with the same budget and seed. A version where
the campaign met ``torchrec-missing-psw-grad`` has that finding's shrunk artifact replayed against the
newest version (``tbe-fuzz replay DIR --sut-source NEWEST``): the fix should make it pass there.

    python -m benchmarks.torchrec_versions [--time S] [--seed N] [--out DIR] [--only COMMIT ...] [--parallel N]

``--parallel N`` runs N versions at once: a GPU campaign against TorchRec's kernels spends most of its time
compiling them on the CPU, so several share one GPU well (their times are then not each one's alone).

Writes ``torchrec_versions_<device>.jsonl`` (one record per version) and ``.md`` (the table) under
``benchmarks/results/``, and each campaign's artifacts under ``--out``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def device_label() -> str:
    import torch

    from tbe.backend import INTERPRETED

    if torch.cuda.is_available() and not INTERPRETED:
        return torch.cuda.get_device_name().replace("NVIDIA ", "").split()[0].lower()
    return "cpu"


def run_version(folder: Path, args: argparse.Namespace, out: Path) -> dict:
    cmd = [sys.executable, "-m", "fuzz", "run", "--sut", "torchrec-triton", "--sut-source", str(folder),
           "--budget", args.budget, "--seed", str(args.seed), "--artifacts", str(out / folder.name), "--json"]
    if args.time is not None:
        cmd += ["--time", str(args.time)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    record = {"version": folder.name, "exit": proc.returncode, "wall_s": round(wall, 1), "command": " ".join(cmd[3:])}
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        record.update(verdict="ERROR", error=(proc.stderr or proc.stdout).strip().splitlines()[-1:])
        return record
    verdict = "NOT RUN" if data.get("not_run") else "PASS" if data["ok"] else "FAIL"
    failure = data.get("failure") or {}
    record.update(
        verdict=verdict, examples=data.get("examples"), lookups=data.get("lookups"),
        known=[{"id": k["id"], "examples": k["examples"], "seconds": k["seconds"], "lookups": k["lookups"],
                "artifact": k["artifact"]} for k in data.get("known", [])],
        failure=None if not failure else {"kind": failure.get("kind"), "headline": failure.get("first_failure_headline"),
                                          "examples": failure.get("examples_to_first_failure")},
        artifact=data.get("artifact"))
    return record


def replay_on(artifact: str, folder: Path) -> dict:
    cmd = [sys.executable, "-m", "fuzz", "replay", artifact, "--sut-source", str(folder), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"exit": proc.returncode, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    return {"exit": proc.returncode, "ok": data.get("ok"), "known": data.get("known"), "on": folder.name}


def table(records: list[dict], device: str, parallel: int = 1) -> str:
    lines = [f"# TorchRec Triton TBE versions on {device}", "",
             "| version | verdict | examples | first new failure | known findings met (examples before it) | "
             "missing psw grad's case on the newest |", "|---|---|---|---|---|---|"]
    for r in records:
        known = ", ".join(f"{k['id']} ({k['examples']})" for k in r.get("known", [])) or "none"
        fail = r.get("failure") or {}
        first = f"{fail.get('kind')}: {fail.get('headline')} (after {fail.get('examples')})" if fail else "none"
        rep = r.get("psw_fix_replay")
        fix = "-" if rep is None else ("passes" if rep.get("exit") == 0 and not rep.get("known") else
                                       f"exit {rep.get('exit')}, known {rep.get('known')}")
        lines.append(f"| {r['version']} | {r['verdict']} | {r.get('examples', '-')} | {first} | {known} | {fix} |")
    lines += ["", f"Command per version: `python -m fuzz {records[0]['command']}` (artifacts path aside)." if records
              else "", ""]
    if parallel > 1:
        lines += [f"{parallel} versions ran at once (`--parallel {parallel}`), sharing the machine.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    from fuzz.sut.torchrec_triton.loader import snapshots

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", default="quick")
    p.add_argument("--time", type=float, default=None, help="search seconds per version (default: the budget's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("torchrec-sweep"), help="artifacts root")
    p.add_argument("--only", nargs="*", default=None, help="these versions only")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--parallel", type=int, default=1, help="versions run at once (default 1)")
    args = p.parse_args(argv)
    folders = [f for f in snapshots() if args.only is None or f.name in args.only]
    if not folders:
        print("no TorchRec snapshots found (TBE_FUZZ_TORCHREC_SNAPSHOTS)", file=sys.stderr)
        return 2
    newest = snapshots()[-1]
    device = device_label()
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"torchrec_versions_{device}"
    stem.with_suffix(".jsonl").write_text("")
    def one(folder: Path) -> dict:
        r = run_version(folder, args, args.out)
        missing = [k for k in r.get("known", []) if k["id"] == "torchrec-missing-psw-grad" and k["artifact"]]
        if missing and folder != newest:
            r["psw_fix_replay"] = replay_on(missing[0]["artifact"], newest)
        print(json.dumps(r), flush=True)
        return r

    records: list[dict] = []
    with concurrent.futures.ThreadPoolExecutor(max(1, args.parallel)) as pool:
        for r in pool.map(one, folders):  # in version order, each written as it comes
            records.append(r)
            with stem.with_suffix(".jsonl").open("a") as f:  # a run cut short keeps what it measured
                f.write(json.dumps({**r, "parallel": args.parallel}) + "\n")
            stem.with_suffix(".md").write_text(table(records, device, args.parallel))
    print(table(records, device, args.parallel))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
