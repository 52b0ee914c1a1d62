#!/usr/bin/env bash
# plugins/fio/compare.sh - runs one fio job file on folio, psync buffered, psync direct
# and io_uring direct, one after the other in one invocation, each cold (the kernel's
# page cache dropped before each; folio's cache is new in each fio process), and prints a
# table: bandwidth, IOPS, mean and p99 completion latency, and each engine's bandwidth
# as a ratio to psync buffered.
#
#   plugins/fio/compare.sh [JOB] [FIO_ARGS...]
#   plugins/fio/compare.sh plugins/fio/jobs/randread-zipf.fio --runtime=20
#
# JOB defaults to jobs/randread-zipf.fio; FIO_ARGS go to every run (before the job file,
# so the job file's own settings win). The files are laid out with jobs/layout.fio in
# FOLIO_FIO_DIR (default target/fio-plugin/data) if missing. Memory: folio's cache is
# FOLIO_CAPACITY (default 256m); psync buffered uses whatever page cache the kernel has,
# so give the machine (or a cgroup) that much memory for an equal-memory comparison.
# Dropping caches needs root; without it the table says "warm?". Timings on a shared,
# loaded machine are noise: compare on a quiet one.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
job="${1:-$here/jobs/randread-zipf.fio}"
[ $# -gt 0 ] && shift
capacity="${FOLIO_CAPACITY:-256m}"
export FOLIO_FIO_DIR="${FOLIO_FIO_DIR:-$root/target/fio-plugin/data}"
out="$root/target/fio-plugin/compare"
mkdir -p "$FOLIO_FIO_DIR" "$out"

[ -f "$root/target/fio-plugin/libfio_folio.so" ] || "$here/build.sh"
engine="external:$root/target/fio-plugin/libfio_folio.so"

if [ ! -f "$FOLIO_FIO_DIR/layout.15.0" ]; then
    echo "== laying out 1 GiB in $FOLIO_FIO_DIR (psync)"
    fio --ioengine=psync "$here/jobs/layout.fio" >"$out/layout.log" 2>&1 ||
        { cat "$out/layout.log"; exit 1; }
fi

drop_caches() {
    sync
    if echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then echo cold; else echo "warm?"; fi
}

names=(folio psync-buffered psync-direct io_uring-direct)
args_folio=(--ioengine="$engine" --folio_capacity="$capacity")
args_psync_buffered=(--ioengine=psync --direct=0)
args_psync_direct=(--ioengine=psync --direct=1)
args_io_uring_direct=(--ioengine=io_uring --direct=1)

for name in "${names[@]}"; do
    var="args_${name//-/_}[@]"
    state="$(drop_caches)"
    echo "== $name ($state): fio $(basename "$job")"
    fio "${!var}" "$@" --output-format=json --output="$out/$name.json" "$job" \
        >"$out/$name.log" 2>&1 || { cat "$out/$name.log"; exit 1; }
    echo "$state" >"$out/$name.state"
done
grep -h '^folio: stats: ' "$out/folio.log" "$out/folio.json" 2>/dev/null | head -1 || true

python3 - "$out" "${names[@]}" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
rows = []
for n in names:
    text = open(f"{out}/{n}.json").read()
    doc = json.loads(text[text.index("{"):])  # folio's stats line may precede the JSON
    bw = iops = lat = p99 = 0.0
    errs = 0
    for j in doc["jobs"]:
        r = j["read"]
        bw += r["bw_bytes"]
        iops += r["iops"]
        lat = max(lat, r["clat_ns"]["mean"])
        p99 = max(p99, r["clat_ns"].get("percentile", {}).get("99.000000", 0))
        errs += j["error"]
    rows.append((n, open(f"{out}/{n}.state").read().strip(), bw, iops, lat, p99, errs))
base = rows[1][2] or 1
print(f"{'engine':<16} {'cache':<6} {'MiB/s':>9} {'IOPS':>10} {'mean us':>9} {'p99 us':>9} {'err':>4} {'vs psync-buf':>12}")
for n, st, bw, iops, lat, p99, errs in rows:
    print(f"{n:<16} {st:<6} {bw/2**20:>9.1f} {iops:>10.0f} {lat/1e3:>9.1f} {p99/1e3:>9.1f} {errs:>4} {bw/base:>11.2f}x")
PY
