#!/usr/bin/env bash
# Rehearse a GPU lease on this CPU with the GPU node image's versions, before a node is lent:
# a Python 3.12 environment holding gpu/image-pins.txt (the image's torch, torchvision, Flax and
# numpy; the registry's newest JAX), the kit `make gpu-kit` makes for Python 3.12, and gpu/run.sh
# run with that Python from a copy of the checkout without .git or evidence, on
# params/gpu_rehearsal.yaml. What fails here would fail on the node for a reason a CPU can show.
#
#   gpu/rehearse.sh [--python PATH] [--work DIR]
#
# --python: a Python 3.12 (default: python3.12 on PATH, else pyenv's newest 3.12); --work: where
# the environment, the copy and the archive go (default: local/gpu-rehearsal/, which git ignores;
# the environment is kept there and reused). Needs PyPI the first time: torch's CUDA build and its
# CUDA libraries are about 4 GB to download and 8 GB on disk.
# Exit status: 0 the lease ran every cell; 1 it did not; 2 bad input, no Python 3.12 or no PyPI.
set -u -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
python=""
work=$root/local/gpu-rehearsal
while [ $# -gt 0 ]; do
  case $1 in
    --python) python=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu/rehearse.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
is312() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }
if [ -z "$python" ]; then
  # a pyenv shim is on PATH even where 3.12 is not the selected version, and then fails
  for candidate in "$(command -v python3.12)" \
    $(command -v pyenv >/dev/null && ls -d "$(pyenv root)"/versions/3.12*/bin/python3.12 2>/dev/null | sort -rV); do
    if [ -n "$candidate" ] && is312 "$candidate"; then python=$candidate; break; fi
  done
fi
if [ -z "$python" ] || ! is312 "$python"; then
  echo "gpu/rehearse.sh: no Python 3.12 (the node's); give one with --python" >&2
  exit 2
fi
say() { echo "gpu/rehearse.sh: $*" >&2; }
mkdir -p "$work"
env=$work/venv
if [ ! -x "$env/bin/python" ] || ! "$env/bin/python" -c 'import torch, jax, flax' 2>/dev/null; then
  say "building a Python 3.12 environment with the image's versions in $env"
  rm -rf "$env"
  "$python" -m venv "$env" || exit 2
  "$env/bin/python" -m pip install --quiet --upgrade pip || exit 2
fi
# again on a kept environment, so that a pin added since reaches it (quick when all are met)
"$env/bin/python" -m pip install --quiet -r "$root/gpu/image-pins.txt" ||
  { say "the image's versions did not install (is PyPI reachable?)"; exit 2; }
"$env/bin/python" -c 'import sys, torch, torchvision, jax, numpy
print("gpu/rehearse.sh: Python", sys.version.split()[0], "torch", torch.__version__,
      "torchvision", torchvision.__version__, "jax", jax.__version__, "numpy", numpy.__version__)' >&2

# the verdict lease's node time, counted from the H200's cells (PyYAML alone; tests check it too)
(cd "$root" && PYTHONPATH=lib "$env/bin/python" -m fwbench.pipeline.lease_budget \
  params/gpu_setup.yaml params/gpu_verdict.yaml:2 --then params/gpu_verdict.yaml:1 >&2) || exit 1

# the checkout as a node gets it: tracked and untracked files, no .git, no evidence
copy=$work/node/fwbench
rm -rf "$work/node" "$work/out"
mkdir -p "$copy"
(cd "$root" && git ls-files -co --exclude-standard -z |
  grep -zv -e '^executed/' -e '^figures/' -e '^report/' |
  tar --null --no-recursion --ignore-failed-read -T - -cf -) | tar -xf - -C "$copy" || exit 2
make --no-print-directory -C "$root" gpu-kit PYTHON="$env/bin/python" GPU_PYTHON=3.12 \
  GPU_KIT="$copy/gpu/kit" >&2 || { say "make gpu-kit failed (it needs PyPI)"; exit 2; }

say "running the lease on this CPU from $copy"
(cd "$copy" && PYTHON="$env/bin/python" OUT= bash gpu/run.sh --out "$work/out" --cap 900 \
  params/gpu_rehearsal.yaml)
status=$?
archive=$work/out/gpu_run.tar.gz
ran=$(tar -tzf "$archive" 2>/dev/null | grep -c '\.ipynb$')
say "the lease ended with status $status; $ran notebooks in $archive"
exit $(( status != 0 ))
