#!/usr/bin/env bash
# Runs each fuzz target of folio for a bounded time, one after the other, and says which
# found a crash. See docs/reliability.md.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default 60
#   TARGET              default: index readahead_policy readahead api adoption_scan
#                       hostile_segment
#
# Needs nightly Rust and cargo-fuzz (`cargo install cargo-fuzz`). The corpus grows in
# fuzz/corpus/<target>/ (not committed); fuzz/seeds/, fuzz/regressions/ and fuzz/known/
# (<target>/ in each) are read as extra corpora. A crash is saved in
# fuzz/artifacts/<target>/; the script prints how to replay and minimise it. Exits 1 if
# any target crashed.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(index readahead_policy readahead api adoption_scan hostile_segment)
fi

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is missing: cargo install cargo-fuzz" >&2
    exit 2
fi

echo "== building the fuzz targets (nightly, AddressSanitizer)"
cargo +nightly fuzz build

# The hostile_segment target's world (a directory in /dev/shm: folio::fuzzing,
# `process_world`) lives as long as its fuzzing process and is not removed at its exit:
# remove every world whose process has ended (its name holds the pid).
remove_ended_worlds() {
    local world pid
    for world in /dev/shm/folio-fuzz-hostile-*; do
        [ -d "$world" ] || continue
        pid=${world#/dev/shm/folio-fuzz-hostile-}
        pid=${pid%%-*}
        [ -d "/proc/$pid" ] || rm -rf "$world"
    done
}

summary=()
failed=0
for target in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
    extra=()
    for dir in "fuzz/seeds/$target" "fuzz/regressions/$target" "fuzz/known/$target"; do
        [ -d "$dir" ] && extra+=("$dir")
    done
    log="fuzz/artifacts/$target/last-run.log"
    echo "== $target: ${seconds}s"
    set +e
    cargo +nightly fuzz run "$target" "fuzz/corpus/$target" "${extra[@]}" -- \
        -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 \
        >"$log" 2>&1
    status=$?
    set -e
    remove_ended_worlds
    runs=$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1 || true)
    rate=$(grep -Eo 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1 || true)
    corpus=$(grep -Eo 'corp: [0-9]+/[0-9a-zA-Z]+' "$log" | tail -1 || true)
    if [ "$status" -ne 0 ]; then
        failed=1
        crash=$(grep -Eo "Test unit written to [^ ]+" "$log" | tail -1 | sed 's/Test unit written to //' || true)
        summary+=("$target: CRASH ($crash); log $log")
        grep -E "panicked|ERROR|SUMMARY" "$log" | head -5 || true
        if [ -n "$crash" ]; then
            echo "replay:   cargo +nightly fuzz run $target $crash"
            echo "minimise: cargo +nightly fuzz tmin $target $crash"
        fi
    else
        summary+=("$target: ok, ${runs:-? runs}s, ${rate:-?} exec/s, ${corpus:-corpus ?}")
    fi
done

echo
echo "== summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
exit "$failed"
