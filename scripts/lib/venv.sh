# Sourced by the setup scripts: one cached virtual environment per requirements file.

# ensure_venv VENV_DIR REQUIREMENTS_FILE [PIP_INSTALL_ARGS...]
# (Re)creates VENV_DIR only when the requirements file or the interpreter ($PYTHON) changed, then installs
# this checkout into it, editable. Reruns cost seconds.
ensure_venv() {
  local venv=$1 requirements=$2; shift 2
  local stamp
  stamp=$(cat "$requirements" <("$PYTHON" -VV) | sha256sum | cut -c1-16)
  if [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "creating $venv from $requirements"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q "$@" -r "$requirements"
    echo "$stamp" > "$venv/.stamp"
  fi
  "$venv/bin/pip" install -q --no-deps --no-build-isolation -e .
}
