#!/usr/bin/env bash
# plugins/rocksdb/crashtest.sh - RocksDB's own crash test through the folio plugin: builds
# RocksDB's db_stress for the installed librocksdb.so and runs RocksDB's
# tools/db_crashtest.py in blackbox mode, which starts db_stress, SIGKILLs it after
# --interval seconds, and starts it again on the same database until --duration is over.
# Each db_stress run first checks every key of the database against the expected state
# the previous runs kept (outside the database, through the kernel): a write whose Put
# returned before the kill must be there, with its value.
#
#   plugins/rocksdb/crashtest.sh [--kernel] [--duration S] [--interval S] [--max-key N]
#                                [--min-kills N] [--loose] [-- ARGS...]
#
#   --kernel      the baseline: db_stress on RocksDB's default file system, no plugin
#   --duration S  db_crashtest's --duration (default 180, CRASHTEST_DURATION)
#   --interval S  seconds from a db_stress start to its kill (default 30, CRASHTEST_INTERVAL)
#   --max-key N   db_stress's key space (default 100000, CRASHTEST_MAX_KEY; see below)
#   --min-kills N fail unless N runs were killed during their operations and each kill
#                 verified by a later run against every write that returned (default 1,
#                 CRASHTEST_MIN_KILLS)
#   --loose       leave the four options pinned below to db_crashtest's random choice
#   ARGS          passed to db_crashtest.py, which passes what it does not know to
#                 db_stress (e.g. --sync=1, or --fs_uri='folio://?capacity=1G')
#
# With the plugin, db_stress runs through db_bench_folio.sh (DB_BENCH=db_stress): the
# plugin preloaded, the same librocksdb checked, --fs_uri=folio added, and the plugin's
# default options (every FOLIO_* option variable is unset here; since issue 45 that is
# the user's domain, kept with the segments in the test's own directory). Nothing changes
# RocksDB's durability: the WAL on, WriteOptions::sync as db_crashtest picks it (false in
# 19 runs of 20), so most writes return before they are synced.
#
# Pinned unless --loose, because each makes the check blind to lost writes (none is
# incompatible with the plugin):
#   --test_batches_snapshots=0   db_crashtest picks 0 or 1 once per test; with 1 db_stress
#                                runs BatchedOpsStressTest, whose VerifyDb is empty: a
#                                restart checks nothing the killed run wrote.
#   --disable_wal=0 --manual_wal_flush_one_in=0 --sync_fault_injection=0
#                                RocksDB's defaults (db_crashtest turns each on in some
#                                runs). With any of them on, the run traces its writes and
#                                the next one restores the expected state to the sequence
#                                number the database recovered, accepting any lost suffix:
#                                the loss of a write that returned is not detected.
# --max-key: db_crashtest's default key space (25,000,000 keys in 10 column families, 32
# threads) takes the start's verification longer than a 30 s interval on 2 cores: no run
# reaches its writes before its kill.
#
# Prints each db_stress run (pid, the durability options db_crashtest chose), each kill,
# and at the end: "crashtest: ... N killed ... pass|FAIL" with the failing verification
# message. Exit status 0 on a pass. The database (TEST_TMPDIR) lives in a temporary
# directory, removed at the end (CRASHTEST_KEEP=1 keeps it, with each run's output).
#
# db_stress is built once per librocksdb-dev version into target/crashtest/VERSION/ from
# Debian's rocksdb source package (apt-get source: needs a deb-src line; or set
# ROCKSDB_SRC_DIR to an unpacked tree of the same version). Needs librocksdb-dev
# libgflags-dev dpkg-dev python3 g++. Environment: FOLIO_PLUGIN (default
# target/rocksdb-plugin/libfolio_rocksdb.so), CRASHTEST_JOBS (compile jobs, default 2),
# TMPDIR.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/crashtest"

mode=folio
duration="${CRASHTEST_DURATION:-180}"
interval="${CRASHTEST_INTERVAL:-30}"
max_key="${CRASHTEST_MAX_KEY:-100000}"
min_kills="${CRASHTEST_MIN_KILLS:-1}"
strict=1
passthrough=()
while [ "$#" -gt 0 ]; do
    case "$1" in
        --kernel) mode=kernel ;;
        --duration) duration="$2"; shift ;;
        --interval) interval="$2"; shift ;;
        --max-key) max_key="$2"; shift ;;
        --min-kills) min_kills="$2"; shift ;;
        --loose) strict=0 ;;
        --) shift; passthrough=("$@"); break ;;
        *) echo "crashtest.sh: unknown argument '$1' (db_crashtest's go after --)" >&2; exit 2 ;;
    esac
    shift
done

die() { echo "crashtest.sh: $*" >&2; exit 1; }

# The prerequisites, the version and the source tree: rocksdb-source.sh (shared with
# rocksdb-tests.sh).
# shellcheck source=plugins/rocksdb/rocksdb-source.sh
. "$here/rocksdb-source.sh"
rocksdb_prerequisites python3

