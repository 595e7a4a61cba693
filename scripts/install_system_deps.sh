#!/usr/bin/env bash
# Install the system packages the integration tests use, if missing (idempotent):
#   chromium    - the report is opened in a real headless browser
#   prometheus  - a real Prometheus scrapes the exporter; promtool checks the alert rules
# Without root or apt-get it says what is missing and carries on: those tests then skip
# with a reason.
set -euo pipefail
want=()
command -v chromium >/dev/null 2>&1 || want+=(chromium)
command -v prometheus >/dev/null 2>&1 || want+=(prometheus)
if [ ${#want[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install_system_deps: missing ${want[*]} (needs root and apt-get); those tests will skip" >&2
  exit 0
fi
echo "install_system_deps: installing ${want[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
