# Sourced by the benchmarks that run one study under both policies (wsd_sweep.sh,
# moasha_vs_trial_based.sh).
#   timed_policy_run HIPPO SPEC POLICY PLAN SUMMARY
# runs `HIPPO --db PLAN --format json run SPEC --workers 2 --policy POLICY` with its JSON output in
# SUMMARY, and prints its wall time in seconds; a run that fails ends the benchmark (exit 1) with
# the end of its log. Each benchmark then checks the work itself.
timed_policy_run() {
  local hippo=$1 spec=$2 policy=$3 plan=$4 summary=$5 start end
  start=$(date +%s.%N)
  if ! "$hippo" --db "$plan" --format json run "$spec" --workers 2 --policy "$policy" \
    >"$summary" 2>"$summary.log"; then
    echo "error: the $policy run failed:" >&2
    tail -5 "$summary.log" >&2
    exit 1
  fi
  end=$(date +%s.%N)
  python3 -c "print($end - $start)"
}
