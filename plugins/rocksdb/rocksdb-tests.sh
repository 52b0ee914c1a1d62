#!/usr/bin/env bash
# plugins/rocksdb/rocksdb-tests.sh - RocksDB's own unit tests through the folio plugin:
# builds RocksDB's gtest binaries for the installed librocksdb.so from Debian's source
# package, runs each on RocksDB's default file system and then with the plugin preloaded
# and TEST_FS_URI=folio (DBTestBase's tests take their file system from it through
# test::CreateEnvFromSystem), and reports the tests that fail only through folio. Each
# such test runs again alone on both, to tell a flaky test from a failure of the plugin:
# it counts as a folio failure only if it passes alone on the default file system and
# fails alone through folio.
#
#   plugins/rocksdb/rocksdb-tests.sh [--build-only] [--folio-only] [--all] [BINARY[=FILTER]...]
#
#   BINARY        a test binary of RocksDB's, named as its source file (db_wal_test,
#                 db_basic_test, env_basic_test, db_test, prefetch_test, ...; the
#                 default: the CI set below); =FILTER is a gtest filter
#                 (--gtest_filter) for that binary
#   --build-only  build the binaries and stop
#   --folio-only  skip the whole run on the default file system (its result does not
#                 change with the plugin: docs/rocksdb.md has it); every test that fails
#                 through folio still runs again alone on both
#   --all         every binary of docs/rocksdb.md's table, whole (by hand: ~2 h on this
#                 machine through folio alone; see the times below)
#
# Prints, per binary, the tests run, failed on the default file system and failed
# through folio, the tests that fail only through folio, and at the end
# "rocksdb-tests: N binaries, M tests fail only through folio: pass|FAIL". Exit 0 on a pass.
#
# env_basic_test: RocksDB 7.8.3's reads TEST_FS_URI as an *Env* URI (Env::CreateFromUri
# with the URI in the env_uri slot), which finds no Env named folio; the script builds
# it with that one call patched to pass the URI as a FileSystem URI, so that its
# CustomEnv tests really run on the plugin (the script checks that the CustomEnv cases
# ran and that folio's stats at exit show files opened through it).
#
# The binaries are built once per librocksdb-dev version into target/rocksdb-tests/VERSION/
# from the source tree crashtest.sh unpacks (target/crashtest/src; fetched here the same
# way when missing: apt-get source needs a deb-src line, or set ROCKSDB_SRC_DIR); the
# prerequisites, the tree and the definitions of Debian's librocksdb build come from
# rocksdb-source.sh, shared with crashtest.sh; the tests link Debian's gtest
# (libgtest-dev).
#
# Times on this machine (2 cores shared with other builds: load average 12-30 during
# these measurements, so an idle machine is faster), -O1, 2 jobs: the common objects and
# env_basic_test 21 s, then db_basic_test 27 s, db_wal_test 29 s, db_secondary_test
# 31 s (the CI set: ~2 min); db_test 136 s, db_test2 161 s, the others 17-68 s each.
# Runs, seconds on the default file system + through folio (docs/rocksdb.md has the
# table with each one's results):
#   env_basic_test        0 + 1       db_secondary_test     16 + 20
#   db_basic_test       204 + 269     db_wal_test (CI's filter below) 112 + 141
#   db_blob_basic_test    5 + 9       db_log_iter_test      34 + 30
#   corruption_test      62 + 49      prefetch_test         48 + 52
#   db_io_failure_test   40 + 45      db_flush_test         69 + 44
#   fault_injection_test 105 + 157    external_sst_file_basic_test 92 + 106
#   db_iterator_test    401 + 294    db_test2             349 + 251
#   db_compaction_test  548 + 477    db_test             1712 + 2093
#   db_wal_test (whole, 1,317 tests) 678 + 901
# The CI set in all: ~2 min to build and ~13 min to run (under that load); --all: about
# 2.5 h (both file systems: 73 min + 80 min), --folio-only --all about 1.3 h.
# Through folio DBTestBase's tests that reopen a database many times take longer: each
# reopen closes the WAL, and the plugin's Close syncs a file with unsynced writes
# (docs/rocksdb.md, "Close syncs"), where the default file system's does not.
#
# The logs of the last run of each binary stay in target/rocksdb-tests/logs/.
#
# Environment: FOLIO_PLUGIN (default target/rocksdb-plugin/libfolio_rocksdb.so),
# ROCKSDB_TESTS_JOBS (compile jobs, default 2), TMPDIR (the tests' TEST_TMPDIR lives in a
# temporary directory under it, removed at the end).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/rocksdb-tests"

