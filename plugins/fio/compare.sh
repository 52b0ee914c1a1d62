#!/usr/bin/env bash
# plugins/fio/compare.sh - runs one fio job file on folio, psync buffered, psync direct
# and io_uring direct in one invocation, ROUNDS times alternating the engines (folio,
# psync-buffered, ..., folio, psync-buffered, ...), each run cold (the kernel's page cache
# dropped before each; folio's cache is new in each fio process), and prints a table of
# each engine's median round: bandwidth, IOPS, mean and p99 completion latency, and its
# median bandwidth as a ratio to psync buffered's.
#
#   plugins/fio/compare.sh [JOB] [FIO_ARGS...]
#   plugins/fio/compare.sh plugins/fio/jobs/randread-zipf.fio --runtime=15
#
# JOB defaults to jobs/randread-zipf.fio; FIO_ARGS go to every run (before the job file,
# so the job file's own settings win). For a job that reads layout.fio's files (its text
# names them), the files (1 GiB) are laid out with jobs/layout.fio in FOLIO_FIO_DIR
# (default target/fio-plugin/data) if missing. Write jobs (jobs/write.fio,
# randwrite.fio, randrw.fio) make their own files; their syncs (fdatasync=,
# fsync_on_close=) are the job file's, so psync buffered is buffered writes + fdatasync
# against folio's writes + folio_sync. Bandwidth and IOPS are reads + writes; the
# latency is the larger of the two directions' means and p99s.
#
# Environment:
#   FOLIO_CAPACITY=256m     folio's cache (folio_capacity=)
#   FOLIO_EQUAL_MEMORY=auto psync buffered runs in a memory cgroup limited to
#                           FOLIO_CAPACITY + FOLIO_FIO_ALLOWANCE: "auto" (the default)
#                           when root with a memory controller, else without; "1" fails
#                           if no cgroup can be made; "0" never (the kernel then has all
#                           the machine's memory and the table says so).
#   FOLIO_FIO_ALLOWANCE=16m fio's own memory (heap, thread stacks, its shared stats
#                           segment), which the cgroup charges too; folio's fio process
#                           is not limited, its cache is capped by folio_capacity.
#   FOLIO_READAHEAD=        folio_readahead= for folio (default: the engine's, 16m)
#   FOLIO_ROUNDS=3          rounds; the table shows each engine's median round.
#   FOLIO_ENGINES="folio psync-buffered psync-direct io_uring-direct"
#
# Dropping caches needs root; without it the table says "warm?". Timings on a shared,
# loaded machine are noise: compare on a quiet one.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
job="${1:-$here/jobs/randread-zipf.fio}"
[ $# -gt 0 ] && shift
job="$(cd "$(dirname "$job")" && pwd)/$(basename "$job")"  # the runs cd to $out
capacity="${FOLIO_CAPACITY:-256m}"
allowance="${FOLIO_FIO_ALLOWANCE:-16m}"
equal_memory="${FOLIO_EQUAL_MEMORY:-auto}"
rounds="${FOLIO_ROUNDS:-3}"
read -r -a names <<<"${FOLIO_ENGINES:-folio psync-buffered psync-direct io_uring-direct}"
export FOLIO_FIO_DIR="${FOLIO_FIO_DIR:-$root/target/fio-plugin/data}"
out="$root/target/fio-plugin/compare"
mkdir -p "$FOLIO_FIO_DIR" "$out"
rm -f "$out"/*.json "$out"/*.log "$out"/*.state "$out"/*.peak

[ -f "$root/target/fio-plugin/libfio_folio.so" ] || "$here/build.sh"
engine="external:$root/target/fio-plugin/libfio_folio.so"

if grep -q 'layout\.' "$job" && [ ! -f "$FOLIO_FIO_DIR/layout.15.0" ]; then
    echo "== laying out 1 GiB in $FOLIO_FIO_DIR (psync)"
    (cd "$out" && fio --ioengine=psync "$here/jobs/layout.fio") >"$out/layout.log" 2>&1 ||
        { cat "$out/layout.log"; exit 1; }
fi

# bytes of a size with fio's suffixes (k, m, g; powers of 2)
bytes_of() {
    local n="${1,,}"
    case "$n" in
        *k) echo $((${n%k} << 10)) ;;
        *m) echo $((${n%m} << 20)) ;;
        *g) echo $((${n%g} << 30)) ;;
        *) echo "$n" ;;
    esac
}
limit_bytes=$(($(bytes_of "$capacity") + $(bytes_of "$allowance")))

# The memory cgroup psync buffered runs in (v1 memory.limit_in_bytes, or v2 memory.max).
cgroup=""
cgroup_knob=""
cgroup_peak=""
cgroup_why=""
make_cgroup() {
    local name="folio-fio-compare-$$"
    if [ "$(id -u)" != 0 ]; then
        cgroup_why="not root"
    elif [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
        cgroup="/sys/fs/cgroup/memory/$name"
        cgroup_knob=memory.limit_in_bytes
        cgroup_peak=memory.max_usage_in_bytes
    elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
        cgroup="/sys/fs/cgroup/$name"
        cgroup_knob=memory.max
        cgroup_peak=memory.peak
    else
        cgroup_why="no memory cgroup controller (neither v1 nor v2)"
    fi
    if [ -n "$cgroup" ]; then
        if ! mkdir "$cgroup" 2>/dev/null || ! echo "$limit_bytes" >"$cgroup/$cgroup_knob"; then
            cgroup_why="cannot create $cgroup"
            rmdir "$cgroup" 2>/dev/null || true
            cgroup=""
        fi
    fi
}
remove_cgroup() {
    [ -n "$cgroup" ] || return 0
    for _ in $(seq 50); do rmdir "$cgroup" 2>/dev/null && return 0; sleep 0.1; done
}
trap remove_cgroup EXIT

case "$equal_memory" in
    0) memory_note="psync buffered: NO memory limit (FOLIO_EQUAL_MEMORY=0): the kernel's page cache had all the machine's memory, NOT equal memory" ;;
    *)
        make_cgroup
        if [ -n "$cgroup" ]; then
            memory_note="psync buffered: fio in memory cgroup $cgroup ($cgroup_knob=$limit_bytes: folio_capacity $capacity + $allowance for fio's own memory); folio's fio process unlimited, its cache capped at $capacity"
        elif [ "$equal_memory" = 1 ]; then
            echo "compare.sh: FOLIO_EQUAL_MEMORY=1 but no memory cgroup: $cgroup_why" >&2
            exit 1
        else
            memory_note="psync buffered: NO memory limit ($cgroup_why): the kernel's page cache had all the machine's memory, NOT equal memory"
        fi
        ;;
esac

drop_caches() {
    sync
    if echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then echo cold; else echo "warm?"; fi
}

args_folio=(--ioengine="$engine" --folio_capacity="$capacity")
[ -z "${FOLIO_READAHEAD:-}" ] || args_folio+=(--folio_readahead="$FOLIO_READAHEAD")
args_psync_buffered=(--ioengine=psync --direct=0)
args_psync_direct=(--ioengine=psync --direct=1)
args_io_uring_direct=(--ioengine=io_uring --direct=1)

for round in $(seq "$rounds"); do
    for name in "${names[@]}"; do
        var="args_${name//-/_}[@]"
        state="$(drop_caches)"
        run="$name.$round"
        echo "== round $round/$rounds: $name ($state): fio $(basename "$job")"
        cmd=(fio "${!var}" "$@" --output-format=json --output="$out/$run.json" "$job")
        if [ "$name" = psync-buffered ] && [ -n "$cgroup" ]; then
            echo 0 >"$cgroup/memory.max_usage_in_bytes" 2>/dev/null || true
            # the shell joins the group, then becomes fio: every page fio reads is charged
            (cd "$out" && sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' \
                sh "$cgroup" "${cmd[@]}") >"$out/$run.log" 2>&1 ||
                { cat "$out/$run.log"; exit 1; }
            cat "$cgroup/$cgroup_peak" >"$out/$run.peak" 2>/dev/null || true
        else
            (cd "$out" && "${cmd[@]}") >"$out/$run.log" 2>&1 || { cat "$out/$run.log"; exit 1; }
        fi
        echo "$state" >"$out/$run.state"
    done
done
grep -h '^folio: stats: ' "$out/folio.1.log" "$out/folio.1.json" 2>/dev/null | head -1 || true

python3 - "$out" "$rounds" "$memory_note" "${names[@]}" <<'PY'
import json, os, statistics, sys
out, rounds, note, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]

def run(name, r):
    text = open(f"{out}/{name}.{r}.json").read()
    doc = json.loads(text[text.index("{"):])  # folio's stats line may precede the JSON
    bw = wbw = iops = lat = p99 = 0.0
    errs = 0
    for j in doc["jobs"]:
        for ddir in ("read", "write"):
            d = j[ddir]
            if not d["io_bytes"]:
                continue
            bw += d["bw_bytes"]
            wbw += d["bw_bytes"] if ddir == "write" else 0
            iops += d["iops"]
            lat = max(lat, d["clat_ns"]["mean"])
            p99 = max(p99, d["clat_ns"].get("percentile", {}).get("99.000000", 0))
        errs += j["error"]
    state = open(f"{out}/{name}.{r}.state").read().strip()
    peak = f"{out}/{name}.{r}.peak"
    peak = int(open(peak).read()) if os.path.exists(peak) else None
    return dict(bw=bw, wbw=wbw, iops=iops, lat=lat, p99=p99, errs=errs, state=state, peak=peak)

rows = {}
for n in names:
    runs = sorted((run(n, r) for r in range(1, rounds + 1)), key=lambda x: x["bw"])
    med = runs[(len(runs) - 1) // 2] if len(runs) % 2 else None
    bw_med = statistics.median(x["bw"] for x in runs)
    rows[n] = (med or runs[len(runs) // 2], bw_med, runs)
base = rows["psync-buffered"][1] if "psync-buffered" in rows else None
print(f"{'engine':<16} {'cache':<6} {'MiB/s':>9} {'wr MiB/s':>9} {'IOPS':>10} {'mean us':>9} {'p99 us':>9} {'err':>4} {'vs psync-buf':>12}  rounds MiB/s")
for n in names:
    m, bw_med, runs = rows[n]
    cold = "cold" if all(x["state"] == "cold" for x in runs) else "warm?"
    errs = sum(x["errs"] for x in runs)
    ratio = f"{bw_med / base:>11.2f}x" if base else f"{'-':>12}"
    each = " ".join(f"{x['bw'] / 2**20:.0f}" for x in runs)
    print(f"{n:<16} {cold:<6} {bw_med/2**20:>9.1f} {m['wbw']/2**20:>9.1f} {m['iops']:>10.0f} {m['lat']/1e3:>9.1f} {m['p99']/1e3:>9.1f} {errs:>4} {ratio}  {each}")
print(f"median of {rounds} rounds (engines alternated, each run cold); MiB/s (reads + writes) is the median, wr MiB/s, IOPS and latency the median round's")
print(note)
peaks = [x["peak"] for x in rows.get("psync-buffered", (None, None, []))[2] if x["peak"]]
if peaks:
    print(f"psync buffered cgroup peak usage: {', '.join(f'{p / 2**20:.0f} MiB' for p in peaks)}")
PY
