# The setup tests/cli/test_checkpoints.sh and test_resume.sh share, sourced
# after `T` and `DATA` are set: mpirun's flags, python, a temporary
# directory removed on exit, the failure counter and a 60 KB corpus
# ($tmp/small.txt).
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
PY=/usr/bin/python3
XXH3="$(dirname "${BASH_SOURCE[0]}")/ckpt_xxh3.py" # the independent checksum reader
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails+1)); }
head -c 60000 "$DATA/tinyshakespeare.txt" > "$tmp/small.txt"