# The CI set (.ci/run): the binaries named by issue 43. db_wal_test with a filter: its
# 1,280 parameterised WAL-corruption recovery tests (Wal/DBWALTestWithParams*: 2 x 4
# corruption kinds x 10 WAL offsets x 2 compressions, x 4 recovery modes for the
# second) take most of its time; CI runs every other test and the parameter indices
# ending in 0 (each corruption kind, truncated or not, offsets 0 and 5, no compression:
# 128 of the 1,280). The whole binary runs by hand (docs/rocksdb.md has its result).
ci_set=(env_basic_test db_basic_test db_secondary_test
    'db_wal_test=DBWALTest.*:DBWALTestWithEnrichedEnv.*:DBRecoveryTestBlobError/*:Wal/*0')

# The whole table (docs/rocksdb.md), shortest first.
all_set=(env_basic_test db_secondary_test db_blob_basic_test db_log_iter_test
    db_io_failure_test prefetch_test corruption_test db_flush_test fault_injection_test
    external_sst_file_basic_test db_basic_test db_iterator_test db_test2
    db_compaction_test db_test db_wal_test)

build_only=0
folio_only=0
chosen=()
while [ "$#" -gt 0 ]; do
    case "$1" in
        --build-only) build_only=1 ;;
        --folio-only) folio_only=1 ;;
        --all) chosen+=("${all_set[@]}") ;;
        -*) echo "rocksdb-tests.sh: unknown argument '$1'" >&2; exit 2 ;;
        *) chosen+=("$1") ;;
    esac
    shift
done
[ "${#chosen[@]}" -gt 0 ] || chosen=("${ci_set[@]}")

die() { echo "rocksdb-tests.sh: $*" >&2; exit 1; }

# ---- the prerequisites and the source tree: rocksdb-source.sh, as crashtest.sh ------------
# shellcheck source=plugins/rocksdb/rocksdb-source.sh
. "$here/rocksdb-source.sh"
rocksdb_prerequisites libgtest-dev
rocksdb_version
rocksdb_source_tree

# ---- the binaries, built once per version ----------------------------------------------
build="$out/$version"
mkdir -p "$build/obj" "$build/patched"
# Debian's definitions (rocksdb_defs: the tests must see the library's layouts).
flags=(-std=c++17 -O1 -pthread -I"$src" -I"$src/include" "${rocksdb_defs[@]}")
common=(test_util/testharness.cc test_util/mock_time_env.cc db/db_test_util.cc
    table/mock_table.cc)

compile() {  # compile SOURCE OBJECT: once (the object is kept until the version changes)
    [ -f "$2" ] && return 0
    g++ "${flags[@]}" -c "$1" -o "$2.tmp" && mv "$2.tmp" "$2"
}

source_of() {  # source_of BINARY: its main source file (env_basic_test: the patched copy)
    local bin="$1" file
    if [ "$bin" = env_basic_test ]; then
        file="$build/patched/env_basic_test.cc"
        if [ ! -f "$file" ]; then
            # GetTestFS: the URI in the fs_uri slot of Env::CreateFromUri, not env_uri's.
            sed 's|Env::CreateFromUri(ConfigOptions(), uri, "", &fs_env, &fs_env_guard)|Env::CreateFromUri(ConfigOptions(), "", uri, \&fs_env, \&fs_env_guard)|' \
                "$src/env/env_basic_test.cc" >"$file.tmp"
            grep -q 'ConfigOptions(), "", uri, &fs_env' "$file.tmp" ||
                die "could not patch env_basic_test.cc's GetTestFS (rocksdb $upstream)"
            mv "$file.tmp" "$file"
        fi
        echo "$file"
        return
    fi
    # Not ./.pc: quilt's copies of the files Debian's patches change, as they were before.
    file="$(cd "$src" && find . \( -path ./third-party -o -path ./.pc \) -prune -o \
        -name "$bin.cc" -print | head -1)"
    [ -n "$file" ] || die "no $bin.cc in $src"
    echo "$src/${file#./}"
}

