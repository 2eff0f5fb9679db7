#!/usr/bin/env bash
# Setup step: Debian's Chromium and its chromedriver, which tests/observe/test_report_in_browser.py drives headless (through selenium, pinned
# in requirements/main.txt) to check the run report and the notebook's live view as a person sees them. No
# browser is downloaded at test time: selenium is pointed at /usr/bin/chromium and /usr/bin/chromedriver.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/apt.sh
apt_install_missing chromium chromium-driver
echo "browser: $(chromium --version 2>/dev/null), $(chromedriver --version | cut -d' ' -f1-2)"
