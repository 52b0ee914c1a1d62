#!/usr/bin/env bash
# db_bench_folio.sh - runs the unmodified db_bench with the folio plugin preloaded, after
# checking what would otherwise make db_bench crash without a message (an --fs_uri name
# that nothing registered): the plugin exists, loads, registers "folio", and uses the
# same librocksdb as db_bench.
#
#   plugins/rocksdb/db_bench_folio.sh [db_bench flags...]
#
# Adds --fs_uri=folio unless the flags name an --fs_uri. Environment:
#   FOLIO_PLUGIN    the plugin (default: target/rocksdb-plugin/libfolio_rocksdb.so, what
#                   plugins/rocksdb/ci.sh builds)
#   DB_BENCH        the program (default: /usr/bin/db_bench, else db_bench on PATH)
#   FOLIO_*         the plugin's options (docs/rocksdb.md)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
plugin="${FOLIO_PLUGIN:-$root/target/rocksdb-plugin/libfolio_rocksdb.so}"
db_bench="${DB_BENCH:-$(command -v /usr/bin/db_bench || command -v db_bench || true)}"

die() { echo "db_bench_folio: $*" >&2; exit 1; }

[ -n "$db_bench" ] || die "no db_bench: apt-get install -y rocksdb-tools"
[ -f "$plugin" ] || die "no plugin at $plugin: build it with plugins/rocksdb/ci.sh (or cmake, docs/rocksdb.md)"
# shellcheck source=plugins/rocksdb/plugin-build.sh
. "$root/plugins/rocksdb/plugin-build.sh"
[ -n "${FOLIO_PLUGIN:-}" ] || plugin_default_check "$plugin"
plugin="$(cd "$(dirname "$plugin")" && pwd)/$(basename "$plugin")"  # LD_PRELOAD wants it absolute

rocksdb_of() { ldd "$1" | awk '/librocksdb\.so/ { print $3; exit }'; }
lib_bench="$(rocksdb_of "$db_bench")"
lib_plugin="$(rocksdb_of "$plugin")"
[ -n "$lib_plugin" ] || die "$plugin does not load librocksdb (ldd $plugin)"
if [ "$(readlink -f "$lib_bench")" != "$(readlink -f "$lib_plugin")" ]; then
    die "db_bench uses $lib_bench but the plugin $lib_plugin: the plugin would register in the wrong library"
fi
# The static initializer must run and register the name.
if ! FOLIO_VERBOSE=1 LD_PRELOAD="$plugin" /bin/true 2>&1 | grep -q "registered FileSystem 'folio'"; then
    die "$plugin does not register the file system 'folio' when preloaded"
fi

args=("$@")
has_uri=0
for a in "${args[@]}"; do
    case "$a" in
        --fs_uri=*|-fs_uri=*) has_uri=1 ;;
        --env_uri=*|-env_uri=*) die "--env_uri and --fs_uri exclude each other; the plugin is a file system: use --fs_uri" ;;
    esac
done
for a in "${args[@]}"; do
    case "$a" in
        --fs_uri=folio|--fs_uri=folio://*|-fs_uri=folio|-fs_uri=folio://*) ;;
        --fs_uri=*|-fs_uri=*) die "'$a' is not a folio URI (folio or folio://?key=value&...)" ;;
    esac
done
[ "$has_uri" = 1 ] || args+=(--fs_uri=folio)

LD_PRELOAD="$plugin${LD_PRELOAD:+:$LD_PRELOAD}" exec "$db_bench" "${args[@]}"
