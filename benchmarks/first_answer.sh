#!/usr/bin/env bash
# Time to a GPU answer on a fresh machine: a quick campaign with the background warm-up (first checked
# example, examples in the search, wall), a warm re-run, three campaigns started together, and the
# self-test of the faults named in FAULTS (FAULTS=" ": every fault), and with GATE=1 the gate of the default config
# against itself (--shapes quick --gamma 1). Usage: bash benchmarks/first_answer.sh OUT_DIR
# Each step writes its JSON summary and its stderr (each line prefixed with seconds since the step began)
# to OUT_DIR; walls, and each run's first-answer marks, go to OUT_DIR/walls.txt. With TAR set, OUT_DIR is packed into that file after every
# step, so a run cut short still leaves the steps it finished.
set -u
OUT=${1:?output directory}
mkdir -p "$OUT"
FAULTS=${FAULTS:-"fwd_drop_cols_past_1024 hang_narrow_long_run lane_mask_narrow momentum_low_precision"}
stamp() {  # stderr lines with the seconds since the step began
    python3 -u -c 'import sys, time
t0 = time.time()
for line in sys.stdin:
    sys.stdout.write(f"{time.time() - t0:7.1f} {line}")
    sys.stdout.flush()'
}
first_answer() {  # a run's first-answer marks (seconds from its start), one line; nothing for other commands
    python3 -c 'import json, sys
try:
    fa = json.load(open(sys.argv[1])).get("first_answer")
except (OSError, ValueError, AttributeError):
    fa = None
if fa:
    keys = ("driver_parsed", "search_started", "worker_started", "worker_imported", "worker_device", "worker_setup",
            "worker_ready", "case_ready", "case_sent", "answered", "builds", "build_seconds", "early")
    print("  first answer: " + " ".join(f"{k}={fa.get(k)}" for k in keys))' "$1"
}
pack() { if [ -n "${TAR:-}" ]; then tar czf "$TAR.tmp" -C "$(dirname "$OUT")" "$(basename "$OUT")" && mv "$TAR.tmp" "$TAR"; fi; }
step() {  # step NAME LIMIT_S COMMAND...: run, record wall and exit status
    local name=$1 limit=$2; shift 2
    local t0; t0=$(date +%s.%N)
    timeout "$limit" "$@" > "$OUT/$name.json" 2> >(stamp > "$OUT/$name.err")
    local rc=$?
    python3 -c "import sys; print(f'{sys.argv[1]:<16} rc={sys.argv[2]:<4} wall={float(sys.argv[4]) - float(sys.argv[3]):.1f}s')" \
        "$name" "$rc" "$t0" "$(date +%s.%N)" | tee -a "$OUT/walls.txt"
    first_answer "$OUT/$name.json" | tee -a "$OUT/walls.txt"
    pack
}
step quick_fresh "${FRESH_LIMIT:-150}" python -m fuzz run --budget quick --json --artifacts "$OUT/a1"
step quick_warm "${WARM_LIMIT:-100}" python -m fuzz run --budget quick --json --time 30 --artifacts "$OUT/a2"
t0=$(date +%s.%N)
for i in 1 2 3; do
    timeout "${CONCURRENT_LIMIT:-90}" python -m fuzz run --budget quick --time 20 --seed "$i" --json --artifacts "$OUT/c$i" \
        > "$OUT/concurrent_$i.json" 2> >(stamp > "$OUT/concurrent_$i.err") &
done
wait
python3 -c "import sys; print(f'concurrent x3    wall={float(sys.argv[2]) - float(sys.argv[1]):.1f}s')" "$t0" "$(date +%s.%N)" \
    | tee -a "$OUT/walls.txt"
pack
args=()
for f in $FAULTS; do args+=(--fault "$f"); done
step selftest "${SELFTEST_LIMIT:-190}" python -m fuzz selftest --json "${args[@]}"
if [ -n "${GATE:-}" ]; then  # the config against itself: level (b)'s and (c)'s kernels build beside the levels
    echo '{}' > "$OUT/base.json"
    step gate "${GATE_LIMIT:-600}" python -m fuzz gate --baseline "$OUT/base.json" --candidate "$OUT/base.json" \
        --shapes quick --gamma 1 --json --artifacts "$OUT/ga"
fi
