#!/usr/bin/env bash
# Install the third-party OpenAI-compatible servers of the `peers` test tier, each into its
# own virtualenv under .peers/ (they pin versions that conflict with mitmproxy's).
#
# Usage: scripts/install-peers.sh [NAME…]    (idempotent: an installed peer is skipped;
#                                             NAME: only these peers)
#        WIREDIFF_PEERS_DIR=/elsewhere PYTHON=python3.11 scripts/install-peers.sh
#
# A peer counts as installed when .peers/<name>/.installed holds exactly its pip spec, so
# changing a pin below reinstalls that peer from scratch. pip's output goes to
# .peers/<name>/install.log and is shown only when something fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS_DIR="${WIREDIFF_PEERS_DIR:-$ROOT/.peers}"
PYTHON="${PYTHON:-python3}"

# name | pip requirements (space-separated) | distribution to check | command the tests run
# llama-cpp-python is built from source by pip (pip's wheel cache makes a reinstall take
# seconds); `gguf` writes the tests' tiny random-weight model.
PEERS=(
  "litellm|litellm[proxy]==1.108.7|litellm|bin/litellm"
  "fakellm|fakellm==0.3.5|fakellm|bin/fakellm"
  "llama|llama-cpp-python[server]==0.3.36 gguf==0.19.0|llama_cpp_python|bin/python"
  "ors|open-responses-server==0.4.1|open-responses-server|bin/uvicorn"
)

# What the tests use of llama.cpp is its library under llama-cpp-python's Python server: no
# multimodal library (llava/mtmd, imported only by vision chat handlers), no common library
# (see llama-cpp-library-only.cmake), no tools, examples, tests or C++ server, no tuning
# for this machine's CPU; on every core. A third of the full build.
LLAMA_CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DLLAMA_BUILD_TOOLS=OFF"
LLAMA_CMAKE_ARGS+=" -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF"
LLAMA_CMAKE_ARGS+=" '-DCMAKE_PROJECT_llama.cpp_INCLUDE=$ROOT/scripts/llama-cpp-library-only.cmake'"
export CMAKE_ARGS="${CMAKE_ARGS:-$LLAMA_CMAKE_ARGS}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"

die() { echo "install-peers: $*" >&2; exit 1; }

command -v "$PYTHON" >/dev/null || die "no '$PYTHON' on PATH (set PYTHON=...)"
"$PYTHON" -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' 2>/dev/null \
  || die "'$PYTHON' must be Python >= 3.10 with the venv module"
mkdir -p "$PEERS_DIR"

install_peer() {
  local name="$1" spec="$2" dist="$3" cmd="$4"
  local dir="$PEERS_DIR/$name" log="$PEERS_DIR/$name.install.log"
  if [[ -f "$dir/.installed" && "$(cat "$dir/.installed")" == "$spec" && -x "$dir/$cmd" ]]; then
    echo "install-peers: $name already installed ($spec)"
    return 0
  fi
  local t0=$SECONDS requirements
  read -r -a requirements <<<"$spec"
  rm -rf "$dir"
  if ! { "$PYTHON" -m venv "$dir" \
        && "$dir/bin/python" -m pip install --disable-pip-version-check --no-input -q \
             "${requirements[@]}"; } \
        >"$log" 2>&1; then
    # pip's warnings about this machine's extra (file://) indexes are noise, not the cause.
    grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -n 25 >&2 || true
    rm -rf "$dir"
    die "$name: pip install $spec failed (full log: $log)"
  fi
  local version
  version="$("$dir/bin/python" -c "import importlib.metadata as m; print(m.version('$dist'))")" \
    || die "$name: installed but '$dist' has no version"
  [[ -x "$dir/$cmd" ]] || die "$name: installed but $dir/$cmd is missing"
  mv "$log" "$dir/install.log"
  printf '%s' "$spec" >"$dir/.installed"
  echo "install-peers: $name $version installed in $((SECONDS - t0))s ($dir)"
}

# Side by side: llama-cpp-python's build while the others download.
chosen=()
for peer in "${PEERS[@]}"; do
  if [[ $# -eq 0 || " $* " == *" ${peer%%|*} "* ]]; then
    chosen+=("$peer")
  fi
done
for name in "$@"; do
  [[ " ${PEERS[*]%%|*} " == *" $name "* ]] || die "no peer named '$name' (peers: ${PEERS[*]%%|*})"
done
source "$ROOT/scripts/side-by-side.sh"
side_by_side install_peer "${chosen[@]}"
