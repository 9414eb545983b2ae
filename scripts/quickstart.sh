#!/usr/bin/env bash
# The main job: set up .venv if needed, then reinforcement learning from the small policy
# shipped in the package (arith-base) on the synthetic arith task, with GRPO, AMIR-GRPO and
# LENS one after another (configs/quickstart.yaml), each evaluated on held-out problems before,
# during and after training; then one table and one figure comparing them.
#
#   bash scripts/quickstart.sh                          # runs/quickstart/{grpo,amir,lens}
#   RUNS=runs/qs-seed1 bash scripts/quickstart.sh train.seed=1   # overrides go to every run
#   bash scripts/quickstart.sh --config configs/smollm2_arith.yaml   # one run of a config
#     (in .venv-vllm when scripts/setup_vllm.sh has made it, so `engine: auto` is vLLM)
#
# A stopped quickstart continues where it stopped when run again; a finished one prints its
# results again. To start over: rm -r runs/quickstart (or another RUNS folder).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -z "${GROUPWISE_DATA:-}" ] && [ -d ../shared/data ]; then
  export GROUPWISE_DATA="$PWD/../shared/data"
fi
if [ "${1:-}" = "--config" ]; then
  # A config with rollout.engine auto samples with vLLM where scripts/setup_vllm.sh installed it.
  venv=.venv
  if [ -f .venv-vllm/.setup-stamp ]; then venv=.venv-vllm; fi
  exec "$venv/bin/groupwise" train "$@"
fi
runs=${RUNS:-runs/quickstart}
SECONDS=0
names=(GRPO AMIR-GRPO LENS)
folders=("$runs/grpo" "$runs/amir" "$runs/lens")
methods=("" "algorithm.amir=true" "algorithm.advantage=lens")
for i in 0 1 2; do
  echo "== $((i + 1))/3 ${names[i]} -> ${folders[i]}"
  resume=()
  if [ -d "${folders[i]}" ]; then resume=(--resume); fi
  # shellcheck disable=SC2086  # methods[i] is one override or none
  .venv/bin/groupwise train --config configs/quickstart.yaml ${resume[@]+"${resume[@]}"} \
    train.output_dir="${folders[i]}" ${methods[i]} "$@"
  echo
done
echo "== held-out accuracy before and after training, and what each method did"
.venv/bin/groupwise report "${folders[@]}" --png "$runs/quickstart.png"
echo "quickstart: $((SECONDS / 60)) min $((SECONDS % 60)) s after set-up"
