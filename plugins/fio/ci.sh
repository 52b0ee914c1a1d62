#!/usr/bin/env bash
# plugins/fio/ci.sh - builds folio's fio engine (build.sh) and uses fio's verify as a test:
#   1. lays out 16 files of 64 MiB (1 GiB) with psync, each 16 KiB block carrying fio's
#      crc32c verify header (jobs/layout.fio);
#   2. reruns that job through folio with verify_only=1 (numjobs=16, thread=1): every block
#      is read through the one shared cache and checked; 0 verify errors, and folio's
#      printed stats show the reads went through the cache (misses, pages inserted,
#      io_errors=0);
#   3. runs jobs/read, randread, randread-zipf and mix through folio for 3 s each, with
#      verify=crc32c on every block read: 0 errors, reads through the cache;
#   4. forked jobs (thread=0, fio's default) share one domain: jobs/read.fio with
#      thread=0 (16 job processes, each attached to a domain in a directory of this
#      run's), every block checked, then again in a new fio run: its processes hit the
#      pages the first run's processes left in the domain (hits, no misses beyond a few);
#   5. corrupts one block of one laid-out file and checks the same pass FAILS;
#   6. writes through folio, each block with fio's crc32c verify header: jobs/randwrite
#      (4 KiB random, fdatasync=32) and jobs/write (64 KiB sequential, fsync_on_close=1),
#      256 MiB each, read back and verified in the same run; then each again with
#      verify_only=1 in a NEW fio process (a new, empty cache: the reads come from the
#      disk, so this proves the data reached it); a random write with no sync at all and
#      no verify phase, verified in a new process (what the engine writes back when fio
#      exits); end_fsync=1, sync=1, sync=dsync and sync_file_range= on small writes;
#      jobs/randrw (70/30, fdatasync=32) for 3 s; then one written block is corrupted
#      and the verify_only pass must FAIL;
#   7. checks that a forked job with folio_domain=none and a trim job are refused with a
#      message.
# Ends with "ci.sh: N passed, M failed". Needs fio (apt-get install -y fio), a deb-src
# line for fio's source (see build.sh), cc and cargo.
#
# Environment: FOLIO_FIO_DIR (where the files go; default a fresh directory in TMPDIR,
# removed at the end).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
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

if ! command -v fio >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null
    else
        echo "ci.sh: missing fio: apt-get install -y fio" >&2
        exit 1
    fi
fi

"$here/build.sh"
engine="external:$root/target/fio-plugin/libfio_folio.so"

made=()  # the directories this run made, removed at its end
trap 'rm -rf "${made[@]}"' EXIT
if [ -z "${FOLIO_FIO_DIR:-}" ]; then
    FOLIO_FIO_DIR="$(mktemp -d "${TMPDIR:-/tmp}/folio-fio.XXXXXX")"
    made+=("$FOLIO_FIO_DIR")
fi
export FOLIO_FIO_DIR
log="$FOLIO_FIO_DIR/log"

echo "== layout with psync: 1 GiB in $FOLIO_FIO_DIR"
fio --ioengine=psync "$here/jobs/layout.fio" >"$log" 2>&1 || { cat "$log"; exit 1; }

verify_pass() {  # the layout job again, through folio, reading back and verifying only
    fio --ioengine="$engine" --verify_only=1 --folio_capacity=256m \
        "$here/jobs/layout.fio" >"$log" 2>&1
}

echo "== verify_only through folio, numjobs=16, thread=1"
if verify_pass; then rc=0; else rc=$?; fi
check "verify pass through folio exits 0" test "$rc" = 0
check "no verify error" bash -c "! grep -q 'verify:' '$log'"
check "1 GiB read back" grep -q 'READ: .*io=1024MiB' "$log"
check "folio printed its stats once" test "$(grep -c '^folio: stats: ' "$log")" = 1
stats="$(grep '^folio: stats: ' "$log" || true)"
num() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$stats"; }
check "reads went through the cache (misses, pages inserted)" \
    test "$(num misses)" -gt 0 -a "$(num pages_inserted)" -gt 0
check "folio saw no I/O errors" test "$(num io_errors)" = 0
[ "$failed" = 0 ] || cat "$log"

echo "== the job files through folio (read, randread, randread-zipf, mix), 3 s each"
for job in read randread randread-zipf mix; do
    if fio --ioengine="$engine" --runtime=3 "$here/jobs/$job.fio" >"$log" 2>&1; then
        rc=0
    else
        rc=$?
    fi
    stats="$(grep '^folio: stats: ' "$log" || true)"
    check "jobs/$job.fio: exits 0, no verify error, reads through folio, no I/O error" \
        bash -c "[ $rc = 0 ] && ! grep -q 'verify:' '$log' &&
                 [ '$(num misses)' -gt 0 ] && [ '$(num io_errors)' = 0 ]"
    [ "$rc" = 0 ] || cat "$log"
done

