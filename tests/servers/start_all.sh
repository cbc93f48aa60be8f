# shellcheck shell=bash
# Source me. Starts the loopback HTTP and S3 (moto) servers over a fixtures dir.
#   source tests/servers/start_all.sh
#   ib_start_servers /path/to/fixtures     # exports INSITUBATCH_HTTP_URL, INSITUBATCH_S3_* , AWS_*
#   ib_stop_servers
# Needs $IB_PY (see scripts/pyenv.sh: ib_test_venv) or python3 with moto+boto3.

_IB_SERVERS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

_ib_wait_file() {  # file timeout_s
    local f="$1" t="${2:-30}" i=0
    while [ ! -s "$f" ]; do
        sleep 0.1; i=$((i + 1))
        if [ "$i" -ge $((t * 10)) ]; then return 1; fi
    done
}

ib_start_servers() {
    local root="${1:?usage: ib_start_servers FIXTURES_DIR}"
    local py="${IB_PY:-python3}"
    root="$(cd "$root" && pwd)" || return 1
    _IB_SRV_TMP="$(mktemp -d -t ib-servers.XXXXXX)"
    export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
    export AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1
    export AWS_ALLOW_HTTP=true AWS_EC2_METADATA_DISABLED=true
    "$py" "$_IB_SERVERS_DIR/http_server.py" --root "$root" --port 0 \
        --port-file "$_IB_SRV_TMP/http.port" >"$_IB_SRV_TMP/http.log" 2>&1 &
    _IB_HTTP_PID=$!
    "$py" "$_IB_SERVERS_DIR/s3_server.py" --root "$root" --bucket fixtures \
        --port-file "$_IB_SRV_TMP/s3.url" >"$_IB_SRV_TMP/s3.log" 2>&1 &
    _IB_S3_PID=$!
    trap ib_stop_servers EXIT
    if ! _ib_wait_file "$_IB_SRV_TMP/http.port" 30; then
        echo "http server did not start:" >&2; cat "$_IB_SRV_TMP/http.log" >&2
        ib_stop_servers; return 1
    fi
    if ! _ib_wait_file "$_IB_SRV_TMP/s3.url" 30; then
        echo "s3 server did not start:" >&2; cat "$_IB_SRV_TMP/s3.log" >&2
        ib_stop_servers; return 1
    fi
    export INSITUBATCH_HTTP_URL="http://127.0.0.1:$(cat "$_IB_SRV_TMP/http.port")"
    export INSITUBATCH_S3_ENDPOINT="$(cat "$_IB_SRV_TMP/s3.url")"
    export INSITUBATCH_S3_BUCKET=fixtures
    export AWS_ENDPOINT_URL="$INSITUBATCH_S3_ENDPOINT"
}

ib_stop_servers() {
    local p
    for p in ${_IB_HTTP_PID:-} ${_IB_S3_PID:-}; do
        kill "$p" 2>/dev/null || true
    done
    for p in ${_IB_HTTP_PID:-} ${_IB_S3_PID:-}; do
        wait "$p" 2>/dev/null || true
    done
    _IB_HTTP_PID=; _IB_S3_PID=
    [ -n "${_IB_SRV_TMP:-}" ] && rm -rf "$_IB_SRV_TMP"
    _IB_SRV_TMP=
    trap - EXIT
}
