#!/usr/bin/env bash
# Idempotent system dependencies for the integration tests of kvscope.telemetry:
#  - Debian's `prometheus` package (a real Prometheus server for the exporter test;
#    shared/reference/cpu_engines.md: bookworm ships 2.42.0, about 12 s to install);
#  - llama.cpp's `llama-server`, built once from source and cached (scripts/build_llama_server.sh).
# Both steps are skipped when already present; a missing tool degrades to a skipped test,
# never a failure, so the script warns instead of failing where it cannot install.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

if ! command -v prometheus >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == "0" ]]; then
        apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
            || echo "ci_deps.sh: could not install prometheus; its test will be skipped" >&2
    else
        echo "ci_deps.sh: prometheus missing and apt-get unavailable; its test will be skipped" >&2
    fi
fi

"$HERE/build_llama_server.sh" || echo "ci_deps.sh: llama-server build failed; its test will be skipped" >&2
exit 0
