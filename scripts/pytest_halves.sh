#!/usr/bin/env bash
# make test-python: the whole suite as two pytest sessions at once, each with its own
# embedded PostgreSQL server and host register (tests/conftest.py), so that their waits
# (trial windows, Airflow's dag.test(), the live scheduler of tests/ui) overlap on a
# 2-core machine: one session runs the DAG-heavy folders, the other the rest. Their
# outputs are printed one after the other when both have ended; the exit status is the
# first non-zero one. GCBENCH_PYTEST_SERIAL=1 runs one session instead.
#
# Environment: PY (the interpreter, default .venv/bin/python), PYTEST_ARGS (extra
# arguments for both sessions).
set -uo pipefail
cd "$(dirname "$0")/.."
py="${PY:-.venv/bin/python}"
# shellcheck disable=SC2206
extra=(${PYTEST_ARGS:-})
if [ "${GCBENCH_PYTEST_SERIAL:-0}" = 1 ]; then
    exec "$py" -m pytest -q -p no:cacheprovider -rfE "${extra[@]}"
fi
first=(tests/compose tests/deploy tests/docker tests/energy tests/examples tests/factory tests/integration)
ignore=()
for d in "${first[@]}"; do ignore+=(--ignore "$d"); done
logs=.gcbench-test/pytest
mkdir -p "$logs"
started=$(date +%s)
"$py" -m pytest -q -p no:cacheprovider -rfE "${extra[@]}" "${first[@]}" >"$logs/first.log" 2>&1 &
a=$!
"$py" -m pytest -q -p no:cacheprovider -rfE "${extra[@]}" "${ignore[@]}" tests >"$logs/second.log" 2>&1 &
b=$!
wait "$a"; ra=$?
wait "$b"; rb=$?
echo "== pytest session 1 (${first[*]}): exit $ra"
cat "$logs/first.log"
echo "== pytest session 2 (the other folders): exit $rb"
cat "$logs/second.log"
echo "== both sessions: $(( $(date +%s) - started )) s"
[ "$ra" = 0 ] || exit "$ra"
exit "$rb"
