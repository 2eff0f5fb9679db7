# Sourced by the setup scripts: installs Debian packages that are missing, one apt run at a time (setup steps run
# concurrently, and apt refuses to start while another apt holds its lock).

# apt_install_missing PKG...
apt_install_missing() {
  local missing=() pkg
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing Debian packages: ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  (
    flock 9
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
  ) 9>"${TMPDIR:-/tmp}/sparkrunner-apt.lock"
}
