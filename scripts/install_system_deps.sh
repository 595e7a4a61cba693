#!/usr/bin/env bash
# Install what the integration tests run against, if missing (idempotent, safe to re-run):
#   chromium        - the report is opened in a real headless browser
#   prometheus      - a real Prometheus scrapes the exporter; promtool checks the alert rules
#   cmake, ninja    - to build llama.cpp's llama-server once (scripts/build_llama_server.sh),
#                     the real OpenAI-compatible engine the bench and telemetry tests drive
# Without root or apt-get it says what is missing and carries on: those tests then skip
# with a reason.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
want=()
command -v chromium >/dev/null 2>&1 || want+=(chromium)
command -v prometheus >/dev/null 2>&1 || want+=(prometheus)
command -v cmake >/dev/null 2>&1 || want+=(cmake)
command -v ninja >/dev/null 2>&1 || want+=(ninja-build)
command -v c++ >/dev/null 2>&1 || want+=(g++)
if [ ${#want[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install_system_deps: missing ${want[*]} (needs root and apt-get); those tests will skip" >&2
  else
    echo "install_system_deps: installing ${want[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
  fi
fi
# llama-server: built once from the llama.cpp source PyPI's llama-cpp-python vendors
# (about 8 minutes on 2 cores), cached outside the repository.
if command -v cmake >/dev/null 2>&1 && command -v ninja >/dev/null 2>&1; then
  bash "$here/build_llama_server.sh" || echo "install_system_deps: llama-server build failed; those tests will skip" >&2
fi
