#!/usr/bin/env bash
# Fuzz the generated C readers with libFuzzer, AddressSanitizer and UBSan (needs clang):
#   c/fuzz.sh SECONDS [TARGET ...]     (default: every reader; a target is a format or <format>.<part>,
#                                       or write-<format> for a writer: read, write back, compare the bytes)
#   c/fuzz.sh --runs N [TARGET ...]    (N executions per reader instead of a time bound: the long campaign)
# Each target starts from the committed seeds of fuzz/corpus/<target>/ and its dictionary in
# fuzz/dicts/, grows its corpus in c/build/fuzz-work/<target>/, and writes any crashing input there.
# Prints executions and executions per second per target; exits 1 if any target found something.
set -euo pipefail
cd "$(dirname "$0")"
bound=()
if [ "${1:-}" = --runs ]; then
    bound=(-runs="${2:?usage: c/fuzz.sh --runs N [TARGET ...]}")
    shift 2
else
    bound=(-max_total_time="${1:?usage: c/fuzz.sh SECONDS|--runs N [TARGET ...]}")
    shift
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(checkpoint-metadata checkpoint-shard checkpoint-shard.record checkpoint-shard.inflated dump-manifest dump-shard
             dump-shard.record shm-descriptor shm-message shm-samples-meta)
fi
make -s fuzz fuzz-writers
status=0
for target in "${targets[@]}"; do
    work=build/fuzz-work/$target
    mkdir -p "$work"
    args=()  # a reader without committed seeds or a dictionary starts from nothing
    format=${target#write-}  # a writer starts from its format's seeds and dictionary
    if [ -d "../fuzz/corpus/$format" ]; then args+=("../fuzz/corpus/$format"); fi
    if [ -f "../fuzz/dicts/$format.dict" ]; then args+=("-dict=../fuzz/dicts/$format.dict"); fi
    log=$work/log.txt
    if build/fuzz/"$target" "$work" "${args[@]}" "${bound[@]}" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$work/" >"$log" 2>&1; then
        result=ok
    else
        result=FINDING
        status=1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    printf '%-26s %12s executions %8s/s  %s\n' "$target" "${execs:-?}" "${rate:-?}" "$result"
done
exit $status
