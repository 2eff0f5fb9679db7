# Sourced by the setup scripts: one cached virtual environment per requirements file.

# ensure_venv VENV_DIR REQUIREMENTS_FILE [PIP_INSTALL_ARGS...]
# Creates VENV_DIR when it is missing or was made by another interpreter ($PYTHON); installs the requirements
# when they changed since the last successful install (pip adds what is new, keeps what is already there),
# then installs this checkout into it, editable. Reruns with nothing changed cost seconds.
ensure_venv() {
  local venv=$1 requirements=$2; shift 2
  local python_stamp requirements_stamp
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
    "$venv/bin/pip" install -q "$@" -r "$requirements"
    echo "$requirements_stamp" > "$venv/.requirements-stamp"
  fi
  "$venv/bin/pip" install -q --no-deps --no-build-isolation -e .
}
