#!/usr/bin/env bash
# Makes the broker secrets of one claw-gateway site: a private CA, the
# broker's TLS certificate, a client certificate for the gateway, a mosquitto
# password file with a random password for the gateway, the observer, every
# machine PC and every camera switch, and the site's complete ACL.
#
#   make-site-secrets.sh [--out DIR] [--host NAME]... [--ip ADDR]...
#                        [--topic-prefix PREFIX] [--no-gateway-cert] [--force]
#                        [MACHINE_ID...]
#   make-site-secrets.sh [--out DIR] [--topic-prefix PREFIX] --add MACHINE_ID...
#   make-site-secrets.sh [--out DIR] [--topic-prefix PREFIX] --no-tls [--force] [MACHINE_ID...]
#   make-site-secrets.sh [--out DIR] [--host NAME]... [--ip ADDR]... [--no-gateway-cert]
#                        [--force] --tls-only
#
#   --out DIR          where to write (default /etc/mosquitto/claw)
#   --host NAME        a DNS name the machine PCs use for the broker; repeat for
#                      more (default: this host's name). localhost is always in.
#   --ip ADDR          an IP address the machine PCs use for the broker; repeat
#                      for more. 127.0.0.1 is always in (the gateway uses it).
#   --topic-prefix PREFIX
#                      mqtt.topic_prefix of gateway.yaml (default claw)
#   --no-gateway-cert  skip the gateway's client certificate
#   --force            replace an existing CA, certificates, passwords and ACL
#   --add              add machines to a site made before: new passwords for
#                      them and their camera switches, their ACL blocks; the CA,
#                      certificates and every other password stay as they are
#   --no-tls           the logins and the ACL only (passwd, passwords, acl): a
#                      broker on loopback alone, as the Debian package sets up
#   --tls-only         the CA and certificates only, for a site whose logins
#                      exist (made with --no-tls): the arcade network's listener
#   MACHINE_ID...      the machine ids of gateway.yaml (default: m1 m2)
#
# Usernames: "gateway", "observer", each machine id for its PC (m1) and
# "<id>-camera" for its camera switch (m1-camera). The broker binds every
# connection's client id to its username, so each username is one connection
# at a time: a second login with it takes the first one over.
#
# Writes DIR/tls/{ca.key,ca.crt,server.key,server.crt,gateway.key,gateway.crt},
# DIR/passwd (mosquitto's password_file), DIR/acl (its acl_file: the rules of
# the acl file beside this script, then one block per PC and camera switch)
# and DIR/passwords (the clear passwords, "user password" per line, mode 0600:
# hand them out, then keep or delete it; --add needs it). Keys are mode 0600.
# No password is ever put on a command line. Needs mosquitto_passwd, and
# openssl for the certificates.
set -euo pipefail
umask 077

out=/etc/mosquitto/claw
hosts=()
ips=()
prefix=claw
force=false
add=false
gateway_cert=true
make_tls=true
make_logins=true
machines=()
# The static rules every site's ACL starts from.
template="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/acl"

die() { echo "make-site-secrets.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
        --out=*) out=${1#--out=}; shift ;;
        --host) [ $# -ge 2 ] || die "--host needs a name"; hosts+=("$2"); shift 2 ;;
        --host=*) hosts+=("${1#--host=}"); shift ;;
        --ip) [ $# -ge 2 ] || die "--ip needs an address"; ips+=("$2"); shift 2 ;;
        --ip=*) ips+=("${1#--ip=}"); shift ;;
        --topic-prefix) [ $# -ge 2 ] || die "--topic-prefix needs a prefix"; prefix=$2; shift 2 ;;
        --topic-prefix=*) prefix=${1#--topic-prefix=}; shift ;;
        --no-gateway-cert) gateway_cert=false; shift ;;
        --force) force=true; shift ;;
        --add) add=true; shift ;;
        --no-tls) make_tls=false; shift ;;
        --tls-only) make_logins=false; shift ;;
        -h|--help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
        --) shift; machines+=("$@"); break ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) machines+=("$1"); shift ;;
    esac
done

