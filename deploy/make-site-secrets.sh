#!/usr/bin/env bash
# Makes the broker secrets of one claw-gateway site: a private CA, the
# broker's TLS certificate, a client certificate for the gateway, and a
# mosquitto password file with a random password for the gateway, the
# observer and every machine PC.
#
#   make-site-secrets.sh [--out DIR] [--host NAME]... [--ip ADDR]...
#                        [--no-gateway-cert] [--force] [MACHINE_ID...]
#
#   --out DIR          where to write (default /etc/mosquitto/claw)
#   --host NAME        a DNS name the machine PCs use for the broker; repeat for
#                      more (default: this host's name). localhost is always in.
#   --ip ADDR          an IP address the machine PCs use for the broker; repeat
#                      for more. 127.0.0.1 is always in (the gateway uses it).
#   --no-gateway-cert  skip the gateway's client certificate
#   --force            replace an existing CA, certificates and password file
#   MACHINE_ID...      the machine ids of gateway.yaml (default: m1 m2); each
#                      PC logs in with its machine id as username
#
# Writes DIR/tls/{ca.key,ca.crt,server.key,server.crt,gateway.key,gateway.crt},
# DIR/passwd (for mosquitto's password_file) and DIR/passwords (the clear
# passwords, "user password" per line, mode 0600: hand them out, then keep or
# delete it). Keys are mode 0600. Needs openssl and mosquitto_passwd.
set -euo pipefail
umask 077

out=/etc/mosquitto/claw
hosts=()
ips=()
force=false
gateway_cert=true
machines=()

die() { echo "make-site-secrets.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
        --out=*) out=${1#--out=}; shift ;;
        --host) [ $# -ge 2 ] || die "--host needs a name"; hosts+=("$2"); shift 2 ;;
        --host=*) hosts+=("${1#--host=}"); shift ;;
        --ip) [ $# -ge 2 ] || die "--ip needs an address"; ips+=("$2"); shift 2 ;;
        --ip=*) ips+=("${1#--ip=}"); shift ;;
        --no-gateway-cert) gateway_cert=false; shift ;;
        --force) force=true; shift ;;
        -h|--help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
        --) shift; machines+=("$@"); break ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) machines+=("$1"); shift ;;
    esac
done

