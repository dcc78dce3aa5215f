# Sourced by scripts/setup.sh and scripts/setup_vllm.sh: `uv_install VENV ARGS...` installs ARGS into the
# virtual environment VENV with uv (the version below), itself installed into VENV by the venv's pip first.
#
# uv resolves, downloads and installs in parallel: .venv's packages in well under a minute on 2 cores
# (pip: 2-3 minutes) and .venv-vllm's 4 GB in about a minute (pip: 4-5 minutes, 2.5 of them CPU-minutes
# that the test suite beside it in .ci/run lost). It compiles the bytecode of every module as pip does
# (without it, a process run with PYTHONDONTWRITEBYTECODE would compile every module it imports, each
# time), unless UV_INSTALL_COMPILE=0: scripts/setup.sh then compiles only what rlbench imports
# (scripts/compile_imports.py), a fifth of the files. It reads
# none of pip's configuration, so the settings of a machine's pip that decide what is installed are
# handed to it, from pip's configuration files and environment (`pip config list`): the indexes (a mirror),
# the wheel folders (find-links, where a machine keeps its CPU build of torch) and the constraint files (a
# machine's cap); over several indexes uv picks, as pip does, the best version any of them has.
UV_VERSION=0.13.9

uv_install() {
    local venv=$1 key value
    shift
    case "$("$venv/bin/uv" --version 2>/dev/null)" in  # "uv 0.13.9 (x86_64-unknown-linux-gnu)"
        "uv $UV_VERSION" | "uv $UV_VERSION "*) ;;
        *) "$venv/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" ;;
    esac
    local args=(pip install -q --python "$venv/bin/python" --index-strategy unsafe-best-match)
    if [ "${UV_INSTALL_COMPILE:-1}" != 0 ]; then args+=(--compile-bytecode); fi
    # lines such as global.constraint='/etc/xdg/pip/constraints.txt' or :env:.find-links='/opt/wheels'
    while IFS="=" read -r key value; do
        value=${value#\'}
        value=${value%\'}
        for v in $value; do
            case "${key##*.}" in
                find-links) args+=(--find-links "$v") ;;
                index-url) args+=(--index-url "$v") ;;
                extra-index-url) args+=(--extra-index-url "$v") ;;
                constraint) [ -f "$v" ] && args+=(-c "$v") ;;
            esac
        done
    done < <("$venv/bin/python" -m pip config list 2>/dev/null)
    "$venv/bin/uv" "${args[@]}" "$@"
}
