# deploy/local/lib.sh: helpers sourced by kafka.sh, connect.sh, postgres.sh
# and stack.sh. Not executable on its own.
#
# Conventions shared by the scripts (and by clickhouse.sh):
#   - `up` prints the `export CDCJOIN_...=...` line on stdout and everything
#     else on stderr, so `eval "$(deploy/local/kafka.sh up)"` works;
#   - state (config, data, logs, pid files) lives under deploy/local/.run/<name>/;
#   - a process is only ever stopped through the pid file its `up` wrote.
#
# Environment:
#   CDCJOIN_CACHE   cache root for fetched jars (default $HOME/.cache/cdcjoin)
#   JAVA            java binary (default: java on PATH)

LOCAL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$LOCAL_DIR/../.." && pwd)"
RUN_ROOT="$LOCAL_DIR/.run"
CACHE_DIR="${CDCJOIN_CACHE:-$HOME/.cache/cdcjoin}"
JARS_DIR="$CACHE_DIR/jars"
KAFKA_LIBS="$JARS_DIR/kafka"
PLUGIN_PATH="$JARS_DIR/connect-plugins"
DEBEZIUM_PLUGIN="$PLUGIN_PATH/debezium-postgres"
POM="$REPO_DIR/deploy/maven/pom.xml"
REGISTRY_POM="$REPO_DIR/deploy/maven/registry-pom.xml"
APICURIO_CONVERTER="$PLUGIN_PATH/apicurio-converter"
JAVA="${JAVA:-java}"

# SCRIPT names the calling script in messages.
SCRIPT="${SCRIPT:-$(basename "$0")}"

say() { echo "$SCRIPT: $*" >&2; }
die() { echo "$SCRIPT: error: $*" >&2; exit 1; }

# show_tail FILE...: print the last lines of each non-empty file to stderr.
show_tail() {
	local f
	for f in "$@"; do
		[ -s "$f" ] || continue
		echo "--- last 40 lines of $f" >&2
		tail -n 40 "$f" >&2
	done
}

# apt_install PKG...: install Debian packages that are missing.
apt_install() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	say "apt-get install ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
		apt-get update >&2
		apt-get install -y --no-install-recommends "${missing[@]}" >&2
	fi
}

# port_open PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# pid_alive PIDFILE: print the pid recorded in PIDFILE when that process lives.
pid_alive() {
	local pid
	[ -f "$1" ] || return 1
	pid="$(cat "$1" 2>/dev/null || true)"
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
	echo "$pid"
}

# start_bg PIDFILE LOG CMD...: start CMD detached (own session, stdin closed),
# output appended to LOG, and record its pid in PIDFILE.
start_bg() {
	local pidfile="$1" log="$2"
	shift 2
	mkdir -p "$(dirname "$pidfile")" "$(dirname "$log")"
	setsid "$@" >>"$log" 2>&1 </dev/null &
	echo "$!" >"$pidfile"
}

# stop_pid PIDFILE WHAT [TIMEOUT]: SIGTERM the process in PIDFILE, wait up to
# TIMEOUT seconds (default 60) for it to exit, then SIGKILL. Removes PIDFILE.
stop_pid() {
	local pidfile="$1" what="$2" timeout="${3:-60}" pid
	if ! pid="$(pid_alive "$pidfile")"; then
		rm -f "$pidfile"
		say "$what: not running"
		return 0
	fi
	kill -TERM "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + timeout))
	while kill -0 "$pid" 2>/dev/null; do
		if [ $SECONDS -ge $deadline ]; then
			say "$what (pid $pid) ignored SIGTERM for ${timeout}s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.5
			break
		fi
		sleep 0.2
	done
	rm -f "$pidfile"
	say "$what stopped (pid $pid)"
}

# ensure_java: install a Java 17 runtime and Maven when missing.
ensure_java() {
	command -v "$JAVA" >/dev/null 2>&1 || apt_install openjdk-17-jre-headless
	command -v mvn >/dev/null 2>&1 || apt_install maven
}

