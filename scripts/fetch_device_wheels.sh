#!/usr/bin/env bash
# Download the wheels benchmarks/device_check.sh needs on the GPU device machine into .whl/ (repo root).
#
# The device image (/work/.library/device/KINDS.md, nvidia-h200) has python3 3.12 with torch, numpy, scipy,
# pyyaml, typer, pytest, cloudpickle, typing-extensions... but not the pursuit game's libraries. The
# pursuit-only code paths of the check (suPER.envs, suPER.native.packed, VecPursuitEnv, the gpu-marked tests
# of tests/envs/test_vec_pursuit.py and tests/native/test_packed.py) import, beyond the image:
#   pettingzoo        (pettingzoo.sisl.pursuit.pursuit_base: the game VecPursuitEnv reproduces)
#   gymnasium         (imported by pettingzoo)         farama-notifications (imported by gymnasium)
#   pygame-ce         (imported by pursuit_base; 12 MB, the bulk)
# ray, wandb, magent2 and supersuit are not needed there (magent2 is imported on first use only).
# Versions: this project's venv (pyproject.toml pins pettingzoo 1.27.*, gymnasium >=1,<1.3).
#
# The machine has no internet: the wheels travel in the working tree, named in the run's carry: [".whl"]
# (64 MiB limit for everything that travels; these are ~15 MB). .whl/ is ignored through the repository's
# shared info/exclude (for a worktree that is the main checkout's .git/info/exclude), added here if missing.
#
# Usage (repo root, where pip can reach the index):  bash scripts/fetch_device_wheels.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
WHEELS=(pettingzoo==1.27.0 gymnasium==1.2.2 farama-notifications==0.0.6 pygame-ce==2.5.8)

exclude="$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"

mkdir -p .whl
# cp312 manylinux x86-64, as /work/.library/device/README.md prescribes (pip matches each manylinux tag exactly)
"$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
# one version of each: two stop the device's pip install
dups="$(ls .whl/*.whl | xargs -n1 basename | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort | uniq -d)"
if [ -n "$dups" ]; then
  echo "scripts/fetch_device_wheels.sh: .whl/ holds two versions of: $dups (delete the older)" >&2
  exit 2
fi
echo "wheels in .whl/: $(ls .whl/*.whl | wc -l) files, $(du -sh .whl | cut -f1) (carry: [\".whl\"])"
