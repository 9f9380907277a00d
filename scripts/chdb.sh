#!/usr/bin/env bash
# scripts/chdb.sh {install|path}
#
# chdb (PyPI) embeds a current ClickHouse server in a Python module. The
# ClickHouse sink's modern-server test (sink/clickhouse TestTypesModernServer)
# runs the DDL and the inserts of `cdcjoin ddl` for current servers in it,
# which Debian's clickhouse-server (18.16) cannot show.
#
#   install  create a virtualenv under ${CDCJOIN_CACHE:-$HOME/.cache/cdcjoin}/chdb-venv
#            with the pinned chdb (no pandas/pyarrow: the test needs neither);
#            idempotent (a marker file records the pinned versions)
#   path     print the virtualenv's python (what CDCJOIN_CHDB_PYTHON names)
set -euo pipefail
CHDB_VERSION=4.4.0
CHDB_CORE_VERSION=26.9.0
VENV="${CDCJOIN_CACHE:-$HOME/.cache/cdcjoin}/chdb-venv"
MARK="$VENV/.cdcjoin-chdb-$CHDB_VERSION-$CHDB_CORE_VERSION"
say() { echo "chdb.sh: $*" >&2; }

case "${1:-}" in
install)
	if [ -f "$MARK" ] && "$VENV/bin/python" -c 'import chdb.session' 2>/dev/null; then
		say "chdb $CHDB_VERSION already installed in $VENV"
		exit 0
	fi
	if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
		say "apt-get install python3-venv"
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y --no-install-recommends python3-venv >&2 ||
			{ apt-get update >&2 && apt-get install -y --no-install-recommends python3-venv >&2; }
	fi
	rm -rf "$VENV"
	python3 -m venv "$VENV"
	t0=$SECONDS
	"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps \
		"chdb==$CHDB_VERSION" "chdb-core==$CHDB_CORE_VERSION" >&2
	"$VENV/bin/python" -c 'import chdb.session as s; print(s.Session().query("SELECT version()", "TSV"), end="")' >&2
	touch "$MARK"
	say "installed chdb $CHDB_VERSION in $VENV in $((SECONDS - t0))s"
	;;
path)
	echo "$VENV/bin/python"
	;;
*)
	echo "usage: $0 {install|path}" >&2
	exit 2
	;;
esac
