#!/usr/bin/env bash
# Every tool of `procjournal mcp`, and every optional argument of every tool, called through the
# real MCP Inspector CLI (`mcp-inspector --cli`), as an agent developer checks a server by hand.
#
#   tests/mcp/inspector.sh BINARY SCRATCH
#   tests/mcp/inspector.sh --install      (only installs the pinned Inspector, for .ci/run)
#
# BINARY is the procjournal binary; SCRATCH an empty directory (the runtime root and each call's
# output go there). The Inspector is installed, pinned, into target/inspector (or
# $PROCJOURNAL_INSPECTOR_DIR) when it is not there yet. Each call starts a new server, attached
# (the default mode), so processes outlive the call that started them; the daemon the first server
# starts is shut down at the end.
#
# What fails the script: an Inspector call that exits non-zero, a result whose `isError` is not
# what the step expects, a result lacking what the step checks, an `unknown format` warning in any
# call's stdout or stderr, a tool tools/list offers that no step calls, and an argument of a
# tool's input schema that no step sends (the list comes from tools/list, so a new argument
# without a step here fails the script instead of going untested).
set -euo pipefail

INSPECTOR_VERSION=2.12.0

if [ $# -ne 2 ] && [ "${1:-}" != --install ]; then
  echo "usage: $0 BINARY SCRATCH | $0 --install" >&2
  exit 2
fi
repo=$(cd "$(dirname "$0")/../.." && pwd)
inspector_dir=${PROCJOURNAL_INSPECTOR_DIR:-$repo/target/inspector}
package_json=$inspector_dir/node_modules/@modelcontextprotocol/inspector/package.json
installed=$(node -p "require('$package_json').version" 2>/dev/null || true)
if [ "$installed" != "$INSPECTOR_VERSION" ]; then
  mkdir -p "$inspector_dir"
  npm install --prefix "$inspector_dir" --save-exact --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" >&2
fi
if [ "$1" = --install ]; then
  exit 0
fi
binary=$(realpath "$1")
scratch=$(realpath "$2")
cli=$inspector_dir/node_modules/.bin/mcp-inspector

root=$scratch/root
work=$scratch/calls
mkdir -p "$work"
: >"$work/sent"

shutdown_status=none
shutdown_daemon() {
  if [ -S "$root/procjournal.sock" ]; then
    shutdown_status=0
    "$binary" shutdown --root "$root" </dev/null >"$work/shutdown.out" 2>&1 || shutdown_status=$?
  fi
}
trap shutdown_daemon EXIT

calls=0
failed=0
warnings=0

fail() {
  failed=$((failed + 1))
  echo "FAILED: $*" >&2
}

# Fails when a call's output mentions a format a validator does not know.
scan_warnings() {
  local label=$1 hits
  hits=$({ grep -ci "unknown format" "$work/$label.out" "$work/$label.err" || true; } | awk -F: '{s += $NF} END {print s + 0}')
  if [ "$hits" -gt 0 ]; then
    warnings=$((warnings + hits))
    fail "$label: $hits 'unknown format' warnings"
    grep -i 'unknown format' "$work/$label.out" "$work/$label.err" >&2 || true
  fi
}

# inspect LABEL ALLOWED-STATUS INSPECTOR-ARGS...: one Inspector call; its stdout in
# $work/LABEL.out. The CLI exits 0 for a result and 5 for a tool error (isError).
inspect() {
  local label=$1 allowed=$2 rc=0
  shift 2
  calls=$((calls + 1))
  node "$cli" --cli "$binary" mcp --root "$root" "$@" \
    >"$work/$label.out" 2>"$work/$label.err" </dev/null || rc=$?
  scan_warnings "$label"
  if [ "$rc" -ne 0 ] && [ "$rc" -ne "$allowed" ]; then
    fail "$label: the Inspector exited $rc"
    sed 's/^/  /' "$work/$label.err" >&2
    return 1
  fi
}

# call LABEL ok|error TOOL [KEY=VALUE...]: tools/call with each pair as a --tool-arg; checks the
# result's isError against the expectation and records which arguments were sent.
call() {
  local label=$1 expect=$2 tool=$3 pair
  shift 3
  local args=()
  for pair in "$@"; do
    args+=(--tool-arg "$pair")
    printf '%s %s\n' "$tool" "${pair%%=*}" >>"$work/sent"
  done
  printf '%s\n' "$tool" >>"$work/called"
  local allowed=0
  if [ "$expect" = error ]; then allowed=5; fi
  inspect "$label" "$allowed" --method tools/call --tool-name "$tool" "${args[@]}" || return 0
  local is_error
  is_error=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("isError") is True)' \
    "$work/$label.out" 2>/dev/null || echo unreadable)
  case "$expect:$is_error" in
    ok:False | error:True) ;;
    *)
      fail "$label: $tool expected $expect, isError=$is_error"
      head -c 2000 "$work/$label.out" >&2
      ;;
  esac
}