if $add; then
    [ ${#machines[@]} -gt 0 ] || die "--add needs the ids of the machines to add"
    [ ${#hosts[@]} -eq 0 ] && [ ${#ips[@]} -eq 0 ] && ! $force && $gateway_cert \
        || die "--add changes no certificate: leave out --host, --ip, --no-gateway-cert and --force"
fi
$make_tls || $make_logins || die "--no-tls and --tls-only together make nothing"
if $add; then make_tls=false; fi
if ! $make_tls; then
    [ ${#hosts[@]} -eq 0 ] && [ ${#ips[@]} -eq 0 ] && $gateway_cert \
        || $add || die "--no-tls makes no certificate: leave out --host, --ip and --no-gateway-cert"
fi
if ! $make_logins; then
    [ ${#machines[@]} -eq 0 ] || die "--tls-only makes no logins: leave out the machine ids (--add adds machines)"
fi
[ ${#machines[@]} -gt 0 ] || machines=(m1 m2)
if $make_tls; then
    [ ${#hosts[@]} -gt 0 ] || hosts=("$(hostname -f 2>/dev/null || uname -n)")
    command -v openssl >/dev/null || die "openssl is not installed (apt-get install openssl)"
fi
if $make_logins; then
    command -v mosquitto_passwd >/dev/null || die "mosquitto_passwd is not installed (apt-get install mosquitto)"
fi
[ -r "$template" ] || die "$template is missing: run this script from the repository's deploy/ folder, beside its acl file"
# The prefix goes into ACL topics: no wildcards, no empty levels.
[[ "$prefix" =~ ^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$ ]] \
    || die "--topic-prefix \"$prefix\": use letters, digits, ., - and _, levels separated by single /"

# The users a site made before has (--add): the first field of every line of
# its passwords file.
existing=()
if $add; then
    for file in passwd passwords acl; do
        [ -e "$out/$file" ] || die "$out/$file does not exist: --add adds machines to a site this script made before (run it without --add first)"
    done
    while read -r user _; do existing+=("$user"); done < <(grep -v -e '^#' -e '^[[:space:]]*$' "$out/passwords")
    grep -qxF "topic readwrite $prefix/#" "$out/acl" \
        || die "$out/acl does not give the gateway $prefix/#: pass the site's --topic-prefix"
fi

# Usernames go into the password file ("user:hash") and into ACL topics: keep
# them to letters, digits, dot, dash and underscore. Each machine has two
# users, <id> (its PC) and <id>-camera (its camera switch); no two may meet.
seen=" gateway observer ${existing[*]} "
for id in "${machines[@]}"; do
    [[ "$id" =~ ^[A-Za-z0-9._-]+$ ]] || die "machine id \"$id\": use letters, digits, ., - and _ only"
    for user in "$id" "$id-camera"; do
        case "$seen" in
            *" $user "*) die "machine id \"$id\": broker user \"$user\" is reserved, exists already or is given twice (gateway and observer are broker users; machine m1 has the users m1 and m1-camera)" ;;
        esac
        seen="$seen$user "
    done
done
for ip in "${ips[@]}"; do
    [[ "$ip" =~ ^[0-9.]+$ || "$ip" =~ ^[0-9A-Fa-f:]+$ ]] || die "--ip $ip is not an IP address"
done

tls="$out/tls"
if ! $force && ! $add; then
    made=()
    if $make_tls; then made+=("$tls/ca.key" "$tls/ca.crt"); fi
    if $make_logins; then made+=("$out/passwd" "$out/passwords" "$out/acl"); fi
    for file in "${made[@]}"; do
        [ ! -e "$file" ] || die "$file already exists; refusing to replace the site's CA, passwords and ACL (--add adds machines; --force makes everything new, then hand out the new CA and passwords)"
    done
fi
mkdir -p "$out"
if $make_tls; then mkdir -p "$tls"; fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'echo "make-site-secrets.sh: failed at line $LINENO" >&2' ERR

# run CMD...: runs a command quietly, showing its output if it fails.
run() {
    if ! "$@" > "$work/log" 2>&1; then
        cat "$work/log" >&2
        die "failed: $*"
    fi
}

# put MODE FILE DEST [mosquitto]: installs FILE as DEST by a rename, so that a
# mosquitto reloading meanwhile reads the old file or the new one, never half
# of one. With "mosquitto", the file is given to the mosquitto user, as which
# the broker reads its key and password file after dropping root.
put() {
    install -m "$1" "$2" "$3.new"
    if [ "${4-}" = mosquitto ] && [ "$(id -u)" -eq 0 ] && id mosquitto >/dev/null 2>&1; then
        chown mosquitto:mosquitto "$3.new"
    fi
    mv -f "$3.new" "$3"
}

if $make_tls; then
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

    ec_key "$work/ca.key"
    run openssl req -new -x509 -config "$work/openssl.cnf" -key "$work/ca.key" -subj "/CN=claw-gateway site CA ($(uname -n))" \
        -days 3650 -set_serial "$(serial)" -extensions ca -out "$work/ca.crt"
    sign server "${hosts[0]}" server
    if $gateway_cert; then sign gateway gateway client; fi
fi

if $make_logins; then
    # Passwords: random, without the characters that trouble shells and URLs
    # (from the kernel, so that the logins need no openssl).
    password() {
        local p=""
        while [ ${#p} -lt 16 ]; do p=$(head -c 18 /dev/urandom | base64 | tr -d '/+='); done
        echo "$p"
    }
    users=()
    $add || users=(gateway observer)
    for id in "${machines[@]}"; do users+=("$id" "$id-camera"); done
    now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    {
        if $add; then
            echo "# Added $now: ${users[*]}"
        else
            echo "# MQTT passwords of the claw-gateway site on $(uname -n), made $now."
            echo "# One \"username password\" per line. The gateway's goes into /etc/claw-gateway/env"
            echo "# (MQTT_PASSWORD); each machine PC logs in with its machine id as username, its"
            echo "# camera switch as <machine id>-camera. One connection per username at a time."
        fi
        for user in "${users[@]}"; do echo "$user $(password)"; done
    } > "$work/new-passwords"

    # The password hashes. mosquitto_passwd -b takes the password as an argument,
    # which anyone on this host can read in ps while it runs; instead the clear
    # "user:password" lines go into a file only we can read (umask 077), which
    # mosquitto_passwd -U hashes in place.
    awk '!/^#/ { print $1 ":" $2 }' "$work/new-passwords" > "$work/new-passwd"
    run mosquitto_passwd -U "$work/new-passwd"
    [ "$(grep -c '^[^:]*:\$[0-9]*\$' "$work/new-passwd")" -eq ${#users[@]} ] || die "mosquitto_passwd -U did not hash every password"

    # The ACL: the static rules of the template (with the site's prefix), then
    # one block per PC and per camera switch. A "pattern" line could not give
    # m1-camera the topics of m1, and would give every user (camera switches, the
    # observer) topics under its own name; so each machine user is listed with
    # exactly its topics.
    if $add; then
        cp "$out/acl" "$work/acl"
    else
        {
            echo "# The ACL of the claw-gateway site on $(uname -n), made $now"
            echo "# by make-site-secrets.sh from deploy/acl; make-site-secrets.sh --add appends machines."
            echo "#"
            sed -E "s#^topic (read|write|readwrite) claw/#topic \1 $prefix/#" "$template"
        } > "$work/acl"
    fi
    for id in "${machines[@]}"; do
        cat >> "$work/acl" <<EOF

# Machine $id. Its PC: commands, coins and the confirmations of its
# results in; acks, results, its state (retained, and its last will) and its
# board's faults out.
user $id
topic read $prefix/$id/control
topic read $prefix/$id/camera
topic read $prefix/$id/result/ack
topic write $prefix/$id/ack
topic write $prefix/$id/result
topic write $prefix/$id/state
topic write $prefix/$id/fault
# Its camera switch: camera commands in, acks out.
user $id-camera
topic read $prefix/$id/camera
topic write $prefix/$id/ack
EOF
    done
fi

# Install. Certificates and the ACL are public; keys, the password hashes and
# the clear passwords are not.
if $make_logins; then
    if $add; then
        cat "$out/passwd" "$work/new-passwd" > "$work/passwd"
        cat "$out/passwords" "$work/new-passwords" > "$work/passwords"
    else
        mv "$work/new-passwd" "$work/passwd"
        mv "$work/new-passwords" "$work/passwords"
    fi
    put 0600 "$work/passwd" "$out/passwd" mosquitto
    put 0600 "$work/passwords" "$out/passwords"
    put 0644 "$work/acl" "$out/acl"
fi
if $make_tls; then
    for name in ca server gateway; do
        [ -e "$work/$name.crt" ] || continue
        put 0644 "$work/$name.crt" "$tls/$name.crt"
        if [ "$name" = server ]; then put 0600 "$work/$name.key" "$tls/$name.key" mosquitto
        else put 0600 "$work/$name.key" "$tls/$name.key"; fi
    done
    if ! $gateway_cert; then rm -f "$tls/gateway.crt" "$tls/gateway.key"; fi
    chmod 0755 "$tls"
fi
chmod 0755 "$out"

if $add; then
    cat <<EOF
Added to $out: ${users[*]}
  passwd, acl   their password hashes and ACL blocks
  passwords     their clear passwords

Next:
  1. Broker: systemctl reload mosquitto (it rereads passwd and acl; connected
     clients stay connected).
  2. Gateway: add the machines to /etc/claw-gateway/gateway.yaml, then
     systemctl restart claw-gateway
  3. Each new PC: tls/ca.crt, its machine id as username and its password; its
     camera switch: the username <machine id>-camera and its own password.
EOF
    exit 0
fi

if ! $make_tls; then
    cat <<EOF
Made in $out:
  passwd      mosquitto's password_file
  acl         mosquitto's acl_file (topic prefix $prefix)
  passwords   the clear passwords of: ${users[*]}
EOF
    exit 0
fi
if ! $make_logins; then
    cat <<EOF
Made in $out, the broker certificate for ${san//,/, }:
  tls/ca.crt, tls/ca.key          the site CA (ca.key stays here, private: it signs certificates)
  tls/server.crt, tls/server.key  the broker's certificate (certfile, keyfile of the arcade listener)
  tls/gateway.crt, .key           the gateway's client certificate (unless --no-gateway-cert)

Next: the arcade network's listener in /etc/mosquitto/conf.d/claw-gateway.conf
(its address in place of ARCADE_LAN_ADDRESS), systemctl restart mosquitto, and
give each PC tls/ca.crt (docs/INSTALL.md).
EOF
    exit 0
fi

gateway_files="tls/ca.crt"
if $gateway_cert; then gateway_files="tls/ca.crt, tls/gateway.crt and tls/gateway.key"; fi
cat <<EOF
Made in $out, the broker certificate for ${san//,/, }:
  tls/ca.crt, tls/ca.key          the site CA (ca.key stays here, private: it signs certificates)
  tls/server.crt, tls/server.key  the broker's certificate (mosquitto.conf: certfile, keyfile)
  tls/gateway.crt, .key           the gateway's client certificate (unless --no-gateway-cert)
  passwd                          mosquitto's password_file
  acl                             mosquitto's acl_file (topic prefix $prefix)
  passwords                       the clear passwords of: ${users[*]}

Next:
  1. Broker: install deploy/mosquitto.conf as /etc/mosquitto/conf.d/claw.conf,
     put the address of this host on the arcade network in place of
     ARCADE_LAN_ADDRESS, then: systemctl restart mosquitto
  2. Gateway: copy $gateway_files
     to /etc/claw-gateway/tls/ (a key: chown root:claw-gateway, chmod 0640), and
     put the gateway's password in /etc/claw-gateway/env as MQTT_PASSWORD=...
  3. Machine PCs: give each PC tls/ca.crt, its username (its machine id) and its
     password from $out/passwords, and its camera switch the username
     <machine id>-camera and its password. They connect with TLS to port 8883
     using a name or address of the certificate above.
EOF