# ---- db_stress, built once per librocksdb-dev version ----------------------------------
rocksdb_version
build="$out/$version"
db_stress="$build/db_stress"

if [ ! -x "$db_stress" ]; then
    rocksdb_source_tree
    echo "== build db_stress $version ($build)"
    rm -rf "$build"
    mkdir -p "$build/obj"
    # Debian's definitions (rocksdb_defs: db_stress must see the library's layouts).
    # test_util/testutil.cc is not compiled: Debian's librocksdb.so holds it already (a
    # second copy of its globals: a double free at exit).
    flags=(-std=c++17 -O2 -pthread -I"$src" -I"$src/include" "${rocksdb_defs[@]}")
    started=$SECONDS
    printf '%s\n' "$src"/db_stress_tool/*.cc |
        xargs -P "${CRASHTEST_JOBS:-2}" -I{} sh -c \
            'o="$1"; shift; g++ "$@" -c "$0" -o "$o/$(basename "$0" .cc).o"' {} "$build/obj" "${flags[@]}"
    g++ -pthread -o "$build/db_stress.tmp" "$build"/obj/*.o \
        -lrocksdb -lgflags -lsnappy -lz -lbz2 -llz4 -lzstd
    cp "$src/tools/db_crashtest.py" "$build/db_crashtest.py"
    mv "$build/db_stress.tmp" "$db_stress"
    echo "built $db_stress in $((SECONDS - started)) s"
fi
crashtest_py="$build/db_crashtest.py"

# ---- the run ----------------------------------------------------------------------------
if [ "$mode" = folio ]; then
    plugin="${FOLIO_PLUGIN:-$root/target/rocksdb-plugin/libfolio_rocksdb.so}"
    [ -f "$plugin" ] || die "no plugin at $plugin: build it (docs/rocksdb.md) or set FOLIO_PLUGIN"
    # shellcheck source=plugins/rocksdb/plugin-build.sh
    . "$here/plugin-build.sh"
    [ -n "${FOLIO_PLUGIN:-}" ] || plugin_default_check "$plugin"
    export FOLIO_PLUGIN="$(cd "$(dirname "$plugin")" && pwd)/$(basename "$plugin")"
fi
# The plugin's defaults: no option from the environment (ci.sh exports some).
for v in $(compgen -v FOLIO_); do
    [ "$v" = FOLIO_PLUGIN ] || unset "$v"
done

work="$(mktemp -d "${TMPDIR:-/tmp}/folio-crashtest.XXXXXX")"
# The segment of the database (segment_name=auto: each restart adopts the cache the
# killed run left) outlives the runs: in a directory of /dev/shm of this test's own,
# removed with it.
segments="$(mktemp -d /dev/shm/folio-crashtest.XXXXXX)"
export FOLIO_SEGMENT_DIR="$segments"
if [ "${CRASHTEST_KEEP:-0}" = 1 ]; then
    trap 'rm -rf "$segments"; echo "kept $work"' EXIT
else
    trap 'rm -rf "$work" "$segments"' EXIT
fi
mkdir "$work/logs"

# The stress command db_crashtest starts: one executable (it takes no arguments of its
# own). It copies the run's output to logs/PID.log (PID: the pid db_crashtest prints,
# each exec keeping it), with stdout line-buffered, else a SIGKILL loses what stdio held.
# It execs, so that db_crashtest's SIGKILL, sent to the pid it started, hits db_stress.
wrapper="$work/db_stress_run"
if [ "$mode" = folio ]; then
    run_line="DB_BENCH='$db_stress' exec stdbuf -oL '$here/db_bench_folio.sh' \"\$@\""
else
    run_line="exec stdbuf -oL '$db_stress' \"\$@\""
fi
cat >"$wrapper" <<EOF
#!/usr/bin/env bash
log='$work/logs/'\$\$.log
exec > >(tee -a "\$log") 2> >(tee -a "\$log" >&2)
$run_line
EOF
chmod +x "$wrapper"

pins=()
[ "$strict" = 0 ] || pins=(--test_batches_snapshots=0 --disable_wal=0
    --manual_wal_flush_one_in=0 --sync_fault_injection=0)

echo "== db_crashtest.py blackbox ($mode): duration $duration s, interval $interval s," \
    "max_key $max_key${pins:+, ${pins[*]}}${passthrough:+, ${passthrough[*]}}"
started=$SECONDS
# What db_crashtest.py prints, its long command lines cut to the options that decide
# what a kill may lose; each line with the seconds since the start.
show() {
    local line t pid opts
    while IFS= read -r line; do
        t="$(printf '[%4d s]' $((SECONDS - started)))"
        case "$line" in
            "Running db_stress with pid="*)
                pid="${line#Running db_stress with pid=}"
                pid="${pid%%:*}"
                opts="$(grep -oE -- '--(sync|disable_wal|manual_wal_flush_one_in|sync_fault_injection|test_batches_snapshots|recycle_log_file_num|mmap_read|use_direct_reads|use_direct_io_for_flush_and_compaction|avoid_flush_during_recovery|atomic_flush)=[^ ]*' <<<"$line" | tr '\n' ' ')"
                echo "$t db_stress pid $pid: $opts"
                ;;
            "KILLED "*) echo "$t SIGKILL pid ${line#KILLED }" ;;
            "") ;;
            *) echo "$t $line" ;;
        esac
    done
}
set +e
(cd "$work" && TEST_TMPDIR="$work" python3 -u "$crashtest_py" blackbox \
    --stress_cmd="$wrapper" --duration="$duration" --interval="$interval" \
    --max_key="$max_key" "${pins[@]}" "${passthrough[@]}") 2>&1 |
    tee "$work/db_crashtest.log" | show
rc="${PIPESTATUS[0]}"
set -e
elapsed=$((SECONDS - started))

# ---- the verdict -----------------------------------------------------------------------
mapfile -t pids < <(sed -n 's/^Running db_stress with pid=\([0-9]*\):.*/\1/p' "$work/db_crashtest.log")
runs="${#pids[@]}"
kills="$(grep -c '^KILLED ' "$work/db_crashtest.log" || true)"
verified=0        # runs whose start's verification passed
unfinished=0      # runs killed before their start's verification finished
killed_in_ops=0   # kills of runs that had reached their operations, verified by a later run
exact=0           # of those, verified against every write that returned (see the pins)
failed_run=""
opt_of() {  # opt_of PID NAME: the value of --NAME= on PID's command line
    grep "^Running db_stress with pid=$1:" "$work/db_crashtest.log" |
        grep -oE -- " --$2=[^ ]*" | head -1 | cut -d= -f2
}
# A run killed before its verification finished wrote nothing: the next run that
# finishes one verifies the last kill of a run that wrote.
pending=""        # that kill's pid, not yet verified
for i in "${!pids[@]}"; do
    pid="${pids[$i]}"
    log="$work/logs/$pid.log"
    [ -f "$log" ] || continue
    if [ -z "$failed_run" ] && grep -q "Crash-recovery verification failed" "$log"; then
        failed_run="run $((i + 1)) (pid $pid) failed the crash-recovery verification"
        [ -z "$pending" ] || failed_run+=" of what the kill of pid $pending left"
    fi
    if grep -q "^Crash-recovery verification passed" "$log"; then
        verified=$((verified + 1))
        if [ -n "$pending" ]; then
            killed_in_ops=$((killed_in_ops + 1))
            if [ "$(opt_of "$pid" test_batches_snapshots)" = 0 ] &&
                [ "$(opt_of "$pending" disable_wal)" = 0 ] &&
                [ "$(opt_of "$pending" manual_wal_flush_one_in)" = 0 ] &&
                [ "$(opt_of "$pending" sync_fault_injection)" = 0 ]; then
                exact=$((exact + 1))
            fi
            pending=""
        fi
    elif grep -q "^KILLED $pid\$" "$work/db_crashtest.log"; then
        unfinished=$((unfinished + 1))
    fi
    if grep -q "^KILLED $pid\$" "$work/db_crashtest.log" &&
        grep -q "Starting database operations" "$log"; then
        pending="$pid"
    fi
