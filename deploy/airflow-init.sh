#!/usr/bin/env bash
# The airflow-init service of docker-compose.yml: migrate Airflow's metadata database,
# create the first UI user, and one Airflow pool (1 slot) per GPU of this host, plus
# the pools of every multi-GPU set the plans use. Idempotent: safe on every `up`.
set -euo pipefail
: "${GCBENCH_ADMIN_PASSWORD:?set GCBENCH_ADMIN_PASSWORD in .env}"
mkdir -p "${GCBENCH_HOME}" "${GCBENCH_REPORTS_DIR}" "${GCBENCH_DATA_DIR}"

airflow db migrate

# (Airflow may print log lines before the JSON on stdout: read from the line that starts it)
if airflow users list --output json 2>/dev/null | python -c '
import json, os, sys
text = sys.stdin.read()
start = 0 if text.startswith("[") else text.find("\n[") + 1
users = json.JSONDecoder().raw_decode(text[start:])[0] if start >= 0 and "[" in text else []
sys.exit(0 if any(u["username"] == os.environ["GCBENCH_ADMIN_USER"] for u in users) else 1)'; then
    echo "UI user ${GCBENCH_ADMIN_USER} exists"
else
    airflow users create --role Admin --username "${GCBENCH_ADMIN_USER}" --password "${GCBENCH_ADMIN_PASSWORD}" \
        --email "${GCBENCH_ADMIN_EMAIL:-admin@localhost}" --firstname GC-Bench --lastname Admin
fi

IFS=',' read -r -a gpus <<< "${GCBENCH_GPUS:-0}"
for gpu in "${gpus[@]}"; do
    gpu="${gpu// /}"
    [ -n "${gpu}" ] || continue
    airflow pools set "gcbench_gpu${gpu}" 1 "GC-Bench: one trial at a time on GPU ${gpu}"
done

# pools of multi-GPU sets (gcbench_gpu0_1) used by the plans
python - <<'PY'
from airflow.models.pool import Pool

from gcbench.config import plans_dir
from gcbench.factory.plans import build_all

for dag in build_all(plans_dir()).values():
    for task in dag.tasks:
        pool = getattr(task, "pool", None)
        if pool and pool.startswith("gcbench_") and Pool.get_pool(pool) is None:
            Pool.create_or_update_pool(pool, slots=1, description="GC-Bench: one trial at a time on these GPUs",
                                       include_deferred=False)
            print(f"pool {pool} created")
PY
echo "airflow-init done"