# check LABEL WHAT PYTHON-EXPR: the expression, over `r` (structuredContent) and `text` (the
# first content's text), must be true.
check() {
  local label=$1 what=$2 expr=$3
  if ! python3 - "$work/$label.out" "$expr" <<'EOF'; then
import json, sys
d = json.load(open(sys.argv[1]))
r = d.get("structuredContent") or {}
text = (d.get("content") or [{}])[0].get("text", "")
sys.exit(0 if eval(sys.argv[2]) else 1)
EOF
    fail "$label: $what ($expr)"
    head -c 3000 "$work/$label.out" >&2
    echo >&2
  fi
}

# field LABEL PYTHON-EXPR: prints the expression's value over `r`.
field() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])).get("structuredContent") or {}; print(eval(sys.argv[2]))' \
    "$work/$1.out" "$2" 2>/dev/null || echo missing
}

# --- tools/list: the tools and their arguments this script must cover.
inspect tools-list 0 --method tools/list
python3 - "$work/tools-list.out" >"$work/schema" <<'EOF'
import json, sys
for tool in json.load(open(sys.argv[1]))["tools"]:
    print(tool["name"], "-")
    for arg in tool["inputSchema"].get("properties", {}):
        print(tool["name"], arg)
EOF
portability=$(grep -m1 'Schema portability' "$work/tools-list.err" || echo "no portability findings")

# --- tools/list --strict: every portability finding in full. There must be none, in input
# schemas (what a client must map onto its own dialect to send arguments) or output schemas (a
# result leaves out a field without a value, so no field is typed null and none has a `type`
# array). The Inspector prints nothing for a clean listing.
inspect tools-list-strict 0 --method tools/list --strict
strict=$(python3 - "$work/tools-list-strict.err" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
findings = re.findall(r'^(Warning|Error): tool "([^"]+)"\n  Path: (\S+)\n  Issue: (.*)$', text, re.M)
bad = [f"{t}:{p}: {i}" for kind, t, p, i in findings]
summary = re.search(r"^(\d+) errors?, (\d+) warnings?", text, re.M)
# The Inspector prints the report, and its summary line, only when it found something.
if summary is None:
    if findings:
        bad.append("findings-without-a-summary-line")
elif int(summary.group(1)) + int(summary.group(2)) != len(findings):
    bad.append(f"summary-{summary.group(1)}+{summary.group(2)}-but-{len(findings)}-read")
print(len(findings), ",".join(bad) or "-")
EOF
)
read -r strict_findings strict_bad <<<"$strict"
if [ "$strict_bad" != "-" ]; then
  fail "tools/list --strict: $strict_bad"
fi

# --- admission and an empty list
call admission ok admission
check admission "admission reports its slots" '"slots" in r or len(r) > 0'
call list-empty ok list "state=running"
check list-empty "nothing runs yet" 'r["processes"] == []'

# --- start with every option but client_env and pty; yield until quiet
call start-a ok start \
  'command=echo "$GREETING $KEPT"; pwd; read line; echo "got:$line"; exec sleep 300' \
  cwd=/tmp inherit_env=true 'env={"GREETING":"hello"}' 'env_persist={"KEPT":"kept"}' \
  'labels={"suite":"inspector"}' name=ins-a timeout_ms=600000 idle_timeout_ms=600000 \
  retention_bytes=8388608 queue_ms=1000 login_shell_overlay=false \
  yield_ms=5000 settle_ms=300 max_bytes=4096
