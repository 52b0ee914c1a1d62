#!/usr/bin/env bash
# plugins/fio/build.sh - builds target/fio-plugin/libfio_folio.so, folio's fio ioengine.
#
# fio's external-engine ABI (struct ioengine_ops, struct thread_data, FIO_IOOPS_VERSION)
# is that of one fio version, so the engine is compiled against the headers of the fio
# this machine runs: the script reads `fio --version`, fetches that version's Debian
# source package with `apt-get source --download-only fio` into target/fio-plugin/src
# (never committed; fio is GPL), unpacks it, runs fio's ./configure (its config-host.h is
# needed by the headers), checks the tree's version equals `fio --version` (refusing a
# mismatch), builds folio's static C library with cargo and links the engine with it.
#
# Environment: FIO_SRC_DIR (an unpacked fio source tree of the right version; skips the
# download), FIO (default fio), CC (default cc).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/fio-plugin"
fio="${FIO:-fio}"
cc="${CC:-cc}"
mkdir -p "$out"

command -v "$fio" >/dev/null || { echo "build.sh: no fio: apt-get install -y fio" >&2; exit 1; }
want="$("$fio" --version)"  # e.g. fio-3.33
want="${want#fio-}"

src="${FIO_SRC_DIR:-$out/src/fio-$want}"
if [ ! -f "$src/ioengines.h" ]; then
    mkdir -p "$out/src"
    (
        cd "$out/src"
        if ! ls fio_"$want".orig.tar.* >/dev/null 2>&1; then
            echo "== apt-get source --download-only fio (headers of fio $want)"
            apt-get source --download-only "fio" >/dev/null 2>&1 || {
                echo "build.sh: apt-get source fio failed: add a deb-src line for your" \
                    "release (e.g. /etc/apt/sources.list.d/*.sources 'Types: deb-src')," \
                    "run apt-get update, or set FIO_SRC_DIR to fio-$want's source" >&2
                exit 1
            }
        fi
        tarball="$(ls fio_"$want".orig.tar.* 2>/dev/null | head -1)"
        [ -n "$tarball" ] || {
            echo "build.sh: the fio source apt found is not fio $want (the installed fio):" \
                "$(ls fio_*.orig.tar.* 2>/dev/null)" >&2
            exit 1
        }
        tar xf "$tarball"
    )
fi

have="$(sed -n 's/^DEF_VER=fio-//p' "$src/FIO-VERSION-GEN")"
if [ "$have" != "$want" ]; then
    echo "build.sh: fio headers in $src are fio $have but \`$fio --version\` is fio $want:" \
        "the engine ABI is pinned to one fio version, refusing to build" >&2
    exit 1
fi
if [ ! -f "$src/config-host.h" ]; then
    echo "== configure fio $have (for config-host.h)"
    (cd "$src" && ./configure --disable-native >/dev/null)
fi

echo "== cargo build --release -p folio-capi"
(cd "$root" && cargo build --release -p folio-capi)
lib="${CARGO_TARGET_DIR:-$root/target}/release/libfolio.a"

echo "== cc libfio_folio.so against fio $have"
# fio's headers need its config-host.h definitions, as fio's own Makefile passes them.
# fio's symbols (log_err, td_verror, generic_get_file_size) resolve against the fio
# executable at dlopen; folio's stay inside the engine (--exclude-libs).
"$cc" -O2 -g -fPIC -shared -std=gnu99 -Wall -Wno-unused-parameter \
    -D_GNU_SOURCE -D_LARGEFILE_SOURCE -D_FILE_OFFSET_BITS=64 \
    -include "$src/config-host.h" -I"$src" -I"$root/include" \
    -o "$out/libfio_folio.so" "$here/folio_engine.c" "$lib" -Wl,--exclude-libs,ALL -lpthread -ldl -lm
echo "$have" >"$out/fio-version"
echo "built $out/libfio_folio.so (fio $have)"
