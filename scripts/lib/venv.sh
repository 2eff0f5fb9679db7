# Sourced by the setup scripts: one cached virtual environment per requirements file.
#
# Requirements are installed by uv (from PyPI, kept in the cache: ~4x faster than pip on a fresh machine),
# except torch, which pip installs first: only pip reads this machine's pip configuration, which holds the
# local CPU wheel and the version cap (an unpinned source would pull gigabytes of CUDA packages). uv then keeps
# the installed torch, since it satisfies the same pin.

UV_VERSION=0.13.9

# ensure_uv: sets UV to a uv binary of UV_VERSION in the cache, installing it on first use.
ensure_uv() {
  local tools="${SPARKRUNNER_CACHE:-$HOME/.cache/sparkrunner}/tools-uv-$UV_VERSION"
  UV="$tools/bin/uv"
  [ -x "$UV" ] && return 0
  (
    flock 9
    [ -x "$UV" ] && exit 0
    rm -rf "$tools"
    "$PYTHON" -m venv "$tools"
    "$tools/bin/pip" install -q "uv==$UV_VERSION"
  ) 9>"${TMPDIR:-/tmp}/sparkrunner-uv.lock"
}

# ensure_venv VENV_DIR REQUIREMENTS_FILE [INSTALL_ARGS...]
# Creates VENV_DIR when it is missing or was made by another interpreter ($PYTHON); installs the requirements
# when they changed since the last successful install (what is new is added, what is there is kept), then
# installs this checkout into it, editable (saying so when it ran another checkout). Reruns with nothing
# changed cost seconds.
ensure_venv() {
  local venv=$1 requirements=$2; shift 2
  local python_stamp requirements_stamp torch_pin
  python_stamp=$("$PYTHON" -VV | sha256sum | cut -c1-16)
  requirements_stamp=$(cat "$requirements" | sha256sum | cut -c1-16)
  if [ "$(cat "$venv/.python-stamp" 2>/dev/null)" != "$python_stamp" ]; then
    echo "creating $venv for $("$PYTHON" -V)"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    echo "$python_stamp" > "$venv/.python-stamp"
  fi
  if [ "$(cat "$venv/.requirements-stamp" 2>/dev/null)" != "$requirements_stamp" ]; then
    echo "installing $requirements into $venv"
    torch_pin=$(grep -E '^torch==' "$requirements" || true)
    [ -z "$torch_pin" ] || "$venv/bin/pip" install -q "$@" "$torch_pin"
    ensure_uv
    "$UV" pip install -q --compile-bytecode --python "$venv/bin/python" "$@" -r "$requirements"
    echo "$requirements_stamp" > "$venv/.requirements-stamp"
  fi
  # one build of this checkout at a time: setup steps run concurrently and share its folder
  (
    flock 9
    local installed project_stamp
    installed=$(cd / && env -u PYTHONPATH "$venv/bin/python" -c \
      'import os, sparkrunner; print(os.path.dirname(os.path.dirname(sparkrunner.__file__)))' 2>/dev/null || true)
    project_stamp=$(sha256sum pyproject.toml | cut -c1-16)
    if [ "$installed" != "$PWD" ] || [ "$(cat "$venv/.project-stamp" 2>/dev/null)" != "$project_stamp" ]; then
      [ -z "$installed" ] || [ "$installed" = "$PWD" ] ||
        echo "$venv ran sparkrunner from $installed; it now runs this checkout ($PWD)"
      "$venv/bin/pip" install -q --no-deps --no-build-isolation -e .
      echo "$project_stamp" > "$venv/.project-stamp"
    fi
  ) 9>"${TMPDIR:-/tmp}/sparkrunner-editable.lock"
}