check start-a "running, labelled and named" \
  'r["state"] == "running" and r["labels"] == {"suite": "inspector", "name": "ins-a"} and r["cwd"] == "/tmp"'
check start-a "the retention and limits are recorded" \
  'r["retention_bytes"] == 8388608 and r["timeout_ms"] == 600000 and r["idle_timeout_ms"] == 600000'
check start-a "yield adds a page from cursor 0" \
  'r["output"]["cursor"] == 0 and r["output"]["next_cursor"] == len(r["output"]["data"].encode())'
a_handle=$(field start-a 'r["handle"]')
a_number=$(field start-a 'r["number"]')

# --- output: by name, by number, by #number; min_bytes, settle_ms, tail_lines, base64
call out-min ok output handle=ins-a cursor=0 wait_ms=10000 min_bytes=16 max_bytes=1024
check out-min "the environment and cwd reached the command" 'r["data"] == "hello kept\n/tmp\n"'
check out-min "the name resolves to the handle" "r['handle'] == '$a_handle'"
call out-settle ok output "handle=$a_number" cursor=0 wait_ms=3000 settle_ms=200
check out-settle "settle returns what came before the quiet" 'r["data"] == "hello kept\n/tmp\n" and r["state"] == "running"'
call out-tail ok output "handle=#$a_number" tail_lines=1
check out-tail "the last line, its cursor past the first" 'r["data"] == "/tmp\n" and r["cursor"] == 11'
call out-base64 ok output "handle=$a_handle" rendering=base64 max_bytes=5
check out-base64 "base64 of the first 5 bytes" 'r["data"] == "aGVsbG8=" and r["next_cursor"] == 5'

# --- input (text) and await_input both ways
call await-on ok await_input handle=ins-a waiting=true
check await-on "marked waiting" 'r["waiting"] is True and r["changed"] is True'
call await-off ok await_input handle=ins-a waiting=false
check await-off "mark cleared" 'r["waiting"] is False and r["changed"] is True'
call input-text ok input handle=ins-a 'text=world
'
check input-text "6 bytes written" 'r["bytes_written"] == 6 and r["closed"] is False'
call out-echo ok output handle=ins-a cursor=16 wait_ms=10000 min_bytes=10
check out-echo "the command echoed the input" 'r["data"] == "got:world\n"'

# --- list with a label and a state
call list-label ok list label=suite=inspector state=running
check list-label "the running labelled process, only" "[p['handle'] for p in r['processes']] == ['$a_handle']"

# --- interrupt, then wait
call interrupt ok interrupt handle=ins-a
call wait-a ok wait handle=ins-a timeout_ms=10000
check wait-a "ended by SIGINT" 'r["signal"] == 2 and r["state"] in ("interrupted", "terminated")'

# --- start with client_env (argv form), to its end
call start-b ok start 'command=["sh","-c","echo $ONLY"]' \
  'client_env={"ONLY":"client","PATH":"/usr/bin:/bin"}' yield_ms=10000
check start-b "ran to its end within the yield" \
  'r["state"] == "exited" and r["exit_code"] == 0 and r["output"]["data"] == "client\n"'
b_handle=$(field start-b 'r["handle"]')

# --- restart, both environment sources, a terminal, a queue
call restart-client ok restart "handle=$b_handle" 'client_env={"ONLY":"again","PATH":"/usr/bin:/bin"}' \
  'env={"EXTRA":"1"}' queue_ms=1000 'pty={"rows":10,"cols":20}'
check restart-client "linked to the first run" "r['restart_of'] == '$b_handle' and r['handle'] != '$b_handle'"
rc_handle=$(field restart-client 'r["handle"]')
call restart-inherit ok restart "handle=$b_handle" inherit_env=true
check restart-inherit "linked to the first run" "r['restart_of'] == '$b_handle'"
call wait-rc ok wait "handle=$rc_handle" timeout_ms=10000
check wait-rc "the restart exited" 'r["state"] == "exited" and r["exit_code"] == 0'
call out-rc ok output "handle=$rc_handle"
check out-rc "the restart saw its new environment, on a terminal" \
  '"again" in r["data"] and r["spans"][0]["stream"] == "terminal"'