# fetch_jars PROFILE DIR [POM]: copy the runtime dependencies of the pom's
# PROFILE (default pom: $POM) into DIR, unless DIR already holds them for the
# current pom (marker file with the pom's hash).
fetch_jars() {
	local profile="$1" dir="$2" pom="${3:-$POM}" hash marker
	hash="$(sha256sum "$pom" | cut -d' ' -f1)"
	marker="$dir/.cdcjoin-pom-$profile"
	if [ -f "$marker" ] && [ "$(cat "$marker")" = "$hash" ]; then
		say "jars for '$profile' cached in $dir"
		return 0
	fi
	say "fetching jars for '$profile' into $dir (mvn dependency:copy-dependencies)"
	rm -rf "$dir"
	mkdir -p "$dir"
	local log="$CACHE_DIR/mvn-$profile.log"
	if ! mvn -B -q --no-transfer-progress -f "$pom" -P "$profile" \
		dependency:copy-dependencies -DoutputDirectory="$dir" >"$log" 2>&1; then
		show_tail "$log"
		rm -rf "$dir"
		die "mvn could not fetch the '$profile' jars (see $log)"
	fi
	echo "$hash" >"$marker"
}

# ensure_jars: the jar sets (Kafka runtime, Debezium plugin, Apicurio's
# converter plugin).
ensure_jars() {
	ensure_java
	mkdir -p "$CACHE_DIR"
	fetch_jars kafka "$KAFKA_LIBS"
	fetch_jars debezium-postgres "$DEBEZIUM_PLUGIN"
	ensure_converter
}

# ensure_converter: Apicurio's Avro converter as a Connect plugin. Its jar
# has no META-INF/services manifest, which Connect's
# plugin.discovery=service_load needs: Kafka's connect-plugin-path tool
# writes one into the plugin directory.
ensure_converter() {
	fetch_jars apicurio-converter "$APICURIO_CONVERTER" "$REGISTRY_POM"
	local marker="$APICURIO_CONVERTER/.cdcjoin-manifests"
	[ -f "$marker" ] && return 0
	say "writing Connect plugin manifests into $APICURIO_CONVERTER"
	kafka_java org.apache.kafka.tools.ConnectPluginPath sync-manifests \
		--plugin-location "$APICURIO_CONVERTER" >"$CACHE_DIR/sync-manifests.log" 2>&1 ||
		{ show_tail "$CACHE_DIR/sync-manifests.log"; die "connect-plugin-path sync-manifests failed"; }
	touch "$marker"
}

# require_jars: fail with a hint when `install` was not run.
require_jars() {
	local hash
	hash="$(sha256sum "$POM" | cut -d' ' -f1)"
	[ -f "$KAFKA_LIBS/.cdcjoin-pom-kafka" ] && [ "$(cat "$KAFKA_LIBS/.cdcjoin-pom-kafka")" = "$hash" ] ||
		die "Kafka jars missing or stale in $KAFKA_LIBS; run: $LOCAL_DIR/kafka.sh install"
}

# write_log4j FILE LOGFILE: a log4j2 config that logs INFO to LOGFILE.
write_log4j() {
	cat >"$1" <<EOF
# Generated by deploy/local/lib.sh.
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $2
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.kafka.name = org.apache.kafka
logger.kafka.level = info
logger.reflections.name = org.reflections
logger.reflections.level = error
EOF
}

# kafka_java CLASS ARGS...: run a Kafka main class in the foreground with the
# cached Kafka classpath and quiet logging (warnings to stderr).
kafka_java() {
	local cls="$1"
	shift
	"$JAVA" -Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
		-Dlog4j2.configurationFile="$LOCAL_DIR/log4j2-tools.properties" \
		-cp "$KAFKA_LIBS/*" "$cls" "$@"
}

# wait_ready WHAT PIDFILE TIMEOUT CHECK LOG...: poll the function CHECK every
# half second until it succeeds; fail with the LOG tails when the process in
# PIDFILE exits or TIMEOUT seconds pass.
wait_ready() {
	local what="$1" pidfile="$2" timeout="$3" check="$4"
	shift 4
	local deadline=$((SECONDS + timeout))
	until "$check"; do
		if ! pid_alive "$pidfile" >/dev/null; then
			show_tail "$@"
			die "$what exited during startup"
		fi
		if [ $SECONDS -ge $deadline ]; then
			show_tail "$@"
			die "$what not ready within ${timeout}s"
		fi
		sleep 0.5
	done
}
