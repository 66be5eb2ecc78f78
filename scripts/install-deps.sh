#!/bin/sh
# install-deps.sh — makes sure the Debian packages genparity builds against are present.
#   --check : exit quietly when everything is there; otherwise install (as root) or print the apt-get line.
# Packages: gcc/make (build), libcjson-dev (JSON), libpcre2-dev (tokenizer regexes), libutf8proc-dev (Unicode
# normalization), g++ (header C++ check), python3-venv (the test-only virtual environment of scripts/venv.sh),
# libmicrohttpd-dev (HTTP for `genparity serve`).
PKGS="gcc g++ make libcjson-dev libpcre2-dev libutf8proc-dev python3-venv libmicrohttpd-dev"
missing=""
have_hdr() { [ -f "/usr/include/$1" ] || [ -f "/usr/include/x86_64-linux-gnu/$1" ]; }
have_hdr cjson/cJSON.h || missing="$missing libcjson-dev"
have_hdr pcre2.h || missing="$missing libpcre2-dev"
have_hdr utf8proc.h || missing="$missing libutf8proc-dev"
have_hdr microhttpd.h || missing="$missing libmicrohttpd-dev"
command -v gcc >/dev/null 2>&1 || missing="$missing gcc"
command -v g++ >/dev/null 2>&1 || missing="$missing g++"
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || missing="$missing python3-venv"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
    echo "install-deps: installing$missing" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing) >&2 || {
        echo "install-deps: apt-get failed; run: apt-get install -y$missing" >&2; exit 1; }
else
    echo "install-deps: missing packages; run as root: apt-get update && apt-get install -y$missing" >&2
    exit 1
fi
