#!/usr/bin/env bash
# A real Kubernetes control plane on this one machine for the tests: etcd, kube-apiserver (RBAC on),
# kube-controller-manager (the Job controller) and kwok (fake kubelets) on 127.0.0.1. kube-scheduler
# is built as well but only the benchmark starts it (bench/kubernetes_bind.py): in the tests the only
# scheduler is Fleetdeck.
#
#   tests/integrations/kubernetes/cluster.sh build   build the binaries into the cache if missing
#   tests/integrations/kubernetes/cluster.sh up      build if missing, generate certificates, start, wait
#   tests/integrations/kubernetes/cluster.sh status  daemons and nodes
#   tests/integrations/kubernetes/cluster.sh down    stop every daemon by its pid file
#
# The binaries come from the Go module proxy: k8s.io/kubernetes requires its staging modules at
# v0.0.0 with replace directives into ./staging, so `go install ...@v1.X.Y` is refused; a wrapper
# module requires k8s.io/kubernetes v1.X.Y and replaces each staging module with its published
# v0.X.Y (the recipe kubernetes-sigs/scheduler-plugins uses). They are built once per machine into
# $K8S_CACHE/<version>/bin. etcd is built the same way (see build_etcd: Debian's etcd-server 3.4.23
# serves this apiserver, but without the watch progress requests kwok's streaming lists need).
#
# State, certificates, logs and pid files live under $K8S_BASE (default /tmp/fleetdeck-k8s).
# `up` writes $K8S_BASE/fleetdeck.kubeconfig: Fleetdeck's service account, bound to the ClusterRole
# in integrations/kubernetes/deploy/clusterrole.yaml, and $K8S_BASE/admin.kubeconfig (system:masters)
# for the tests' "someone else" (kubectl-equivalent calls).
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.4}
KWOK_VERSION=${KWOK_VERSION:-v0.7.0}
CACHE=${K8S_CACHE:-/var/cache/fleetdeck-k8s}/$K8S_VERSION
BIN=$CACHE/bin
BASE=${K8S_BASE:-/tmp/fleetdeck-k8s}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
APISERVER_PORT=${K8S_APISERVER_PORT:-16443}
# A kwok node renews its lease every quarter of this; one silent this long is NotReady (kubelet: 40 s).
# 20 s keeps the tests' NotReady wait short and 500 benchmark nodes at ~100 lease writes a second.
ETCD_PORT=${K8S_ETCD_PORT:-12379}
export GOFLAGS=-trimpath GOTOOLCHAIN=${GOTOOLCHAIN:-auto}

