# plugins/rocksdb/plugin-build.sh - sourced (not run) by ci.sh, db_bench_folio.sh,
# crashtest.sh and rocksdb-tests.sh: whose build a build directory of the plugin holds.
#
# A build directory copied from another checkout (a worktree whose target/ was copied) or
# left by a checkout that moved holds a CMakeCache.txt made for the other tree: cmake
# refuses to configure it again ("... is different than the directory ... where
# CMakeCache.txt was created"), and the plugin in it was built from the other tree's
# sources. folio-bench's db-bench checks the same (build_dir_owner in
# crates/folio-bench/src/workloads/db_bench/plugin.rs), and also that the cache links this
# tree's folio.
#
#   plugin_build_foreign BUILD   prints why BUILD is another tree's build (configured
#                                for other sources than this tree's plugins/rocksdb, or
#                                in another directory than BUILD) and succeeds; fails,
#                                printing nothing, when BUILD is this tree's or holds no
#                                CMakeCache.txt
#   plugin_build_forget BUILD    when BUILD holds a folio plugin's build (its sources a
#                                plugins/rocksdb; else it dies: another project's build is
#                                the user's), removes what cmake and the build made from it:
#                                CMakeCache.txt, CMakeFiles (the objects too) and the
#                                plugin, so that the next configure and build start afresh
#                                (the rest is made again over the old)
#   plugin_default_check PLUGIN  dies unless the plugin at the default path is this tree's
#                                build or has no CMakeCache.txt beside it: for the scripts
#                                that run the plugin without building it (a FOLIO_PLUGIN the
#                                user names is the user's choice, and not checked)
#
# Directories are compared canonical (readlink -f); one that no longer exists is another's.
# Fails through the caller's `die MESSAGE`; `root` is the repository's root.

plugin_build_foreign() {
    local build="$1" cache="$1/CMakeCache.txt" home made_in
    [ -f "$cache" ] || return 1
    home="$(sed -n 's/^CMAKE_HOME_DIRECTORY:[A-Z]*=//p' "$cache" | head -n 1)"
    made_in="$(sed -n 's/^CMAKE_CACHEFILE_DIR:[A-Z]*=//p' "$cache" | head -n 1)"
    if [ "$(readlink -f "$home")" != "$(readlink -f "$root/plugins/rocksdb")" ]; then
        echo "configured for the sources in ${home:-nothing}"
    elif [ "$(readlink -f "$made_in")" != "$(readlink -f "$build")" ]; then
        echo "configured in ${made_in:-nothing}"
    else
        return 1
    fi
}

# Whether BUILD's cache is a folio plugin's build (of this tree or another's: its sources
# a plugins/rocksdb): only such a build is forgotten; another project's build directory is
# the user's, and left alone.
plugin_build_is_plugins() {
    local home
    home="$(sed -n 's/^CMAKE_HOME_DIRECTORY:[A-Z]*=//p' "$1/CMakeCache.txt" | head -n 1)"
    case "$home" in
    */plugins/rocksdb | */plugins/rocksdb/) return 0 ;;
    *) return 1 ;;
    esac
}

plugin_build_forget() {
    plugin_build_is_plugins "$1" ||
        die "$1 holds another project's build, not a folio plugin's: choose another" \
            "FOLIO_PLUGIN_BUILD_DIR, or remove it yourself"
    rm -rf "$1/CMakeCache.txt" "$1/CMakeFiles" "$1/libfolio_rocksdb.so"
}

plugin_default_check() {
    local build why
    build="$(dirname "$1")"
    if why="$(plugin_build_foreign "$build")"; then
        die "$1 is another tree's build ($why): rebuild it with plugins/rocksdb/ci.sh," \
            "which starts afresh, or folio-bench db-bench; or remove $build and build it" \
            "as docs/rocksdb.md says"
    fi
}