extras_of() {  # extras_of BINARY: the sources it needs beyond the common ones
    case "$1" in
        db_test) echo monitoring/thread_status_updater_debug.cc ;;
        db_secondary_test) echo db/db_with_timestamp_test_util.cc ;;
    esac
}

build_binary() {  # build_binary BINARY
    local bin="$1" s objs=() t0=$SECONDS
    [ -x "$build/$bin" ] && return 0
    echo "== build $bin ($build)"
    local sources=("${common[@]/#/$src/}")
    for s in $(extras_of "$bin"); do sources+=("$src/$s"); done
    sources+=("$(source_of "$bin")")
    for s in "${sources[@]}"; do objs+=("$build/obj/$(basename "$s" .cc).o"); done
    local i pids=() jobs="${ROCKSDB_TESTS_JOBS:-2}"
    for i in "${!sources[@]}"; do
        compile "${sources[$i]}" "${objs[$i]}" &
        pids+=($!)
        if [ "${#pids[@]}" -ge "$jobs" ]; then
            wait "${pids[0]}" || die "compiling ${sources[$i]} failed"
            pids=("${pids[@]:1}")
        fi
    done
    for i in "${pids[@]}"; do wait "$i" || die "compiling for $bin failed"; done
    g++ -pthread -o "$build/$bin.tmp" "${objs[@]}" \
        -lrocksdb -lgtest -lgflags -lsnappy -lz -lbz2 -llz4 -lzstd
    mv "$build/$bin.tmp" "$build/$bin"
    echo "built $bin in $((SECONDS - t0)) s"
}

for spec in "${chosen[@]}"; do
    build_binary "${spec%%=*}"
done
[ "$build_only" = 0 ] || exit 0

# ---- the runs --------------------------------------------------------------------------
plugin="${FOLIO_PLUGIN:-$root/target/rocksdb-plugin/libfolio_rocksdb.so}"
[ -f "$plugin" ] || die "no plugin at $plugin: build it (plugins/rocksdb/ci.sh, docs/rocksdb.md)"
# shellcheck source=plugins/rocksdb/plugin-build.sh
. "$here/plugin-build.sh"
[ -n "${FOLIO_PLUGIN:-}" ] || plugin_default_check "$plugin"
plugin="$(cd "$(dirname "$plugin")" && pwd)/$(basename "$plugin")"
# The plugin's defaults: no option from the environment (ci.sh exports some). Since
# issue 45 that is the user's domain, whose files go with the segments in this run's
# directory (FOLIO_SEGMENT_DIR below): its steward leaves when the directory goes.
for v in $(compgen -v FOLIO_); do unset "$v"; done
unset TEST_ENV_URI TEST_FS_URI

# The runs' output stays in target/rocksdb-tests/logs/ (each binary's replaced by its
# next run); the databases live in a temporary directory, removed at the end.
logs="$out/logs"
mkdir -p "$logs"
work="$(mktemp -d "${TMPDIR:-/tmp}/folio-rocksdb-tests.XXXXXX")"
# The persistent caches' segments (one per test process) in a directory of their own.
segments="$(mktemp -d /dev/shm/folio-rocksdb-tests.XXXXXX)"
trap 'rm -rf "$work" "$segments"' EXIT

run() {  # run MODE BINARY FILTER LOG: one run; MODE default or folio
    local mode="$1" bin="$2" filter="$3" log="$4" dir
    dir="$(mktemp -d "$work/db.XXXXXX")"
    local env=(TEST_TMPDIR="$dir")
    [ "$mode" = default ] ||
        env+=(LD_PRELOAD="$plugin" TEST_FS_URI=folio FOLIO_STATS=1 FOLIO_SEGMENT_DIR="$segments")
    (cd "$dir" && env "${env[@]}" "$build/$bin" ${filter:+--gtest_filter="$filter"}) \
        >"$log" 2>&1 || true
    rm -rf "$dir"
}

# The tests a run started and did not pass (failed, or still running when it crashed).
failures() {
    awk '/^\[ RUN      \] / { run[$4] = 1 }
         /^\[       OK \] / || /^\[  SKIPPED \] / { delete run[$4] }
         END { for (t in run) print t }' "$1" | sort
}
ran() { grep -c '^\[ RUN      \] ' "$1" || true; }

