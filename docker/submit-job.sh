#!/usr/bin/env bash
# One-shot job submitter of the compose stack (runs in the Flink image).
#   - The drift job already runs on the cluster: nothing to do (a second `up` is harmless).
#   - Otherwise submit it with `anchorwatch job submit`, resuming from the newest complete
#     retained checkpoint under the checkpoint volume when there is one, so that
#     `docker compose down` + `up` continues the open windows and the consumer offsets.
#     RESUME_FROM_CHECKPOINT=false starts without state (then `job.startup_mode` applies).
# The job's settings are this container's ANCHORWATCH_* variables.
set -euo pipefail

jobmanager="${JOBMANAGER:-jobmanager:8081}"
checkpoints="${CHECKPOINT_ROOT:-/var/lib/flink/checkpoints}"

active=$(anchorwatch job list --jobmanager "$jobmanager" \
  | awk '$2 ~ /^(CREATED|INITIALIZING|RUNNING|RESTARTING|RECONCILING)$/ && $NF == "anchorwatch-drift" {print $1}')
if [ -n "$active" ]; then
  echo "the drift job already runs on $jobmanager: $active"
  exit 0
fi

args=()
if [ "${RESUME_FROM_CHECKPOINT:-true}" = "true" ]; then
  # Newest first; a checkpoint is complete once its _metadata file exists.
  latest=$(find "$checkpoints" -mindepth 3 -maxdepth 3 -path '*/chk-*/_metadata' \
    -printf '%T@ %h\n' 2>/dev/null | sort -rn | head -n 1 | cut -d' ' -f2-)
  if [ -n "$latest" ]; then
    echo "resuming from $latest"
    args+=(--from-savepoint "file://$latest")
  fi
fi

exec anchorwatch job submit --jobmanager "$jobmanager" "${args[@]}"