echo "== forked jobs (thread=0) share a domain: jobs/read.fio, every block checked, twice"
# The domain's files in a directory of this run's (its steward leaves once it is removed).
domain_dir="$(mktemp -d /dev/shm/folio-fio-ci.XXXXXX)"
made+=("$domain_dir")
sed 's/^thread=1$/thread=0/' "$here/jobs/read.fio" >"$FOLIO_FIO_DIR/read-forked.fio"
forked_pass() {
    fio --ioengine="$engine" --folio_domain=ci-fio --folio_segment_dir="$domain_dir" \
        "$FOLIO_FIO_DIR/read-forked.fio" >"$log" 2>&1
}
sum() {  # the sum of a field over every process's "folio: domain" line
    sed -n "s/^folio: domain .* $1=\([0-9]*\).*/\1/p" "$log" | awk '{s += $1} END {print s + 0}'
}
for round in first second; do
    if forked_pass; then rc=0; else rc=$?; fi
    processes="$(grep -c '^folio: domain ci-fio: ' "$log" || true)"
    hits="$(sum hits)" misses="$(sum misses)"
    echo "$round run: $processes job processes, domain hits $hits, misses $misses"
    check "forked, $round run: exits 0, no verify error, 1 GiB read back" \
        bash -c "[ $rc = 0 ] && ! grep -q 'verify:' '$log' && grep -q 'READ: .*io=1024MiB' '$log'"
    check "forked, $round run: 16 job processes read through the domain" test "$processes" = 16
    if [ "$round" = first ]; then
        check "forked, first run: the pages were read into the domain" test "$misses" -gt 0
    else
        # 1 GiB is 262,144 pages: the first run's processes cached them for this one's.
        check "forked, second run: the first run's pages are hits in its processes" \
            test "$hits" -ge 262144 -a "$misses" -lt 1024
    fi
    [ "$rc" = 0 ] || cat "$log"
done

echo "== corrupt one 16 KiB block of layout.7.0 at 40 MiB; the pass must fail"
printf 'folio-corrupt-block' | dd of="$FOLIO_FIO_DIR/layout.7.0" bs=1 seek=$((40 << 20)) \
    conv=notrunc status=none
if verify_pass; then rc=0; else rc=$?; fi
check "verify pass over the corrupted file fails" test "$rc" != 0
check "fio names the verify error" grep -q 'verify: bad' "$log"
[ "$rc" != 0 ] || cat "$log"

# Runs fio through folio with the given arguments, in $FOLIO_FIO_DIR (fio leaves its
# verify state files in its working directory); sets rc and stats.
run_folio() {
    if (cd "$FOLIO_FIO_DIR" && fio --ioengine="$engine" "$@") >"$log" 2>&1; then
        rc=0
    else
        rc=$?
    fi
    stats="$(grep '^folio: stats: ' "$log" || true)"
}

# The checks of a write run through folio: exit 0, no verify error, the bytes written,
# writes and syncs through the cache, no write or read error.
check_write_run() {  # check_write_run NAME WRITTEN(fio's io=, e.g. 256MiB)
    check "$1: exits 0, no verify error, wrote $2" \
        bash -c "[ $rc = 0 ] && ! grep -q 'verify:' '$log' && grep -q 'WRITE: .*io=$2' '$log'"
    check "$1: writes went through folio (write_requests, pages written back), no error" \
        test "$(num write_requests)" -gt 0 -a "$(num pages_written_back)" -gt 0 \
        -a "$(num writeback_errors)" = 0 -a "$(num io_errors)" = 0 -a "$(num dirty_pages)" = 0
    [ "$rc" = 0 ] || cat "$log"
}

# The checks of a verify_only pass in a new fio process: every block read from the
# disk (the new cache is empty: misses) and verified.
check_verify_pass() {  # check_verify_pass NAME READ(fio's io=)
    check "$1 verify_only in a new process: exits 0, no verify error, read $2 from the disk" \
        bash -c "[ $rc = 0 ] && ! grep -q 'verify:' '$log' && grep -q 'READ: .*io=$2' '$log' &&
                 [ '$(num misses)' -gt 0 ] && [ '$(num write_requests)' = 0 ]"
    [ "$rc" = 0 ] || cat "$log"
}

echo "== writes through folio: jobs/randwrite.fio (4 KiB random, fdatasync=32), 256 MiB"
run_folio "$here/jobs/randwrite.fio"
check_write_run randwrite 256MiB
# One fdatasync after every 32nd write but a job's last (fio issues none after it).
check "randwrite: fdatasync=32 reached folio (syncs >= 4 jobs x (16384 writes / 32 - 1))" \
    test "$(num syncs)" -ge 2044
run_folio --verify_only=1 "$here/jobs/randwrite.fio"
check_verify_pass randwrite 256MiB

echo "== writes through folio: jobs/write.fio (64 KiB sequential, fsync_on_close=1), 256 MiB"
run_folio "$here/jobs/write.fio"
check_write_run write 256MiB
check "write: fsync_on_close reached folio (syncs >= one per job)" test "$(num syncs)" -ge 4
run_folio --verify_only=1 "$here/jobs/write.fio"
check_verify_pass write 256MiB