# --- pty and resize
call start-pty ok start 'command=stty size; read x; stty size' inherit_env=true \
  'pty={"rows":24,"cols":80}'
call out-pty ok output handle="$(field start-pty 'r["handle"]')" wait_ms=10000 min_bytes=6
check out-pty "the terminal has the size asked" '"24 80" in r["data"]'
pty_handle=$(field start-pty 'r["handle"]')
call resize ok resize "handle=$pty_handle" rows=40 cols=120
call input-pty ok input "handle=$pty_handle" 'text=go
'
call wait-pty ok wait "handle=$pty_handle" timeout_ms=10000
call out-pty2 ok output "handle=$pty_handle" tail_lines=1
check out-pty2 "the terminal was resized" '"40 120" in r["data"]'

# --- input as base64, and close
call start-cat ok start command=cat inherit_env=true
cat_handle=$(field start-cat 'r["handle"]')
call input-b64 ok input "handle=$cat_handle" base64=aGkK close=true
check input-b64 "3 bytes, then closed" 'r["bytes_written"] == 3 and r["closed"] is True'
call wait-cat ok wait "handle=$cat_handle" timeout_ms=10000
check wait-cat "cat ended at end of input" 'r["state"] == "exited" and r["exit_code"] == 0'

# --- stop with a grace
call start-sleep ok start 'command=exec sleep 300' inherit_env=true
call stop ok stop "handle=$(field start-sleep 'r["handle"]')" grace_ms=5000
check stop "terminated by SIGTERM" 'r["state"] == "terminated" and r["signal"] == 15'

# --- capture, with a limit and base64
call capture ok capture 'start={"command":"printf 0123456789","inherit_env":true}' max_bytes=4 rendering=base64
check capture "an incomplete prefix of 4 bytes, in base64" \
  'r["complete"] is False and r["streams"][0]["prefix"] == "MDEyMw==" and r["streams"][0]["resume_cursor"] == 4'

# --- a refused call is a tool error, not a crash
call bad-handle error output "handle=p-$(printf '0%.0s' {1..32})"
check bad-handle "unknown_handle" 'text.startswith("unknown_handle: ")'

# --- coverage: every tool listed, every argument of its schema sent
coverage=$(python3 - "$work/schema" "$work/sent" "$work/called" <<'EOF'
import sys
schema = {tuple(l.split(" ", 1)) for l in open(sys.argv[1]).read().splitlines()}
sent = {tuple(l.split(" ", 1)) for l in open(sys.argv[2]).read().splitlines()}
called = set(open(sys.argv[3]).read().split())
tools = {t for t, a in schema if a == "-"}
args = {(t, a) for t, a in schema if a != "-"}
missing = sorted(f"tool {t}" for t in tools - called) + sorted(f"{t}.{a}" for t, a in args - sent)
print(len(args & sent), len(args), " ".join(missing) or "-")
EOF
)
read -r covered total missing <<<"$coverage"
if [ "$missing" != "-" ]; then
  fail "never sent: $missing"
fi

shutdown_daemon
trap - EXIT
if [ "$shutdown_status" != 0 ]; then
  fail "shutdown exited $shutdown_status: $(cat "$work/shutdown.out" 2>/dev/null)"
fi
# The daemon removes its socket as it exits, after answering the shutdown; the bound only keeps
# a daemon that never exits from hanging the script.
for _ in $(seq 100); do
  [ -S "$root/procjournal.sock" ] || break
  sleep 0.1
done
if [ -S "$root/procjournal.sock" ]; then
  fail "the daemon did not exit after shutdown"
fi

echo "inspector $INSPECTOR_VERSION: $calls calls, $covered of $total arguments sent, $warnings 'unknown format' warnings, $failed failed ($portability; --strict: $strict_findings findings)"
[ "$failed" -eq 0 ]
