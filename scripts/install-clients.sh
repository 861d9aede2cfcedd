#!/usr/bin/env bash
# Install the real OpenAI-API clients of the `clients` test tier, each into its own directory
# under .clients/: the npm packages with the machine's Node.js and npm, the Python libraries
# in their own virtualenvs (LangChain pulls openai 3.x, whose h11 clashes with mitmproxy's).
#
# Usage: scripts/install-clients.sh            (idempotent: an installed client is skipped)
#        WIREDIFF_CLIENTS_DIR=/elsewhere PYTHON=python3.11 scripts/install-clients.sh
#
# A client counts as installed when .clients/<name>/.installed holds exactly its spec, so
# changing a pin below reinstalls that client from scratch. The installer's output goes to
# .clients/<name>/install.log and is shown only when something fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLIENTS_DIR="${WIREDIFF_CLIENTS_DIR:-$ROOT/.clients}"
PYTHON="${PYTHON:-python3}"

# name | kind (npm or pip) | packages, space-separated | file the tests run
CLIENTS=(
  "node|npm|openai@6.49.0 undici@7.30.2|node_modules/openai/package.json"
  "codex|npm|@openai/codex@0.171.0|node_modules/.bin/codex"
  "langchain|pip|langchain-openai==1.7.4|bin/python"
  "llamaindex|pip|llama-index-llms-openai-like==0.8.1 llama-index-llms-openai==0.8.3|bin/python"
  "agents|pip|openai-agents==0.24.0|bin/python"
  "vercel|npm|ai@7.0.173 @ai-sdk/openai@4.0.118|node_modules/ai/package.json"
  "pydantic-ai|pip|pydantic-ai-slim[openai]==2.78.0|bin/python"
)

die() { echo "install-clients: $*" >&2; exit 1; }

mkdir -p "$CLIENTS_DIR"

install_client() {
  local name="$1" kind="$2" spec="$3" file="$4"
  local dir="$CLIENTS_DIR/$name" log="$CLIENTS_DIR/$name.install.log"
  if [[ -f "$dir/.installed" && "$(cat "$dir/.installed")" == "$kind $spec" && -e "$dir/$file" ]]; then
    echo "install-clients: $name already installed ($spec)"
    return 0
  fi
  local t0=$SECONDS
  rm -rf "$dir"
  local -a packages
  read -r -a packages <<<"$spec"
  local ok=true
  case "$kind" in
    npm)
      command -v npm >/dev/null || die "$name: no 'npm' on PATH (Node.js >= 20 with npm is needed)"
      mkdir -p "$dir"
      npm install --prefix "$dir" --save-exact --no-audit --no-fund --loglevel=error \
        "${packages[@]}" >"$log" 2>&1 || ok=false
      ;;
    pip)
      "$PYTHON" -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' 2>/dev/null \
        || die "'$PYTHON' must be Python >= 3.10 with the venv module (set PYTHON=...)"
      { "$PYTHON" -m venv "$dir" \
        && "$dir/bin/python" -m pip install --disable-pip-version-check --no-input -q \
          "${packages[@]}"; } >"$log" 2>&1 || ok=false
      ;;
    *) die "$name: unknown kind '$kind'" ;;
  esac
  if [[ $ok != true ]]; then
    # pip's warnings about this machine's extra (file://) indexes are noise, not the cause.
    grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -n 25 >&2 || true
    rm -rf "$dir"
    die "$name: $kind install of '$spec' failed (full log: $log)"
  fi
  [[ -e "$dir/$file" ]] || die "$name: installed but $dir/$file is missing"
  mv "$log" "$dir/install.log"
  printf '%s' "$kind $spec" >"$dir/.installed"
  echo "install-clients: $name installed in $((SECONDS - t0))s, $(du -sh "$dir" | cut -f1) ($dir)"
}

source "$ROOT/scripts/side-by-side.sh"
side_by_side install_client "${CLIENTS[@]}"