echo "== forked writers (thread=0): jobs/randwrite.fio, 64 MiB, through the domain"
# Each job's process writes a file of its own (one writer per file) and puts each page it
# writes into the domain; then a new fio process (a private cache) verifies the disk.
sed 's/^size=64m$/size=16m/' "$here/jobs/randwrite.fio" >"$FOLIO_FIO_DIR/randwrite-16m.fio"
sed 's/^thread=1$/thread=0/' "$FOLIO_FIO_DIR/randwrite-16m.fio" \
    >"$FOLIO_FIO_DIR/randwrite-forked.fio"
run_folio --folio_segment_dir="$domain_dir" "$FOLIO_FIO_DIR/randwrite-forked.fio"
check "forked randwrite: exits 0, no verify error, wrote 64MiB, every page put in the domain" \
    bash -c "[ $rc = 0 ] && ! grep -q 'verify:' '$log' && grep -q 'WRITE: .*io=64.0MiB' '$log' &&
             [ $(sum installs) -ge 16384 ] && [ $(grep -c '^folio: domain ' "$log") = 4 ]"
[ "$rc" = 0 ] || cat "$log"
run_folio --verify_only=1 "$FOLIO_FIO_DIR/randwrite-16m.fio"
check_verify_pass "forked randwrite" 64.0MiB

echo "== a random write with no sync and no verify phase; verified in a new process"
nosync=(--thread=1 --name=nosync --directory="$FOLIO_FIO_DIR" --rw=randwrite --bs=4k
    --size=4m --numjobs=4 --verify=crc32c --group_reporting=1)
run_folio "${nosync[@]}" --do_verify=0
check_write_run nosync 16.0MiB
check "nosync: no sync was issued" test "$(num syncs)" = 0
run_folio "${nosync[@]}"  --verify_only=1
check_verify_pass nosync 16.0MiB

echo "== fio's other sync options through folio: end_fsync, sync=1, sync=dsync, sync_file_range"
for opt in --end_fsync=1 --sync=1 --sync=dsync --sync_file_range=wait_after:16 \
    --sync_file_range=write:16; do
    run_folio --thread=1 --name=syncs --directory="$FOLIO_FIO_DIR" --rw=write --bs=16k \
        --size=2m --verify=crc32c "$opt"
    # Each goes through folio_sync (syncs > 0) but write:16, which starts writeback only
    # (folio_writeback; syncs stays 0, the engine's final sync_all is not counted).
    syncs_wanted='-gt 0'
    [ "$opt" != --sync_file_range=write:16 ] || syncs_wanted='= 0'
    check "$opt: exits 0, no verify error, syncs $syncs_wanted" \
        bash -c "[ $rc = 0 ] && ! grep -q 'verify:' '$log' && [ '$(num syncs)' $syncs_wanted ] &&
                 [ '$(num writeback_errors)' = 0 ]"
    [ "$rc" = 0 ] || cat "$log"
done

echo "== jobs/randrw.fio (70/30 random reads and writes, fdatasync=32) for 3 s"
run_folio --runtime=3 --time_based=1 "$here/jobs/randrw.fio"
check "randrw: exits 0, no verify error, reads and writes through folio, no error" \
    bash -c "[ $rc = 0 ] && ! grep -q 'verify:' '$log' && [ '$(num misses)' -gt 0 ] &&
             [ '$(num write_requests)' -gt 0 ] && [ '$(num syncs)' -gt 0 ] &&
             [ '$(num io_errors)' = 0 ] && [ '$(num writeback_errors)' = 0 ]"
[ "$rc" = 0 ] || cat "$log"

echo "== corrupt one 64 KiB block of write.2.0 at 20 MiB; its verify_only pass must fail"
printf 'folio-corrupt-block' | dd of="$FOLIO_FIO_DIR/write.2.0" bs=1 seek=$((20 << 20)) \
    conv=notrunc status=none
run_folio --verify_only=1 "$here/jobs/write.fio"
check "verify pass over the corrupted written file fails" test "$rc" != 0
check "fio names the verify error" grep -q 'verify: bad' "$log"
[ "$rc" != 0 ] || cat "$log"

echo "== refusals"
if fio --ioengine="$engine" --thread=0 --name=forked --filename="$FOLIO_FIO_DIR/layout.0.0" \
    --rw=read --size=1m --folio_domain=none >"$log" 2>&1; then rc=0; else rc=$?; fi
check "a forked job with folio_domain=none is refused with a message" \
    bash -c "[ $rc != 0 ] && grep -q 'folio_domain=none needs thread=1' '$log'"
if fio --ioengine="$engine" --thread=1 --name=trimmer --filename="$FOLIO_FIO_DIR/layout.0.0" \
    --rw=randtrim --size=1m >"$log" 2>&1; then rc=0; else rc=$?; fi
check "a trim job is refused: folio cannot punch holes" \
    bash -c "[ $rc != 0 ] && grep -q 'trims are not supported' '$log'"

echo "ci.sh: $passed passed, $failed failed ($((SECONDS - started)) s)"
[ "$failed" = 0 ]
