#!/bin/sh
# peers.sh CHECK_JSON ARGS... - check_json.py ARGS for 'moeft bench wal
# --peers', skipped (77) where PMDK's libpmemlog.so.1 is not installed
# (tools/setup.sh --deps installs libpmemlog1; CI has it).
check=$1
shift
if ! ldconfig -p 2>/dev/null | grep -q 'libpmemlog\.so\.1 '; then
	echo "peers.sh: libpmemlog.so.1 is not installed: skipped"
	exit 77
fi
exec python3 "$check" "$@"
