#!/usr/bin/env bash
# Runs a command against a throw-away PostgreSQL on 127.0.0.1 (free port, temp dir), exporting
# GPUHUB_TEST_POSTGRES_URL and GPUHUB_TEST_POSTGRES_RESTART (a script that restarts the server, for chaos tests).
# PostgreSQL refuses to run as root: as root the server runs as the "postgres" user.
# Needs initdb/pg_ctl/postgres on PATH or in /usr/local/bin or /usr/lib/postgresql/*/bin.
set -euo pipefail

find_bin() {
	local b
	for b in "$(command -v "$1" 2>/dev/null || true)" /usr/local/bin/"$1" /usr/lib/postgresql/*/bin/"$1"; do
		[[ -n "$b" && -x "$b" ]] && { echo "$b"; return; }
	done
	echo "with-postgres: $1 not found; install PostgreSQL (apt-get install -y postgresql) and retry" >&2
	exit 1
}
INITDB=$(find_bin initdb)
PG_CTL=$(find_bin pg_ctl)

dir=$(mktemp -d -t gpuhub-pg.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as_pg=()
if [[ $(id -u) == 0 ]]; then
	id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
	chown postgres "$dir"
	chmod 700 "$dir"
	as_pg=(runuser -u postgres --)
fi
cleanup() {
	"${as_pg[@]}" "$PG_CTL" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT

echo "==> starting PostgreSQL ($("$INITDB" --version)) on 127.0.0.1:$port in $dir"
"${as_pg[@]}" "$INITDB" -D "$dir/data" -U gpuhub --auth=trust --no-sync >"$dir/initdb.log" 2>&1 ||
	{ cat "$dir/initdb.log" >&2; exit 1; }
"${as_pg[@]}" "$PG_CTL" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
	-o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off" start >/dev/null ||
	{ cat "$dir/server.log" >&2; exit 1; }
export GPUHUB_TEST_POSTGRES_URL="postgres://gpuhub@127.0.0.1:$port/postgres?sslmode=disable"
# Chaos tests restart this server under a writer: a fast shutdown, then a start with the same options.
printf '#!/usr/bin/env bash\nexec %s %q -D %q -l %q -w -t 30 -m fast restart\n' \
	"${as_pg[*]:-}" "$PG_CTL" "$dir/data" "$dir/server.log" >"$dir/restart.sh"
chmod 755 "$dir/restart.sh"
export GPUHUB_TEST_POSTGRES_RESTART="$dir/restart.sh"
"$@"
