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
#   4. corrupts one block of one laid-out file and checks the same pass FAILS;
#   5. checks that a forked job (thread=0) and a write job are refused with a message.
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

if [ -z "${FOLIO_FIO_DIR:-}" ]; then
    FOLIO_FIO_DIR="$(mktemp -d "${TMPDIR:-/tmp}/folio-fio.XXXXXX")"
    trap 'rm -rf "$FOLIO_FIO_DIR"' EXIT
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

echo "== corrupt one 16 KiB block of layout.7.0 at 40 MiB; the pass must fail"
printf 'folio-corrupt-block' | dd of="$FOLIO_FIO_DIR/layout.7.0" bs=1 seek=$((40 << 20)) \
    conv=notrunc status=none
if verify_pass; then rc=0; else rc=$?; fi
check "verify pass over the corrupted file fails" test "$rc" != 0
check "fio names the verify error" grep -q 'verify: bad' "$log"
[ "$rc" != 0 ] || cat "$log"

echo "== refusals"
if fio --ioengine="$engine" --thread=0 --name=forked --filename="$FOLIO_FIO_DIR/layout.0.0" \
    --rw=read --size=1m >"$log" 2>&1; then rc=0; else rc=$?; fi
check "a forked job (thread=0) is refused with a message" \
    bash -c "[ $rc != 0 ] && grep -q 'needs thread=1' '$log'"
if fio --ioengine="$engine" --thread=1 --name=writer --filename="$FOLIO_FIO_DIR/layout.0.0" \
    --rw=write --size=1m >"$log" 2>&1; then rc=0; else rc=$?; fi
check "a write job is refused: writes are not supported yet (issue 14)" \
    bash -c "[ $rc != 0 ] && grep -q 'writes are not supported yet (issue 14)' '$log'"

echo "ci.sh: $passed passed, $failed failed ($((SECONDS - started)) s)"
[ "$failed" = 0 ]
