#!/usr/bin/env bash
# kept_memory.sh - issue 42, done-when 4, by hand: a database of ~3 GiB through the plugin
# at its defaults (db_bench fillrandom, then readrandom), then a program that allocates
# and touches, 64 MiB at a time, the memory that was available (MemAvailable) before the
# run. After db_bench exits its named segment stays in the user's home
# (/dev/shm/folio-<uid>) held by its steward; the allocation must succeed without an OOM
# kill, and the segment must shrink to make room (docs/persistence.md, "Kept memory").
#
#   plugins/rocksdb/kept_memory.sh
#
# Prints, at each step (before, during the run every 20 s, after the exit, during the
# allocation every 2 s, after it): `free -m`, MemAvailable, `folio-stat list` of the home
# and the segment's allocated size (`du`); the allocator's exit status and any OOM kill
# `dmesg` logged since the start. The allocator runs with oom_score_adj 1000 (the first
# the OOM killer picks, so that nothing else dies if it loses). Removes the database and
# the segment at the end (the database only if it made it). Ends with "kept_memory: pass" or "kept_memory: FAIL (why)".
#
# Environment: NUM (keys, default 3,000,000) and VALUE_SIZE (bytes, default 1000): about
# 3 GiB of tables, stored uncompressed; READS (readrandom's reads, default 200,000);
# DB (default a new directory under /var/tmp); FOLIO_STAT (default target/release/
# folio-stat, built if missing); the plugin's FOLIO_* options (none: its defaults).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
num="${NUM:-3000000}"
value_size="${VALUE_SIZE:-1000}"
reads="${READS:-200000}"
made_db=0
if [ -z "${DB:-}" ]; then
    DB="$(mktemp -d /var/tmp/folio-kept-memory-XXXXXX)"
    made_db=1
fi
db="$DB"
home="/dev/shm/folio-$(id -u)"
stat_bin="${FOLIO_STAT:-$root/target/release/folio-stat}"
[ -x "$stat_bin" ] || (cd "$root" && cargo build --release -p folio-stat)

mib_available() { awk '/^MemAvailable:/ { printf "%d", $2 / 1024 }' /proc/meminfo; }
show() {  # show LABEL
    echo "== $1 ($(date -u +%H:%M:%S))"
    free -m
    echo "MemAvailable: $(mib_available) MiB"
    "$stat_bin" list --dir "$home" 2>/dev/null || true
    for s in "$home"/*; do
        [ -f "$s" ] && echo "du $(du -m "$s" | cut -f1) MiB $s"
    done
    true
}

dmesg_mark="$(dmesg 2>/dev/null | wc -l || echo 0)"
segments_before="$(ls "$home" 2>/dev/null | tr '\n' ' ' || true)"
available_before="$(mib_available)"
show "before the run: MemAvailable $available_before MiB"

"$here/db_bench_folio.sh" --db="$db" --benchmarks=fillrandom,readrandom --num="$num" \
    --value_size="$value_size" --compression_type=none --reads="$reads" \
    --threads=1 --statistics=0 >"$db.db_bench.log" 2>&1 &
bench=$!
while kill -0 "$bench" 2>/dev/null; do
    sleep 20
    kill -0 "$bench" 2>/dev/null && show "during db_bench (database $(du -sm "$db" | cut -f1) MiB)"
done
if ! wait "$bench"; then
    tail -20 "$db.db_bench.log"
    echo "kept_memory: FAIL (db_bench failed)"
    exit 1
fi
grep -E "^(fillrandom|readrandom)" "$db.db_bench.log" || true
sleep 3  # the keeper's goodbye and the steward's first tick
show "after db_bench exited (database $(du -sm "$db" | cut -f1) MiB)"
segment=""
for s in "$home"/*; do
    name="$(basename "$s")"
    case " $segments_before " in *" $name "*) continue ;; esac
    segment="$s"
done
[ -n "$segment" ] || { echo "kept_memory: FAIL (no kept segment in $home)"; exit 1; }
kept_mib="$(du -m "$segment" | cut -f1)"
echo "kept segment: $segment, $kept_mib MiB allocated"

echo "== allocating $available_before MiB (MemAvailable before the run), 64 MiB at a time"
python3 - "$available_before" <<'EOF' &
import sys, time
with open("/proc/self/oom_score_adj", "w") as f:
    f.write("1000")
want = int(sys.argv[1]) << 20
chunk = 64 << 20
held = []
started = time.time()
while len(held) * chunk < want:
    b = bytearray(chunk)
    b[::4096] = b"\x01" * len(range(0, chunk, 4096))  # touch every page
    held.append(b)
print(f"allocated and touched {len(held) * chunk >> 20} MiB in {time.time() - started:.1f} s",
      flush=True)
time.sleep(5)
EOF
alloc=$!
while kill -0 "$alloc" 2>/dev/null; do
    sleep 2
    kill -0 "$alloc" 2>/dev/null && {
        echo "-- during the allocation: MemAvailable $(mib_available) MiB, segment $(du -m "$segment" 2>/dev/null | cut -f1 || echo gone) MiB"
    }
done
status=0
wait "$alloc" || status=$?
echo "allocator exit status: $status"
show "after the allocation"
oom="$(dmesg 2>/dev/null | tail -n +"$((dmesg_mark + 1))" | grep -iE "out of memory|oom-kill|killed process" || true)"
[ -n "$oom" ] && echo "dmesg since the start: $oom"
after_mib="$(du -m "$segment" 2>/dev/null | cut -f1 || echo 0)"
[ -e "$segment" ] || after_mib=0
echo "kept segment: $kept_mib MiB after db_bench, $after_mib MiB after the allocation"

"$stat_bin" remove --dir "$home" "$(basename "$segment")" 2>/dev/null || rm -f "$segment"
[ "$made_db" = 1 ] && rm -rf "$db"
rm -f "$db.db_bench.log"
if [ "$status" != 0 ]; then
    echo "kept_memory: FAIL (the allocator exited with $status)"
    exit 1
fi
if [ -n "$oom" ]; then
    echo "kept_memory: FAIL (an OOM kill)"
    exit 1
fi
if [ "$after_mib" -ge "$kept_mib" ]; then
    echo "kept_memory: FAIL (the segment did not shrink)"
    exit 1
fi
echo "kept_memory: pass"
