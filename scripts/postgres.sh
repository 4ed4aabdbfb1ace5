#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster on 127.0.0.1 for the tests: `scripts/postgres.sh start DIR`
# prints the server's URL (installing Debian's package first if needed); `scripts/postgres.sh stop DIR`
# stops it. The cluster trusts local connections and lives only in DIR.
set -euo pipefail
action=${1:?start or stop}
dir=${2:?a folder for the cluster}

bin() {
    local found
    found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    echo "$found"
}

case "$action" in
start)
    if [[ -z "$(bin)" ]]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    fi
    pg=$(bin)
    mkdir -p "$dir"
    # initdb refuses to run as root; the cluster belongs to the postgres user (or to us, when not root).
    as=()
    if [[ $(id -u) == 0 ]]; then
        chown postgres "$dir"
        as=(runuser -u postgres --)
    fi
    "${as[@]}" "$pg/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "${as[@]}" "$pg/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "-k $dir -p $port -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=on" start >/dev/null
    echo "postgres://postgres@127.0.0.1:$port/postgres"
    ;;
stop)
    as=()
    [[ $(id -u) == 0 ]] && as=(runuser -u postgres --)
    "${as[@]}" "$(bin)/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    ;;
*)
    echo "usage: $0 start|stop DIR" >&2
    exit 2
    ;;
esac