[ ${#machines[@]} -gt 0 ] || machines=(m1 m2)
[ ${#hosts[@]} -gt 0 ] || hosts=("$(hostname -f 2>/dev/null || hostname)")
command -v openssl >/dev/null || die "openssl is not installed (apt-get install openssl)"
command -v mosquitto_passwd >/dev/null || die "mosquitto_passwd is not installed (apt-get install mosquitto)"

# Usernames go into the password file ("user:hash") and, through the ACL's %u,
# into topics: keep them to letters, digits, dot, dash and underscore.
seen=" gateway observer "
for id in "${machines[@]}"; do
    [[ "$id" =~ ^[A-Za-z0-9._-]+$ ]] || die "machine id \"$id\": use letters, digits, ., - and _ only"
    case "$seen" in
        *" $id "*) die "machine id \"$id\" is reserved or given twice (gateway and observer are broker users)" ;;
    esac
    seen="$seen$id "
done
for ip in "${ips[@]}"; do
    [[ "$ip" =~ ^[0-9.]+$ || "$ip" =~ ^[0-9A-Fa-f:]+$ ]] || die "--ip $ip is not an IP address"
done

tls="$out/tls"
if ! $force; then
    for existing in "$tls/ca.key" "$tls/ca.crt" "$out/passwd" "$out/passwords"; do
        [ ! -e "$existing" ] || die "$existing already exists; refusing to replace the site's CA and passwords (use --force to make new ones, then hand out the new CA and passwords)"
    done
fi
mkdir -p "$tls"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'echo "make-site-secrets.sh: failed at line $LINENO" >&2' ERR

# Subject alternative names of the broker certificate.
san="DNS:localhost,IP:127.0.0.1"
for host in "${hosts[@]}"; do
    [ "$host" = localhost ] || san="$san,DNS:$host"
done
for ip in "${ips[@]}"; do
    [ "$ip" = 127.0.0.1 ] || san="$san,IP:$ip"
done

# A config of our own, so the result does not depend on /etc/ssl/openssl.cnf.
cat > "$work/openssl.cnf" <<EOF
[ req ]
distinguished_name = dn
prompt = no
[ dn ]
CN = unused
[ ca ]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[ server ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = $san
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[ client ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EOF

# run CMD...: runs an openssl command quietly, showing its output if it fails.
run() {
    if ! "$@" > "$work/log" 2>&1; then
        cat "$work/log" >&2
        die "failed: $*"
    fi
}
ec_key() { run openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
serial() { echo "0x$(openssl rand -hex 16)"; }

# sign NAME CN EXTENSIONS: NAME.key and NAME.crt, signed by the CA, for 5 years.
sign() {
    ec_key "$work/$1.key"
    run openssl req -new -config "$work/openssl.cnf" -key "$work/$1.key" -subj "/CN=$2" -out "$work/$1.csr"
    run openssl x509 -req -in "$work/$1.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" -set_serial "$(serial)" \
        -days 1825 -extfile "$work/openssl.cnf" -extensions "$3" -out "$work/$1.crt"
    run openssl verify -CAfile "$work/ca.crt" "$work/$1.crt"
}

site=$(hostname)
ec_key "$work/ca.key"
run openssl req -new -x509 -config "$work/openssl.cnf" -key "$work/ca.key" -subj "/CN=claw-gateway site CA ($site)" \
    -days 3650 -set_serial "$(serial)" -extensions ca -out "$work/ca.crt"
sign server "${hosts[0]}" server
if $gateway_cert; then sign gateway gateway client; fi

# Passwords: random, without the characters that trouble shells and URLs.
password() {
    local p=""
    while [ ${#p} -lt 16 ]; do p=$(openssl rand -base64 18 | tr -d '/+='); done
    echo "$p"
}
users=(gateway observer "${machines[@]}")
{
    echo "# MQTT passwords of the claw-gateway site on $site, made $(date -u +%Y-%m-%dT%H:%M:%SZ)."
    echo "# One \"username password\" per line. The gateway's goes into /etc/claw-gateway/env"
    echo "# (MQTT_PASSWORD); each machine PC logs in with its machine id as username."
    for user in "${users[@]}"; do echo "$user $(password)"; done
} > "$work/passwords"
create=-c
while read -r user pass; do
    run mosquitto_passwd $create -b "$work/passwd" "$user" "$pass"
    create=
done < <(grep -v '^#' "$work/passwords")
[ "$(grep -c : "$work/passwd")" -eq ${#users[@]} ] || die "mosquitto_passwd did not write every user"

# Install. Certificates are public; keys, the password hashes and the clear
# passwords are not.
for name in ca server gateway; do
    [ -e "$work/$name.crt" ] || continue
    install -m 0644 "$work/$name.crt" "$tls/$name.crt"
    install -m 0600 "$work/$name.key" "$tls/$name.key"
done
if ! $gateway_cert; then rm -f "$tls/gateway.crt" "$tls/gateway.key"; fi
install -m 0600 "$work/passwd" "$out/passwd"
install -m 0600 "$work/passwords" "$out/passwords"
chmod 0755 "$out" "$tls"

# mosquitto reads its key and password file after dropping root for the
# mosquitto user.
if [ "$(id -u)" -eq 0 ] && id mosquitto >/dev/null 2>&1; then
    chown mosquitto:mosquitto "$tls/server.key" "$out/passwd"
fi

gateway_files="tls/ca.crt"
if $gateway_cert; then gateway_files="tls/ca.crt, tls/gateway.crt and tls/gateway.key"; fi
cat <<EOF
Made in $out, the broker certificate for ${san//,/, }:
  tls/ca.crt, tls/ca.key          the site CA (ca.key stays here, private: it signs certificates)
  tls/server.crt, tls/server.key  the broker's certificate (mosquitto.conf: certfile, keyfile)
  tls/gateway.crt, .key           the gateway's client certificate (unless --no-gateway-cert)
  passwd                          mosquitto's password_file
  passwords                       the clear passwords of: ${users[*]}

Next:
  1. Broker: install deploy/acl as $out/acl and deploy/mosquitto.conf as
     /etc/mosquitto/conf.d/claw.conf, then: systemctl restart mosquitto
  2. Gateway: copy $gateway_files
     to /etc/claw-gateway/tls/ (a key: chown root:claw-gateway, chmod 0640), and
     put the gateway's password in /etc/claw-gateway/env as MQTT_PASSWORD=...
  3. Machine PCs: give each PC tls/ca.crt, its username (its machine id) and its
     password from $out/passwords; they connect with TLS to port 8883 using a
     name or address of the certificate above.
EOF
