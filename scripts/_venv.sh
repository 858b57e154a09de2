# Sourced by demo.sh and test.sh: create (or reuse) .venv in the repo root and install the project.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
if [ ! -x "$ROOT/.venv/bin/python" ]; then
  echo "creating virtual environment in $ROOT/.venv"
  "$PY" -m venv "$ROOT/.venv"
fi
# shellcheck disable=SC1091
. "$ROOT/.venv/bin/activate"
stamp="$ROOT/.venv/.installed-$(sha1sum "$ROOT/pyproject.toml" | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "installing super-marl and its pinned dependencies (first time: a few minutes; one line per package)"
  python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  # pip's own progress, one line per package (the full output goes to .venv/install.log)
  if ! python -m pip install --progress-bar off -e "$ROOT[test,pettingzoo-extra]" 2>&1 | tee "$ROOT/.venv/install.log" \
       | { grep --line-buffered -E '^(Collecting|Installing collected|Successfully installed)' || true; } \
       | sed -u 's/^/  /' | cut -c1-120; then
    tail -n 30 "$ROOT/.venv/install.log"; echo "install failed (full log: .venv/install.log)"; exit 1
  fi
  python -c "import suPER, torch, ray, pettingzoo, magent2, mpe2, pymunk" || { echo "install failed"; exit 1; }
  rm -f "$ROOT"/.venv/.installed-* && touch "$stamp"
fi
cd "$ROOT"
