#!/usr/bin/env bash
# Launch a toolgym recipe on an unmodified verl (GPU cluster). Run from anywhere:
#   bash configs/verl/launch.sh toolsearcher_stb [hydra overrides, e.g. actor_rollout_ref.model.path=/models/qwen]
#   bash configs/verl/launch.sh magicselector_sealtools trainer.n_gpus_per_node=4
# Multi-node: start Ray yourself with the plugin variable set on every node, then launch on the head:
#   export VERL_USE_EXTERNAL_MODULES=toolgym.trainers.verl
#   ray start --head                      # node 0
#   ray start --address=<head-ip>:6379    # every other node
#   bash configs/verl/launch.sh toolsearcher_stb trainer.nnodes=2
# The GPU count and memory each recipe expects are at the top of its YAML.
set -euo pipefail
RECIPE=${1:?usage: launch.sh toolsearcher_stb|magicselector_sealtools [hydra overrides]}
shift
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
case "$RECIPE" in
  toolsearcher_stb)
    ENV_ID=toolgym/ToolSearch-StableToolBench-v0; SPLIT=test
    ENV_KWARGS='{"max_turns": 8, "top_k": 5, "token_budget": 768}' ;;
  magicselector_sealtools)
    ENV_ID=toolgym/Decompose-SealTools-v0; SPLIT=dev
    ENV_KWARGS='{"k": 10, "fusion": "round_robin"}' ;;
  *) echo "unknown recipe $RECIPE (toolsearcher_stb | magicselector_sealtools)" >&2; exit 2 ;;
esac
DATA=data_verl/$RECIPE
"$PY" -m toolgym.cli.main export-verl "$ENV_ID" --split "$SPLIT" --out "$DATA" --env-kwargs "$ENV_KWARGS"
"$PY" -m toolgym.cli.main export-verl "$ENV_ID" --split "$SPLIT" --out "$DATA/val" --env-kwargs "$ENV_KWARGS" --max-tasks 64
# Every verl process (driver, TaskRunner, workers) imports the plugin: it registers the
# toolgym_agent loop and the toolgym_turn_credit estimator. No verl file is patched.
export VERL_USE_EXTERNAL_MODULES=toolgym.trainers.verl
exec "$PY" -m verl.trainer.main_ppo --config-path "$PWD/configs/verl" --config-name "$RECIPE" "$@"