log() { printf 'kubernetes: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

staging_modules() {  # the staging modules k8s.io/kubernetes $K8S_VERSION replaces into ./staging
  go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
  sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' \
    "$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod"
}

version_ldflags() {  # what the release build stamps in (kubectl version, /version), from the version
  local v=k8s.io/component-base/version minor=${K8S_VERSION#v1.}
  printf -- '-X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean' \
    "$v" "$K8S_VERSION" "$v" "$v" "${minor%%.*}" "$v"
}

build_kubernetes() {
  local src=$CACHE/src/kubernetes minor m
  minor=v0.${K8S_VERSION#v1.}
  mkdir -p "$src" "$BIN"
  {
    printf 'module fleetdeck.io/k8s-build\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes %s\n\n' "$K8S_VERSION"
    for m in $(staging_modules); do
      # Two sample modules are never published; nothing the three binaries build imports them.
      [ "$(go list -m -json "$m@$minor" 2>/dev/null | grep -c '"Version"')" = 1 ] || continue
      printf 'replace %s => %s %s\n' "$m" "$m" "$minor"
    done
  } >"$src/go.mod"
  printf 'package tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver/app"\n\t_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"\n\t_ "k8s.io/kubernetes/cmd/kube-scheduler/app"\n)\n' \
    >"$src/tools.go"
  (cd "$src" && go mod tidy >/dev/null \
    && nice -n 19 go build -ldflags="-s -w $(version_ldflags)" -o "$BIN/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler)
}

build_etcd() {
  # Debian's etcd-server (3.4.23) runs this apiserver but lacks RequestWatchProgress (3.4.31+), so
  # streaming list watches (kwok's client-go asks for them) fail. etcd's own main module replaces its
  # sibling modules with ./paths, so `go install` is refused; a wrapper requires the server module at
  # the version k8s.io/kubernetes itself requires and calls etcdmain, the etcd command's entry point.
  local src=$CACHE/src/etcd version
  version=$(cd "$CACHE/src/kubernetes" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
  mkdir -p "$src"
  printf 'module fleetdeck.io/etcd-build\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$version" >"$src/go.mod"
  printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' \
    >"$src/main.go"
  (cd "$src" && go mod tidy >/dev/null && nice -n 19 go build -ldflags='-s -w' -o "$BIN/etcd" .)
}

build_kwok() {
  GOBIN=$BIN nice -n 19 go install -ldflags='-s -w' "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
}

kwok_stages() {
  # kwok's own stages, from its module: nodes Ready with a lease heartbeat, NotReady once labelled
  # node-not-ready.stage.kwok.x-k8s.io=true (its chaos stage: the kubelet reports the node failed);
  # pods Running as soon as
  # they are bound ("fast"), completed after the delay in their pod-complete.stage.kwok.x-k8s.io/delay
  # annotation ("general", where that annotation is read), deleted when deleted.
  local stages
  stages=$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage
  [ -d "$stages" ] || go mod download "sigs.k8s.io/kwok@$KWOK_VERSION"
  mkdir -p "$CACHE/stages"
  {
    cat "$stages/node/fast/node-initialize.yaml"
    for f in node/heartbeat-with-lease/node-heartbeat-with-lease.yaml node/chaos/node-not-ready.yaml \
      pod/fast/pod-ready.yaml \
      pod/general/pod-complete.yaml pod/fast/pod-delete.yaml; do
      printf '\n---\n'
      cat "$stages/$f"
    done
  } >"$CACHE/stages/stages.yaml"
}

cmd_build() {
  local t0=$SECONDS
  command -v go >/dev/null || die "Go is needed to build the control plane (https://go.dev/dl/)"
  if [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kube-controller-manager" ] || [ ! -x "$BIN/kube-scheduler" ]; then
    log "building kube-apiserver, kube-controller-manager, kube-scheduler $K8S_VERSION (cold: tens of minutes)"
    build_kubernetes
  fi
  if [ ! -x "$BIN/etcd" ]; then log "building etcd"; build_etcd; fi
  if [ ! -x "$BIN/kwok" ]; then log "building kwok $KWOK_VERSION"; build_kwok; fi
  [ -s "$CACHE/stages/stages.yaml" ] || kwok_stages
  log "binaries ready in $BIN ($((SECONDS - t0)) s)"
}

# --- certificates and kubeconfigs -----------------------------------------------------------------

cert() {  # $1: name, $2: subject, $3: extensions (signed by the cluster CA)
  local d=$BASE/pki
  [ -s "$d/$1.crt" ] && return 0
  openssl req -new -newkey rsa:2048 -nodes -keyout "$d/$1.key" -subj "$2" -out "$d/$1.csr" 2>/dev/null
  openssl x509 -req -in "$d/$1.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 \
    -extfile <(printf '%s\n' "$3") -out "$d/$1.crt" 2>/dev/null
}

gen_pki() {
  local d=$BASE/pki
  mkdir -p "$d"
  [ -s "$d/ca.crt" ] || openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=fleetdeck-test-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  cert apiserver "/CN=kube-apiserver" "$(printf '%s\n' 'basicConstraints=CA:FALSE' 'extendedKeyUsage=serverAuth' \
    'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc')"
  cert admin "/O=system:masters/CN=kubernetes-admin" "extendedKeyUsage=clientAuth"
  cert controller-manager "/CN=system:kube-controller-manager" "extendedKeyUsage=clientAuth"
  cert scheduler "/CN=system:kube-scheduler" "extendedKeyUsage=clientAuth"
  # kwok plays every kubelet (node status, leases, pod status of all nodes): cluster-admin.
  cert kwok "/O=system:masters/CN=kwok" "extendedKeyUsage=clientAuth"
  [ -s "$d/sa.key" ] || { openssl genrsa -out "$d/sa.key" 2048 2>/dev/null; openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null; }
}

kubeconfig_cert() {  # $1: user (a cert name), $2: file
  local d=$BASE/pki
  cat >"$2" <<KC
apiVersion: v1
kind: Config
clusters:
- name: fleetdeck-test
  cluster: {server: "https://127.0.0.1:$APISERVER_PORT", certificate-authority-data: "$(base64 -w0 "$d/ca.crt")"}
users:
- name: $1
  user: {client-certificate-data: "$(base64 -w0 "$d/$1.crt")", client-key-data: "$(base64 -w0 "$d/$1.key")"}
contexts:
- name: fleetdeck-test
  context: {cluster: fleetdeck-test, user: $1}
current-context: fleetdeck-test
KC
}

# --- talking to the API server as admin (no kubectl needed) ------------------------------------

api() {  # $1: method, $2: path, [$3: body file, $4: content type]
  local args=(-sS --fail-with-body -X "$1" --cacert "$BASE/pki/ca.crt" --cert "$BASE/pki/admin.crt"
    --key "$BASE/pki/admin.key" "https://127.0.0.1:$APISERVER_PORT$2")
  [ -z "${3:-}" ] || args+=(-H "Content-Type: ${4:-application/json}" --data-binary "@$3")
  curl "${args[@]}"
}

apply_yaml() {  # $1: a multi-document YAML file of cluster-scoped or namespaced objects, server-side applied
  local doc path tmp
  tmp=$(mktemp -d)
  awk -v dir="$tmp" 'BEGIN{n=0} /^---/{n++; next} {print > (dir "/" n ".yaml")}' "$1"
  for doc in "$tmp"/*.yaml; do
    path=$(object_path "$doc") || continue
    api PATCH "$path?fieldManager=fleetdeck-cluster-sh&force=true" "$doc" application/apply-patch+yaml >/dev/null
  done
  rm -rf "$tmp"
}

object_path() {  # the REST path of the one object in a YAML document (kinds this script applies)
  local kind name ns
  kind=$(sed -n 's/^kind: *//p' "$1" | head -n1)
  name=$(awk '/^metadata:/{m=1; next} m && /^  name:/{print $2; exit}' "$1")
  ns=$(awk '/^metadata:/{m=1; next} m && /^  namespace:/{print $2; exit}' "$1")
  case $kind in
    Namespace) echo "/api/v1/namespaces/$name" ;;
    ServiceAccount) echo "/api/v1/namespaces/$ns/serviceaccounts/$name" ;;
    ClusterRole) echo "/apis/rbac.authorization.k8s.io/v1/clusterroles/$name" ;;
    ClusterRoleBinding) echo "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/$name" ;;
    PriorityClass) echo "/apis/scheduling.k8s.io/v1/priorityclasses/$name" ;;
    "") return 1 ;;
    *) die "apply_yaml: no path for kind $kind" ;;
  esac
}

