# plugins/rocksdb/rocksdb-source.sh - sourced (not run) by crashtest.sh and rocksdb-tests.sh:
# what both need to build RocksDB programs against the installed librocksdb.so.
#
#   rocksdb_prerequisites PACKAGE...  fails (with the apt-get line) unless g++, dpkg-dev,
#                                     libgflags-dev, librocksdb-dev and the PACKAGEs named
#                                     (python3, libgtest-dev) are installed
#   rocksdb_version                   sets version (librocksdb-dev's, e.g. 7.8.3-2) and
#                                     upstream (7.8.3); fails unless the linker's
#                                     librocksdb.so is that version's
#   rocksdb_source_tree               sets src: RocksDB's source tree of that version,
#                                     ROCKSDB_SRC_DIR or target/crashtest/src/rocksdb-VERSION,
#                                     fetched (apt-get source: needs a deb-src line) and
#                                     unpacked there once when missing; fails unless its
#                                     version.h says that version
#   rocksdb_defs                      (an array) the definitions of Debian's build of
#                                     librocksdb.so, so that a program built against it
#                                     sees the same layouts
#
# Each function fails through the caller's `die MESSAGE`; `root` is the repository's root.

rocksdb_prerequisites() {
    local missing=() p
    command -v g++ >/dev/null || missing+=(g++)
    command -v dpkg-source >/dev/null || missing+=(dpkg-dev)
    [ -f /usr/include/gflags/gflags.h ] || missing+=(libgflags-dev)
    [ -f /usr/include/rocksdb/db.h ] || missing+=(librocksdb-dev)
    for p in "$@"; do
        case "$p" in
            python3) command -v python3 >/dev/null || missing+=(python3) ;;
            libgtest-dev) [ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev) ;;
            *) die "rocksdb_prerequisites: unknown package $p" ;;
        esac
    done
    [ "${#missing[@]}" = 0 ] || die "missing ${missing[*]}: apt-get install -y ${missing[*]}"
}

rocksdb_version() {
    version="$(dpkg-query -W -f='${Version}' librocksdb-dev)"  # e.g. 7.8.3-2
    upstream="${version#*:}"
    upstream="${upstream%-*}"                                   # 7.8.3
    local lib
    lib="$(readlink -f "$(g++ -print-file-name=librocksdb.so)")"
    [ "${lib##*/}" = "librocksdb.so.$upstream" ] ||
        die "the linker's librocksdb.so is $lib, not librocksdb-dev $version's"
}

rocksdb_source_tree() {
    local top="$root/target/crashtest/src"
    src="${ROCKSDB_SRC_DIR:-$top/rocksdb-$upstream}"
    if [ ! -f "$src/db/db_test_util.cc" ] || [ ! -f "$src/tools/db_crashtest.py" ]; then
        [ -z "${ROCKSDB_SRC_DIR:-}" ] || die "$src is not a rocksdb source tree"
        mkdir -p "$top"
        (
            cd "$top"
            dsc="rocksdb_${version#*:}.dsc"
            if [ ! -f "$dsc" ]; then
                echo "== apt-get source --download-only rocksdb=$version"
                apt-get source --download-only "rocksdb=$version" >/dev/null 2>&1 ||
                    die "apt-get source rocksdb=$version failed: add a deb-src line for" \
                        "your release (e.g. /etc/apt/sources.list.d/*.sources 'Types:" \
                        "deb-src'), run apt-get update, or set ROCKSDB_SRC_DIR to" \
                        "rocksdb $upstream's source"
            fi
            rm -rf "rocksdb-$upstream"
            # apt checked the files against the release's signed index; the .dsc's own
            # signature needs the maintainers' keys (debian-keyring), absent here.
            dpkg-source --no-check -x "$dsc" "rocksdb-$upstream" >/dev/null
        )
    fi
    local have
    have="$(sed -nE 's/^#define ROCKSDB_(MAJOR|MINOR|PATCH) ([0-9]+)$/\2/p' \
        "$src/include/rocksdb/version.h" | paste -sd.)"
    [ "$have" = "$upstream" ] || die "$src is rocksdb $have, not $upstream"
}

# The definitions of Debian's cmake build of librocksdb.so, so that both sides agree on
# every structure they share: POSIX, Linux, the features cmake finds here, and the
# compression libraries the library links (ldd: snappy, zlib, bzip2, lz4, zstd). No
# -DNDEBUG: Debian builds with CMAKE_BUILD_TYPE=None, so the library keeps its assertions
# and its debug-only members (port::Mutex's locked_, DBImpl::TEST_*), and a program built
# against it must see the same layouts.
# shellcheck disable=SC2034  # used by the scripts that source this one
rocksdb_defs=(-DGFLAGS=1 -DSNAPPY -DZLIB -DBZIP2 -DLZ4 -DZSTD
    -DROCKSDB_PLATFORM_POSIX -DROCKSDB_LIB_IO_POSIX -DOS_LINUX
    -DROCKSDB_FALLOCATE_PRESENT -DROCKSDB_RANGESYNC_PRESENT
    -DROCKSDB_PTHREAD_ADAPTIVE_MUTEX -DROCKSDB_MALLOC_USABLE_SIZE
    -DROCKSDB_SCHED_GETCPU_PRESENT -DROCKSDB_AUXV_GETAUXVAL_PRESENT)