done

verdict=pass
why=""
if [ -n "$failed_run" ]; then
    verdict=FAIL; why="$failed_run"
elif [ "$rc" != 0 ]; then
    verdict=FAIL; why="db_crashtest.py exited with $rc"
elif [ $((verified + unfinished)) != "$runs" ]; then
    verdict=FAIL; why="$verified of $runs runs passed their start's verification, $unfinished killed before its end"
elif [ "$exact" -lt "$min_kills" ]; then
    verdict=FAIL; why="only $exact kills were verified against every write that returned (want $min_kills)"
fi
early=""
[ "$unfinished" = 0 ] || early=" ($unfinished runs killed before their verification ended)"
echo "crashtest: $mode, $runs db_stress runs in $elapsed s, $kills killed (SIGKILL), $((runs > 0 ? runs - 1 : 0)) restarts;" \
    "$killed_in_ops kills during operations verified by a later run, $exact of them against" \
    "every write that returned$early: $verdict${why:+ ($why)}"
if [ "$verdict" != pass ]; then
    # The verification's own words, else any error a run printed.
    msg="$(cat "$work"/logs/*.log 2>/dev/null | grep -aE "[Vv]erification failed" | head -5)"
    [ -n "$msg" ] || msg="$(cat "$work"/logs/*.log 2>/dev/null |
        grep -aE "Corruption|Assertion|Error|error:|db_bench_folio:" | head -5)"
    echo "crashtest: the failing message:"
    cut -c1-400 <<<"${msg:-(none printed)}" | sed 's/^/    /'
fi
[ "$verdict" = pass ]
