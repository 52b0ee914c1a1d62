#!/usr/bin/env bash
# plugins/rocksdb/ci.sh - builds the folio RocksDB plugin with cmake and runs a small
# unmodified db_bench through it:
#   1. fillseq (2 DBs) with RocksDB's default file system;
#   2. through the plugin (db_bench_folio.sh, the documented command): readseq with
#      --verify_checksum=1, readrandom with --verify_checksum=1, and readseq with
#      --use_direct_reads=1;
#   3. checks that each completed, that every key was found, and that folio served the
#      reads: its printed stats show reads, hits and pages inserted, and no errors, and
#      name every field of folio_stats in include/folio.h;
#   4. checks that a bad option fails with a message instead of a crash.
# Ends with "ci.sh: N passed, M failed". Needs rocksdb-tools librocksdb-dev cmake g++
# (installed here when missing and running as root with apt-get) and cargo.
#
# Environment: FOLIO_PLUGIN_BUILD_DIR (default target/rocksdb-plugin), TMPDIR.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${FOLIO_PLUGIN_BUILD_DIR:-$root/target/rocksdb-plugin}"
started=$SECONDS
passed=0
failed=0

check() {  # check DESCRIPTION COMMAND...
    local what="$1"
    shift
    if "$@"; then
        passed=$((passed + 1))
        echo "ok: $what"
    else
        failed=$((failed + 1))
        echo "FAIL: $what"
    fi
}

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v g++ >/dev/null || missing+=(g++)
command -v db_bench >/dev/null || missing+=(rocksdb-tools)
[ -f /usr/include/rocksdb/file_system.h ] || missing+=(librocksdb-dev)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "== apt-get install ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "ci.sh: missing ${missing[*]}: apt-get install -y rocksdb-tools librocksdb-dev cmake g++" >&2
        exit 1
    fi
fi

echo "== build the plugin ($build)"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2
(cd "$build" && ctest --output-on-failure)

work="$(mktemp -d "${TMPDIR:-/tmp}/folio-rocksdb-ci.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export FOLIO_PLUGIN="$build/libfolio_rocksdb.so"
export FOLIO_CAPACITY=256M
export FOLIO_BACKEND=auto
unset FOLIO_STATS FOLIO_VERBOSE FOLIO_HINTS FOLIO_READAHEAD_MAX FOLIO_PREAD_THREADS
bench=(--db="$work/db" --num_multi_db=2 --num=10000 --value_size=8192 --threads=2)

echo "== fillseq with the default file system"
db_bench --benchmarks=fillseq,flush "${bench[@]}" --threads=1 >"$work/fill.log" 2>&1 ||
    { cat "$work/fill.log"; exit 1; }
grep -E "^fillseq" "$work/fill.log"

# run NAME FLAGS...: db_bench through the plugin, its stats in $work/NAME.stats.
run() {
    local name="$1"
    shift
    echo "== $name through folio"
    local rc=0
    FOLIO_STATS="$work/$name.stats" "$here/db_bench_folio.sh" "${bench[@]}" \
        --use_existing_db=1 --verify_checksum=1 --fs_uri='folio://?readahead_max=2M' "$@" \
        >"$work/$name.log" 2>&1 || rc=$?
    grep -E "^(readseq|readrandom) " "$work/$name.log" || true
    cat "$work/$name.stats" 2>/dev/null || true
    check "$name: db_bench exits 0" [ "$rc" = 0 ]
    [ "$rc" = 0 ] || tail -20 "$work/$name.log"
}

stat_of() {  # stat_of NAME KEY -> the value of KEY= in NAME's stats (empty if absent)
    grep -o " $2=[0-9]*" "$work/$1.stats" 2>/dev/null | head -1 | cut -d= -f2
}

stats_fields() {  # the fields of folio_stats, as include/folio.h declares them
    sed -n '/^typedef struct folio_stats {/,/^} folio_stats;/p' "$root/include/folio.h" |
        sed -nE 's/^ +uint(64|32)_t ([a-z_0-9]+);$/\2/p'
}

prints_every_stat() {  # prints_every_stat NAME: NAME's stats name every field of folio_stats
    local fields missing=() field
    fields="$(stats_fields)"
    [ "$(wc -w <<<"$fields")" -gt 30 ] || { echo "folio_stats not found in folio.h"; return 1; }
    for field in $fields; do
        grep -q "^folio: stats:.* $field=" "$work/$1.stats" 2>/dev/null ||
            grep -q "^folio: stats: $field=" "$work/$1.stats" 2>/dev/null ||
            missing+=("$field")
    done
    [ "${#missing[@]}" = 0 ] || { echo "not in $1's stats: ${missing[*]}"; return 1; }
}

positive() { [ -n "$1" ] && [ "$1" -gt 0 ]; }
zero() { [ "$1" = 0 ]; }

served_by_folio() {
    local name="$1"
    check "$name: folio opened table files" positive "$(stat_of "$name" table_files_opened)"
    check "$name: RocksDB read through folio" positive "$(stat_of "$name" reads)"
    check "$name: folio served hits" positive "$(stat_of "$name" hits)"
    check "$name: folio read pages from the files" positive "$(stat_of "$name" pages_inserted)"
    check "$name: no read errors" zero "$(stat_of "$name" read_errors)"
    check "$name: no I/O errors" zero "$(stat_of "$name" io_errors)"
    check "$name: the stats name every field of folio_stats" prints_every_stat "$name"
}

run readseq --benchmarks=readseq
served_by_folio readseq
check "readseq: read every key (2 threads x 2 DBs x 10000)" \
    grep -qE "^readseq .* 40000 operations" "$work/readseq.log"

run readrandom --benchmarks=readrandom
served_by_folio readrandom
check "readrandom: found every key it looked up" \
    grep -qE "\(([0-9]+) of \1 found\)" "$work/readrandom.log"

run readseq_direct --benchmarks=readseq --use_direct_reads=1
served_by_folio readseq_direct

echo "== a bad option fails with a message, not a crash"
rc=0
"$here/db_bench_folio.sh" "${bench[@]}" --use_existing_db=1 --benchmarks=readseq \
    --fs_uri='folio://?capcity=1G' >"$work/bad.log" 2>&1 || rc=$?
check "bad option: exit status 1" [ "$rc" = 1 ]
check "bad option: says which" grep -q "unknown option 'capcity'" "$work/bad.log"

echo "ci.sh: $passed passed, $failed failed ($((SECONDS - started)) s)"
[ "$failed" = 0 ]
