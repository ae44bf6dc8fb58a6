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
# and PATH (kix, nix, coreutils).
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
# not with this host's credential. kix waits for the token the token
# controller puts into the Secret and takes the server and CA of $KUBECONFIG
# (or the Secret's ca.crt).
state=$(dirname "$KIX_OPERATOR_KUBECONFIG")
install -d -m 0750 -o "${KIX_OPERATOR_OWNER%:*}" -g "${KIX_OPERATOR_OWNER#*:}" "$state"
tmp=$(mktemp "$state/.kubeconfig.XXXXXX")
trap 'rm -f "$tmp"' EXIT
kix operator-kubeconfig --namespace kix-system --service-account kix-operator \
  --secret kix-operator-token --out "$tmp" --wait 120s
chown "$KIX_OPERATOR_OWNER" "$tmp"
chmod 0400 "$tmp"
mv -f "$tmp" "$KIX_OPERATOR_KUBECONFIG"
trap - EXIT
log "wrote $KIX_OPERATOR_KUBECONFIG for ServiceAccount kix-system/kix-operator"
