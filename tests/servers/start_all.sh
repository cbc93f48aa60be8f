# shellcheck shell=bash
# Source me. Starts the loopback HTTP and S3 (moto) servers over a fixtures dir.
#   source tests/servers/start_all.sh
#   ib_start_servers /path/to/fixtures     # exports INSITUBATCH_HTTP_URL, INSITUBATCH_S3_*,
#                                          # INSITUBATCH_FAULTY_HTTP_URL (faulty_http.py),
#                                          # INSITUBATCH_S3_AUTH_* (moto checking signatures), AWS_*
#   ib_stop_servers
# Needs $IB_PY (see scripts/pyenv.sh: ib_test_venv) or python3 with moto+boto3.

_IB_SERVERS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Start a server that prints where it listens as its first stdout line (`--port-file -`)
# and read that line: the wait ends when the server is ready, or fails at once when it
# exits first. A fifo, not a file to poll. Sets _IB_PID and _IB_LINE.
#   _ib_start LOG CMD...
_ib_start() {
    local log="$1" fifo fd
    shift
    fifo="$(mktemp -u "$_IB_SRV_TMP/ready.XXXXXX")"
    mkfifo "$fifo"
    "$@" >"$fifo" 2>"$log" &
    _IB_PID=$!
    exec {fd}<"$fifo"   # returns once the server holds the fifo open as its stdout
    rm -f "$fifo"
    _IB_LINE=
    # The bound only turns a server hung before it listens into an error instead of a hang.
    read -r -t 300 -u "$fd" _IB_LINE || true
    exec {fd}<&-
    [ -n "$_IB_LINE" ]
}

# Start the server NAME with _ib_start; if it does not come up, print its log, stop it and
# the ones already started, and fail.
#   _ib_server NAME CMD...
_ib_server() {
    local name="$1"
    shift
    _ib_start "$_IB_SRV_TMP/$name.log" "$@" && return 0
    kill "$_IB_PID" 2>/dev/null || true
    echo "$name server did not start:" >&2
    cat "$_IB_SRV_TMP/$name.log" >&2
    ib_stop_servers
    return 1
}

ib_start_servers() {
    local root="${1:?usage: ib_start_servers FIXTURES_DIR}"
    local py="${IB_PY:-python3}"
    root="$(cd "$root" && pwd)" || return 1
    _IB_SRV_TMP="$(mktemp -d -t ib-servers.XXXXXX)"
    export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
    export AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1
    export AWS_ALLOW_HTTP=true AWS_EC2_METADATA_DISABLED=true
    trap ib_stop_servers EXIT
    local srv="$_IB_SERVERS_DIR"
    _ib_server http "$py" "$srv/http_server.py" --root "$root" --port 0 --port-file - || return 1
    _IB_HTTP_PID=$_IB_PID
    export INSITUBATCH_HTTP_URL="http://127.0.0.1:$_IB_LINE"
    _ib_server s3 "$py" "$srv/s3_server.py" --root "$root" --bucket fixtures --port-file - || return 1
    _IB_S3_PID=$_IB_PID
    export INSITUBATCH_S3_ENDPOINT="$_IB_LINE"
    _ib_server faulty-http "$py" "$srv/faulty_http.py" --root "$root" --port 0 --port-file - || return 1
    _IB_FAULTY_PID=$_IB_PID
    export INSITUBATCH_FAULTY_HTTP_URL="http://127.0.0.1:$_IB_LINE"
    _ib_server s3-auth "$py" "$srv/s3_server.py" --root "$root" --bucket signed --auth --only v3_zstd \
        --port-file - || return 1
    _IB_S3_AUTH_PID=$_IB_PID
    read -r INSITUBATCH_S3_AUTH_ENDPOINT INSITUBATCH_S3_AUTH_KEY_ID INSITUBATCH_S3_AUTH_SECRET <<<"$_IB_LINE"
    export INSITUBATCH_S3_AUTH_ENDPOINT INSITUBATCH_S3_AUTH_KEY_ID INSITUBATCH_S3_AUTH_SECRET
    export INSITUBATCH_S3_BUCKET=fixtures
    export AWS_ENDPOINT_URL="$INSITUBATCH_S3_ENDPOINT"
}

ib_stop_servers() {
    local p
    for p in ${_IB_HTTP_PID:-} ${_IB_S3_PID:-} ${_IB_FAULTY_PID:-} ${_IB_S3_AUTH_PID:-}; do
        kill "$p" 2>/dev/null || true
    done
    for p in ${_IB_HTTP_PID:-} ${_IB_S3_PID:-} ${_IB_FAULTY_PID:-} ${_IB_S3_AUTH_PID:-}; do
        wait "$p" 2>/dev/null || true
    done
    _IB_HTTP_PID=; _IB_S3_PID=; _IB_FAULTY_PID=; _IB_S3_AUTH_PID=
    [ -n "${_IB_SRV_TMP:-}" ] && rm -rf "$_IB_SRV_TMP"
    _IB_SRV_TMP=
    trap - EXIT
}
