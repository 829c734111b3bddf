#!/usr/bin/env bash
# Run the GPU lease campaigns on a node without network, inside a hard time cap, and pack the
# executed run into one archive.
#
#   gpu/run.sh [--out DIR] [--cap SECONDS] [--cell-cap SECONDS] [--keep DIR] [--resume]
#              [--invocations N] [CAMPAIGN.yaml ...]
#
# Defaults: params/gpu_lease.yaml, then params/gpu_lease_fp32.yaml while time is left; the archive
# goes to --out, else $OUT, else local/gpu/; the whole series stops at --cap (470 s) and any one
# code cell at --cell-cap (240 s). A lease of several commands (params/gpu_verdict.yaml): --keep
# DIR keeps the runs in DIR/executed for the next command, --resume passes `fwbench run --resume`,
# --invocations N applies to the campaigns named after it. Needs the kit `make gpu-kit` wrote to
# gpu/kit/ on a machine with the registries. The node's torch, torchvision, JAX and Flax are used as
# they are; Flax comes from the kit only when the node's has no NNX. Runs are not indexed here (no
# DuckDB on the node): unpack the archive into executed/ and run `fwbench ingest` where the index lives.
# Exit status: 0 every cell ok; 1 a cell failed or the cap cut the series; 2 bad input or no kit.
set -u -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/local/gpu}
cap=470
cell_cap=240
keep=""
resume=()
invocations=""
campaigns=()
runs=()  # per campaign: the --invocations given before it, or "" for the campaign's own
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --cap) cap=$2; shift 2 ;;
    --cell-cap) cell_cap=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --resume) resume=(--resume); shift ;;
    --invocations) invocations=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu/run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) campaigns+=("$1"); runs+=("$invocations"); shift ;;
  esac
done
[ ${#campaigns[@]} -gt 0 ] || { campaigns=(params/gpu_lease.yaml params/gpu_lease_fp32.yaml); runs=("" ""); }
case "$cap$cell_cap${invocations:-1}" in *[!0-9]*|'') echo "gpu/run.sh: --cap, --cell-cap and --invocations take whole numbers" >&2; exit 2 ;; esac
kit=$root/gpu/kit
if ! ls "$kit"/*.whl >/dev/null 2>&1; then
  echo "gpu/run.sh: no kit in gpu/kit/: run 'make gpu-kit' on a machine with the registries" >&2
  exit 2
fi
for c in "${campaigns[@]}"; do
  [ -f "$root/$c" ] || [ -f "$c" ] || { echo "gpu/run.sh: no campaign file $c" >&2; exit 2; }
done
deadline=$(( $(date +%s) + cap ))
python=${PYTHON:-python3}
cd "$root" || exit 2
mkdir -p "$out"
work=$(mktemp -d)
log=$work/run.log
# where the runs go: this call's own folder, or one kept for the lease's next command
runs_root=$work
if [ -n "$keep" ]; then
  mkdir -p "$keep/executed" && runs_root=$(cd "$keep" && pwd) || { echo "gpu/run.sh: cannot use --keep $keep" >&2; exit 2; }
fi
say() { echo "gpu/run.sh: $*" | tee -a "$log" >&2; }

# the kit, offline, beside the node's packages (never over them)
site=$work/site
"$python" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \
  --target "$site" "$kit"/*.whl 2>&1 | tee -a "$log" || { say "the kit did not install"; exit 2; }
export PYTHONPATH=$root/lib:$site${PYTHONPATH:+:$PYTHONPATH}
nnx_check='from flax import nnx; nnx.Linear, nnx.Rngs'
if ! "$python" -c "$nnx_check" >>"$log" 2>&1; then
  say "this node's Flax has no working NNX: using the kit's $(basename "$kit"/fallback/flax-*.whl)"
  "$python" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \
    --target "$work/flax" "$kit"/fallback/flax-*.whl 2>&1 | tee -a "$log"
  export PYTHONPATH=$work/flax:$PYTHONPATH
  "$python" -c "$nnx_check" >>"$log" 2>&1 || say "nor has the kit's: the JAX cells will fail"
fi
# no .git travels: records name the commit the kit was made from
[ -f "$kit/COMMIT" ] && export FWBENCH_COMMIT="$(cat "$kit/COMMIT")"
# ipykernel's own kernel, run by this Python with the PYTHONPATH above
export FWBENCH_KERNEL=python3 PYTHONUNBUFFERED=1
{ if command -v nvidia-smi >/dev/null; then nvidia-smi -L 2>&1; else echo "no nvidia-smi"; fi; "$python" -c 'import sys, torch, jax, flax
print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(),
      "jax", jax.__version__, jax.devices(), "flax", flax.__version__)' 2>&1; } | tee -a "$log"

status=0
for i in "${!campaigns[@]}"; do
  c=${campaigns[$i]}
  left=$(( deadline - $(date +%s) ))
  if [ "$left" -lt 60 ]; then
    say "skipped $c: ${left} s of the ${cap} s cap left"
    status=1
    continue
  fi
  say "running $c with ${left} s left"
  # ${a[@]+"${a[@]}"}: an empty array expands to nothing under set -u in every bash
  more=(${resume[@]+"${resume[@]}"})
  [ -n "${runs[$i]}" ] && more+=(--invocations "${runs[$i]}")
  timeout --kill-after=15 "$left" "$python" -m fwbench run "$c" --no-index ${more[@]+"${more[@]}"} \
    --timeout "$cell_cap" --out "$runs_root/executed" 2>&1 | tee -a "$log"
  rc=$?
  case $rc in
    0) ;;
    124|137) say "the cap cut $c short: its finished cells are kept"; status=1 ;;
    *) say "$c ended with status $rc"; status=1 ;;
  esac
done

# the kit's commit beside each run's manifest: the code that ran, whatever .git the copy carried
if [ -f "$kit/COMMIT" ]; then
  for manifest in "$runs_root"/executed/*/*/manifest.json; do
    [ -f "$manifest" ] && cp "$kit/COMMIT" "$(dirname "$manifest")/kit_commit.txt"
  done
fi
# one archive: at most 16 MiB comes back from a node per file
tar -czf "$out/gpu_run.tar.gz" -C "$runs_root" executed -C "$work" run.log 2>/dev/null ||
  tar -czf "$out/gpu_run.tar.gz" -C "$work" run.log
say "packed $(du -h "$out/gpu_run.tar.gz" | cut -f1) into $out/gpu_run.tar.gz"
exit $status
