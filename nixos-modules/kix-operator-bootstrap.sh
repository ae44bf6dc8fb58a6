# kix-operator-bootstrap: the oneshot unit of services.kix-operator (run by
# bash, as root, before the operator). Its unit sets:
#
#   KUBECONFIG               a credential that may create CRDs and RBAC
#   KIX_BOOTSTRAP_TREE       the Kix cluster "kix-operator": the operator's
#                            ServiceAccount and RBAC (a store path)
#   KIX_BOOTSTRAP_TIMEOUT    seconds to keep trying while the API server starts
#   KIX_OPERATOR_KUBECONFIG  where to write the ServiceAccount's kubeconfig
#                            (empty: the operator does not use it)
#   KIX_OPERATOR_OWNER       user:group that file belongs to
#   KIX_GCROOTS_DIR          where kix keeps the GC root of the tree
#
# and PATH (kix, kubectl, nix, coreutils).
set -euo pipefail
log() { echo "kix-operator-bootstrap: $*" >&2; }

# kix installs its CRDs (waiting until they are Established), applies the
# RBAC and prunes what an earlier configuration had. It is retried while the
# API server is starting (k3s on this host, for one).
deadline=$((SECONDS + KIX_BOOTSTRAP_TIMEOUT))
until kix deploy kix-operator --path "$KIX_BOOTSTRAP_TREE" --yes --accept-migrations --force-conflicts; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    log "kix deploy kix-operator did not succeed within ${KIX_BOOTSTRAP_TIMEOUT}s (API server of $KUBECONFIG)"
    exit 1
  fi
  sleep 5
done
[ -n "$KIX_OPERATOR_KUBECONFIG" ] || exit 0

# A kubeconfig for the ServiceAccount: the operator runs with the RBAC above,
# not with this host's credential. kubectl reads the token the token
# controller put into the Secret, and the server and CA of $KUBECONFIG.
ns=kix-system
account=kix-operator
token=""
for _ in $(seq 1 120); do
  token=$(kubectl -n "$ns" get secret "$account-token" -o 'jsonpath={.data.token}' || true)
  [ -n "$token" ] && break
  sleep 1
done
if [ -z "$token" ]; then
  log "Secret $ns/$account-token got no token (is the token controller running?)"
  exit 1
fi
server=$(kubectl config view --raw --minify -o 'jsonpath={.clusters[0].cluster.server}')
ca=$(kubectl config view --raw --minify -o 'jsonpath={.clusters[0].cluster.certificate-authority-data}')
if [ -z "$ca" ]; then
  ca=$(kubectl -n "$ns" get secret "$account-token" -o 'jsonpath={.data.ca\.crt}')
fi
state=$(dirname "$KIX_OPERATOR_KUBECONFIG")
install -d -m 0750 -o "${KIX_OPERATOR_OWNER%:*}" -g "${KIX_OPERATOR_OWNER#*:}" "$state"
tmp=$(mktemp "$state/.kubeconfig.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cat >"$tmp" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
  - name: kix
    cluster:
      server: $server
      certificate-authority-data: $ca
users:
  - name: $account
    user:
      token: $(printf '%s' "$token" | base64 -d)
contexts:
  - name: $account
    context:
      cluster: kix
      user: $account
      namespace: $ns
current-context: $account
KUBECONFIG
chown "$KIX_OPERATOR_OWNER" "$tmp"
chmod 0400 "$tmp"
mv -f "$tmp" "$KIX_OPERATOR_KUBECONFIG"
trap - EXIT
log "wrote $KIX_OPERATOR_KUBECONFIG for ServiceAccount $ns/$account"