# --- daemons ------------------------------------------------------------------------------------

wait_for() {  # $1: tries (0.2 s apart), $2...: command that must succeed
  local tries=$1; shift
  for _ in $(seq 1 "$tries"); do "$@" && return 0; sleep 0.2; done
  return 1
}

start_daemon() {  # $1: name, $2...: command; pid in $BASE/$1.pid, log in $BASE/log/$1.log
  local name=$1; shift
  alive "$BASE/$name.pid" && return 0
  setsid "$@" >>"$BASE/log/$name.log" 2>&1 </dev/null &
  echo $! >"$BASE/$name.pid"
}

etcd_up() { curl -sf "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
apiserver_up() { curl -sf --cacert "$BASE/pki/ca.crt" "https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null; }
serviceaccount_made() { api GET /api/v1/namespaces/fleetdeck-system/serviceaccounts/default >/dev/null 2>&1; }

start() {
  start_daemon etcd "$BIN/etcd" --name fleetdeck-test --data-dir "$BASE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "fleetdeck-test=http://127.0.0.1:$((ETCD_PORT + 1))" \
    --unsafe-no-fsync --quota-backend-bytes=4294967296 --log-level=warn
  wait_for 100 etcd_up || die "etcd did not answer within 20 s (see $BASE/log/etcd.log)"
  local p=$BASE/pki
  # Nodes and Jobs are watched from etcd itself, not the API server's watch cache: on a young
  # cluster that cache still holds every event since start-up and serves any old version, so the
  # tests' 410 Gone (Kube.expire: compact etcd, watch from a version before it) would not come.
  start_daemon kube-apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
    --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" --client-ca-file="$p/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$p/sa.pub" \
    --service-account-signing-key-file="$p/sa.key" --authorization-mode=RBAC \
    --service-cluster-ip-range=10.0.0.0/24 --cert-dir="$BASE/pki" --profiling=false \
    --endpoint-reconciler-type=none \
    --max-requests-inflight=2000 --max-mutating-requests-inflight=1000 --enable-priority-and-fairness=false \
    --watch-cache-sizes=nodes#0,jobs.batch#0
  wait_for 300 apiserver_up || die "kube-apiserver not ready within 60 s (see $BASE/log/kube-apiserver.log)"
  # Leader election off: one controller manager, and a restart takes over at once.
  start_daemon kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$BASE/controller-manager.kubeconfig" --use-service-account-credentials=true \
    --service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" --leader-elect=false \
    --secure-port=0 --node-monitor-period=1s --node-monitor-grace-period="${K8S_NODE_GRACE:-20}s" \
    --kube-api-qps=500 --kube-api-burst=1000 --concurrent-job-syncs=20 --profiling=false
  # kwok: only nodes annotated kwok.x-k8s.io/node=fake are its kubelets (the tests stop one's
  # heartbeat by handing its Lease to a holder that never renews it); their pods run through kwok's stages.
  start_daemon kwok "$BIN/kwok" --kubeconfig="$BASE/kwok.kubeconfig" --config="$CACHE/stages/stages.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds="${K8S_NODE_GRACE:-20}" --cidr=10.244.0.1/16 --node-ip=10.255.0.1
  apply_yaml <(printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: fleetdeck-system\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: fleetdeck\n  namespace: fleetdeck-system\n')
  apply_yaml "$ROOT/integrations/kubernetes/deploy/clusterrole.yaml"
  wait_for 150 serviceaccount_made || die "kube-controller-manager created no service accounts within 30 s (see $BASE/log/kube-controller-manager.log)"
}

fleetdeck_kubeconfig() {  # a token of the fleetdeck service account (TokenRequest), valid for a year
  local token
  token=$(api POST /api/v1/namespaces/fleetdeck-system/serviceaccounts/fleetdeck/token \
    <(echo '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":31536000}}') \
    | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
  [ -n "$token" ] || die "no token for the fleetdeck service account"
  cat >"$BASE/fleetdeck.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: fleetdeck-test
  cluster: {server: "https://127.0.0.1:$APISERVER_PORT", certificate-authority-data: "$(base64 -w0 "$BASE/pki/ca.crt")"}
users:
- name: fleetdeck
  user: {token: "$token"}
contexts:
- name: fleetdeck-test
  context: {cluster: fleetdeck-test, user: fleetdeck, namespace: default}
current-context: fleetdeck-test
KC
}

stop_all() {
  local name pids=() p
  for name in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    if alive "$BASE/$name.pid"; then pids+=("$(cat "$BASE/$name.pid")"); kill "$(cat "$BASE/$name.pid")" 2>/dev/null || true; fi
  done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null || true
  done
  rm -f "$BASE"/*.pid
}

cmd_up() {
  local t0
  cmd_build
  t0=$(date +%s%N)
  mkdir -p "$BASE/log"
  gen_pki
  kubeconfig_cert admin "$BASE/admin.kubeconfig"
  kubeconfig_cert controller-manager "$BASE/controller-manager.kubeconfig"
  kubeconfig_cert scheduler "$BASE/scheduler.kubeconfig"
  kubeconfig_cert kwok "$BASE/kwok.kubeconfig"
  start
  fleetdeck_kubeconfig
  log "up in $(( ($(date +%s%N) - t0) / 1000000 )) ms: API server https://127.0.0.1:$APISERVER_PORT," \
    "kubeconfigs $BASE/fleetdeck.kubeconfig (Fleetdeck) and $BASE/admin.kubeconfig"
}

cmd_status() {
  local name ok=0
  for name in etcd kube-apiserver kube-controller-manager kwok kube-scheduler; do
    [ -e "$BASE/$name.pid" ] || continue
    if alive "$BASE/$name.pid"; then echo "running $name pid $(cat "$BASE/$name.pid")"; else echo "dead    $name"; ok=1; fi
  done
  apiserver_up || { echo "kube-apiserver not answering"; return 1; }
  api GET /api/v1/nodes | grep -c '"kind": "Node"' | sed 's/^/nodes: /' || true
  return $ok
}

case ${1:-} in
  build) cmd_build ;;
  up) cmd_up ;;
  down) stop_all; log "down" ;;
  status) cmd_status ;;
  *) echo "usage: $0 build|up|down|status" >&2; exit 2 ;;
esac
