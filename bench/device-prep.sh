#!/usr/bin/env bash
# Prepares .devbench/ in the repository's root: everything `make bench`'s
# harness needs on a lent machine that has no Go, no Redis, no PostgreSQL
# and reaches no registry (the `device` tool's 16-core machines, Ubuntu).
#
#   bench/device-prep.sh                 # here: builds .devbench/ (ignored by git)
#   bash .devbench/run.sh [bench flags]  # there, with .devbench carried: results land in $OUT
#
# The bundle holds the bench binary, the River program built beforehand
# (-river-bin), nats.conf, and Debian's redis-server and PostgreSQL with the
# loader and libraries they were linked against. PostgreSQL's programs get
# that loader as their interpreter and the bundle's library folder as their
# search path (patchelf), so initdb can start postgres as it does anywhere;
# both go to the paths Debian's build expects (/usr/lib/postgresql/<major>,
# /usr/share/postgresql/<major>). Everything is packed as one xz archive,
# since a device call carries at most 64 MiB.
set -eu
root=$(git rev-parse --show-toplevel); cd "$root"
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
command -v patchelf >/dev/null || missing+=(patchelf)
command -v xz >/dev/null || missing+=(xz-utils)
if [ ${#missing[@]} -gt 0 ]; then
	apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
pgdir=$(dirname "$pgbin"); major=$(basename "$pgdir")
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
b=$stage/devbench; mkdir -p "$b/lib" "$b/pg/lib" "$b/pg/share"
(cd bench && CGO_ENABLED=0 go build -ldflags='-s -w' -o "$b/bench" .)
(cd bench/river && CGO_ENABLED=0 go build -ldflags='-s -w' -o "$b/river" .)
cp nats.conf "$b/"
# libs copies each shared library a program needs, and the loader, into lib/.
libs() { for l in $(ldd "$1" | awk '/=>/{print $3} /ld-linux/{print $1}'); do cp -Ln "$l" "$b/lib/"; done; }
rs=$(readlink -f /usr/bin/redis-server); cp "$rs" "$b/redis-server.bin"; libs "$rs"
cat > "$b/redis-server" <<'W'
#!/bin/sh
exec /opt/devbench/lib/ld-linux-x86-64.so.2 --library-path /opt/devbench/lib /opt/devbench/redis-server.bin "$@"
W
mkdir -p "$b/pg/bin"
for p in initdb postgres pg_ctl; do
	cp "$pgbin/$p" "$b/pg/bin/"; libs "$pgbin/$p"
	patchelf --set-interpreter /opt/devbench/lib/ld-linux-x86-64.so.2 --force-rpath --set-rpath /opt/devbench/lib "$b/pg/bin/$p"
done
# The server's loadable modules (PL/pgSQL, the encoding conversions),
# without the JIT and its bitcode: JIT is off when its provider is absent.
for m in "$pgdir"/lib/*.so; do
	case $(basename "$m") in llvmjit*) continue ;; esac
	cp "$m" "$b/pg/lib/"; libs "$m"
done
cp -r "/usr/share/postgresql/$major/." "$b/pg/share/"
cp -r /usr/share/zoneinfo "$b/zoneinfo"
echo "$major" > "$b/pg/major"
cat > "$b/run.sh" <<'R'
#!/bin/bash
# On the device: install the bundle, then run the bench with the given flags
# (default: the full run, 2 reps). Results land in $OUT: benchmarks.md, bench.log.
set -u
mkdir -p /opt && tar -C /opt -xJf .devbench/bundle.tar.xz
/usr/bin/redis-server --version >/dev/null 2>&1 || cp /opt/devbench/redis-server /usr/bin/redis-server
major=$(cat /opt/devbench/pg/major)
mkdir -p "/usr/lib/postgresql/$major" "/usr/share/postgresql/$major"
cp -r /opt/devbench/pg/bin /opt/devbench/pg/lib "/usr/lib/postgresql/$major/"
cp -r /opt/devbench/pg/share/. "/usr/share/postgresql/$major/"
[ -e /usr/share/zoneinfo/UTC ] || { mkdir -p /usr/share/zoneinfo && cp -r /opt/devbench/zoneinfo/. /usr/share/zoneinfo/; }
id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
export TZ=UTC
echo "cores: $(nproc); $(grep -m1 'model name' /proc/cpuinfo)"
mkdir -p /tmp/wd && cd /tmp/wd
[ $# -gt 0 ] || set -- -reps 2
timeout "${DEVBENCH_TIMEOUT:-540}" /opt/devbench/bench -nats-conf /opt/devbench/nats.conf -river-bin /opt/devbench/river \
	-out "$OUT/benchmarks.md" "$@" >"$OUT/bench.log" 2>&1
echo "rc=$?"; tail -60 "$OUT/bench.log"
R
chmod +x "$b"/*.sh "$b/redis-server"
rm -rf .devbench; mkdir .devbench
grep -qx '/.devbench/' .git/info/exclude 2>/dev/null || echo '/.devbench/' >> .git/info/exclude
tar -C "$stage" -cf - devbench | xz -T0 -6 > .devbench/bundle.tar.xz
cp "$b/run.sh" .devbench/run.sh
du -sh .devbench
