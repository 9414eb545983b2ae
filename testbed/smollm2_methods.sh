#!/usr/bin/env bash
# The methods on a real model: GRPO, AMIR-GRPO, LENS and AMIR-GRPO + LENS on
# configs/smollm2_arith.yaml (SmolLM2-135M-Instruct + LoRA, arithmetic expressions), one run of
# each per seed, seeds outermost, then per seed `groupwise report` of the four: held-out
# accuracy before -> after with its paired interval, and each method's final accuracy against
# GRPO's, paired problem by problem (same held-out problems and sampling seeds).
#
#   bash testbed/smollm2_methods.sh                      # seeds 0 and 1 into runs/smollm2-methods
#   SEEDS="2 3" bash testbed/smollm2_methods.sh          # more seeds
#   METHODS="grpo lens" bash testbed/smollm2_methods.sh  # some of the methods
#
# Resumable: run it again after a stop and each run continues from its last checkpoint; a
# finished run prints its summary again. In .venv-vllm (rollouts on vLLM) where
# scripts/setup_vllm.sh made it, else .venv. About 35 minutes a run on 2 cores with vLLM
# (docs/guides/train.md, "A real model learns"). Extra arguments are overrides of every run.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${GROUPWISE_DATA:-}" ] && [ -d ../shared/data ]; then
  export GROUPWISE_DATA="$PWD/../shared/data"
fi
venv=.venv
if [ -f .venv-vllm/.setup-stamp ]; then venv=.venv-vllm; fi
runs=${RUNS:-runs/smollm2-methods}
read -r -a seeds <<< "${SEEDS:-0 1}"
read -r -a methods <<< "${METHODS:-grpo amir lens amir_lens}"
overrides() {
  case $1 in
    grpo) echo algorithm.amir=false algorithm.advantage=grpo ;;
    amir) echo algorithm.amir=true algorithm.advantage=grpo ;;
    lens) echo algorithm.amir=false algorithm.advantage=lens ;;
    amir_lens) echo algorithm.amir=true algorithm.advantage=lens ;;
    *) echo "unknown method $1 (grpo, amir, lens, amir_lens)" >&2; return 1 ;;
  esac
}
for method in "${methods[@]}"; do overrides "$method" > /dev/null; done
for seed in "${seeds[@]}"; do
  folders=()
  for method in "${methods[@]}"; do
    folder=$runs/seed$seed/$method
    read -r -a method_overrides <<< "$(overrides "$method")"
    resume=()
    if [ -d "$folder" ]; then resume=(--resume); fi
    echo "== seed $seed, $method -> $folder"
    "$venv/bin/groupwise" train --config configs/smollm2_arith.yaml \
      ${resume[@]+"${resume[@]}"} train.output_dir="$folder" train.seed="$seed" \
      ${method_overrides[@]+"${method_overrides[@]}"} "$@"
    folders+=("$folder")
  done
  echo "== seed $seed: the methods compared"
  "$venv/bin/groupwise" report "${folders[@]}" --png "$runs/seed$seed/methods.png"
done