only_folio_total=0
summary=()
for spec in "${chosen[@]}"; do
    bin="${spec%%=*}"
    filter=""
    [ "$spec" = "$bin" ] || filter="${spec#*=}"
    t0=$SECONDS
    if [ "$folio_only" = 0 ]; then
        run default "$bin" "$filter" "$logs/$bin.default.log"
    else
        : >"$logs/$bin.default.log"
    fi
    t1=$SECONDS
    run folio "$bin" "$filter" "$logs/$bin.folio.log"
    t2=$SECONDS
    failures "$logs/$bin.default.log" >"$logs/$bin.default.failed"
    failures "$logs/$bin.folio.log" >"$logs/$bin.folio.failed"
    n_default="$(ran "$logs/$bin.default.log")"
    n_folio="$(ran "$logs/$bin.folio.log")"
    if [ "$folio_only" = 0 ]; then
        default_result="$n_default tests, $(wc -l <"$logs/$bin.default.failed") failed ($((t1 - t0)) s)"
    else
        default_result="not run (--folio-only)"
        n_default="$n_folio"
    fi
    echo "== $bin${filter:+ ($filter)}: default file system $default_result; through folio" \
        "$n_folio tests, $(wc -l <"$logs/$bin.folio.failed") failed ($((t2 - t1)) s)"
    while read -r t; do echo "   fails on both: $t"; done < <(comm -12 "$logs/$bin.default.failed" "$logs/$bin.folio.failed")
    while read -r t; do echo "   fails only on the default file system: $t"; done < <(comm -23 "$logs/$bin.default.failed" "$logs/$bin.folio.failed")
    only=0
    while read -r t; do
        [ -n "$t" ] || continue
        # Alone on both: a failure of folio's only if it passes alone on the default and
        # fails alone through folio.
        run default "$bin" "$t" "$logs/$bin.alone.default.log"
        run folio "$bin" "$t" "$logs/$bin.alone.folio.log"
        if [ -n "$(failures "$logs/$bin.alone.default.log")" ]; then
            echo "   fails through folio in the run, and alone on both (not folio's): $t"
        elif [ -z "$(failures "$logs/$bin.alone.folio.log")" ]; then
            echo "   fails through folio in the run, passes alone on both (flaky): $t"
        else
            echo "   FAILS ONLY THROUGH FOLIO: $t"
            grep -m3 -E 'Failure|error|Assertion|Expected|Which is' "$logs/$bin.alone.folio.log" |
                cut -c1-300 | sed 's/^/        /'
            only=$((only + 1))
        fi
    done < <(comm -13 "$logs/$bin.default.failed" "$logs/$bin.folio.failed")
    if [ "$n_folio" -lt "$n_default" ] ||
        ! grep -qE '^\[==========\] [0-9]+ tests? from .* ran\.' "$logs/$bin.folio.log"; then
        # A crash (or an exit) through folio: the tests after it never ran.
        echo "   FAIL: the run through folio stopped after $n_folio of $n_default tests:"
        tail -3 "$logs/$bin.folio.log" | cut -c1-300 | sed 's/^/        /'
        only=$((only + 1))
    fi
    if [ "$bin" = env_basic_test ]; then
        # The patched binary must have run its CustomEnv cases on the plugin, and the
        # plugin must have opened the tests' files (named f, g, ...) through folio.
        custom="$(grep -c '^\[       OK \] CustomEnv/' "$logs/$bin.folio.log" || true)"
        through="$(sed -n 's/.*folio: plugin:.* other_opened_for_write=\([0-9]*\).*/\1/p' "$logs/$bin.folio.log" | tail -1)"
        echo "   CustomEnv tests passed on the plugin: $custom; files opened for writing through folio: ${through:-none}"
        if [ "$custom" = 0 ] || [ "${through:-0}" = 0 ]; then
            echo "   FAIL: env_basic_test did not run on the plugin"
            only=$((only + 1))
        fi
    fi
    only_folio_total=$((only_folio_total + only))
    summary+=("$bin: $only")
done

verdict=pass
[ "$only_folio_total" = 0 ] || verdict=FAIL
echo "rocksdb-tests: ${#chosen[@]} binaries (${summary[*]}), $only_folio_total tests fail only through folio: $verdict"
[ "$verdict" = pass ]
