"""Drives `procjournal mcp` with the official Python MCP client SDK (the `mcp` package).

Run by tests/it/mcp_python.rs (cargo test) with the venv's python:

    target/mcp-venv/bin/python tests/mcp/session_test.py --binary target/debug/procjournal --workdir DIR

What it proves, against the real binary over stdio:
- initialize and tools/list: the server's identity, instructions and every tool's schema;
- a session: start -> output twice (the second page resumes at the first page's next_cursor)
  -> input (echoed back by the command) -> stop -> wait, with the cursor arithmetic checked;
- bad input: unknown handles, malformed arguments, cursors out of range, huge requests each get
  a tool error (isError) with a `code: message` text, the runtime root is byte-for-byte
  unchanged, and the server keeps serving; an unknown tool is a protocol error;
- paced reads: start with yield_ms (to the end; with settle_ms, back while running), output
  with min_bytes, settle_ms and tail_lines, processes named by number; the SDK validates every
  structured result against the tool's declared output schema;
- the 2026-07-28 revision (server/discover instead of initialize) on the third server;
- restart, standalone (`--standalone`: the server runs its own supervisor): a server killed with
  SIGKILL leaves its live process `lost_on_restore`; the next server lists the first server's
  processes and serves their output (from any cursor); a second server on the same root is
  refused with an error naming the lock; a server whose client closes stdin stops its processes
  gracefully (`terminated`, not `lost_on_restore`);
- attached (the default: the server is a client of the root's daemon, which it starts): a process
  started through one server is still running when a later server reads and stops it; the
  daemon is shut down at the end.

Exits 0 when every check passed; otherwise an assertion names the check that failed.
"""

import argparse
import base64
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

TOOLS = {"start", "output", "input", "stop", "interrupt", "wait", "list", "admission", "await_input", "resize", "restart", "capture"}
HANDLE = re.compile(r"^p-[0-9a-f]{32}$")
# Every request gets an answer within this; `wait` and `output` calls pass smaller timeouts.
CALL_TIMEOUT_S = 30.0

passed = 0


def check(condition, what, detail=None):
    global passed
    if not condition:
        raise AssertionError(f"FAILED: {what}" + (f"\n  got: {detail!r}" if detail is not None else ""))
    passed += 1
    print(f"ok: {what}", flush=True)


class Server:
    """One `procjournal mcp` process and a client session on it."""

    def __init__(self, binary, root, log_path, pidfile=None, standalone=True):
        self.binary, self.root, self.log_path, self.pidfile = binary, root, log_path, pidfile
        self.mode = ["--standalone"] if standalone else []
        self.stack = AsyncExitStack()
        self.session = None

    async def __aenter__(self):
        if self.pidfile is None:
            params = StdioServerParameters(command=self.binary, args=["mcp", "--root", self.root, "--max-concurrent", "64", *self.mode])
        else:
            # The shell records its pid and becomes the server (exec), so the test can SIGKILL it.
            script = 'echo $$ > "$0"; exec "$1" mcp --root "$2" --max-concurrent 64 --standalone'
            params = StdioServerParameters(command="/bin/sh", args=["-c", script, self.pidfile, self.binary, self.root])
        log = self.stack.enter_context(open(self.log_path, "a"))
        read, write = await self.stack.enter_async_context(stdio_client(params, errlog=log))
        self.session = await self.stack.enter_async_context(ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S))
        return self

    async def __aexit__(self, *exc):
        await self.stack.aclose()

    async def call(self, tool, arguments):
        """A successful call's structured result; fails the test on a tool error."""
        result = await self.session.call_tool(tool, arguments)
        text = result.content[0].text if result.content else None
        check(not result.is_error, f"{tool} succeeds", None if not result.is_error else text)
        return result.structured_content

    async def refused(self, tool, arguments, code, what, mentions=None):
        """A call that must be a tool error with `code`; returns its message."""
        result = await self.session.call_tool(tool, arguments)
        text = result.content[0].text if result.content else ""
        check(result.is_error is True, f"{what}: {tool} returns isError", text)
        check(text.startswith(f"{code}: "), f"{what}: the message starts with {code!r}", text)
        check(result.structured_content is None, f"{what}: an error has no structured content", result.structured_content)
        if mentions is not None:
            check(mentions in text, f"{what}: the message mentions {mentions!r}", text)
        return text

    async def read_until(self, handle, cursor, needle, timeout_s=10.0):
        """Pages from `cursor` until the text read contains `needle`; checks each page's cursors."""
        text = ""
        deadline = time.monotonic() + timeout_s
        while needle not in text:
            check(time.monotonic() < deadline, f"output of {handle} reaches {needle!r} in time", text)
            page = await self.session.call_tool("output", {"handle": handle, "cursor": cursor, "wait_ms": 1000})
            assert not page.is_error, page.content
            page = page.structured_content
            assert page["cursor"] == cursor and not page["gap"] and not page["cursor_ahead"], page
            assert page["next_cursor"] - cursor == len(page["data"].encode()), page
            text += page["data"]
            cursor = page["next_cursor"]
        return text, cursor


def snapshot(root):
    """Every file under the root: path, size and content hash."""
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, root)] = (os.path.getsize(path), hashlib.sha256(f.read()).hexdigest())
    return files


async def quiescent_snapshot(root):
    """A snapshot that stays the same for half a second (publication records are written in the
    background after a process ends)."""
    before = snapshot(root)
    for _ in range(20):
        await anyio.sleep(0.5)
        now = snapshot(root)
        if now == before:
            return now
        before = now
    raise AssertionError("the runtime root never stopped changing")


async def first_server(args, root, work, state):
    async with Server(args.binary, root, work / "server1.log", pidfile=str(work / "server1.pid")) as server:
        s = server.session
        init = await s.initialize()
        check(init.server_info.name == "procjournal", "initialize: the server is procjournal", init.server_info)
        check(init.capabilities.tools is not None, "initialize: the server offers tools")
        check("next_cursor" in (init.instructions or ""), "initialize: instructions explain resuming output")
        check("stopped when the server exits" in (init.instructions or ""), "initialize: standalone, the instructions say processes end with the server", init.instructions)

        listed = (await s.list_tools()).tools
        by_name = {t.name: t for t in listed}
        check(set(by_name) == TOOLS, "tools/list: start, output, input, stop, interrupt, wait, list, admission, await_input", sorted(by_name))
        for tool in listed:
            check(len(tool.description or "") > 40, f"tools/list: {tool.name} has a description for an agent")
            check(tool.input_schema.get("type") == "object", f"tools/list: {tool.name} takes an object")
            check(tool.input_schema.get("additionalProperties") is False, f"tools/list: {tool.name} refuses unknown fields")
            check((tool.output_schema or {}).get("type") == "object", f"tools/list: {tool.name} declares an output schema")
            if tool.name not in ("start", "list", "admission", "capture"):
                check("handle" in tool.input_schema.get("required", []), f"tools/list: {tool.name} requires a handle")
        output_props = by_name["output"].input_schema["properties"]
        for prop in ("handle", "cursor", "max_bytes", "rendering", "wait_ms"):
            check(prop in output_props, f"tools/list: output takes {prop}")
        for word in ("next_cursor", "safe_text", "base64"):
            # The listing is kept small: the instructions, read once per session, explain pages.
            told = by_name["output"].description + (init.instructions or "") + json.dumps(output_props)
            check(word in told, f"tools/list: the output description, its arguments or the instructions explain {word}")
        check(by_name["output"].annotations.read_only_hint is True, "tools/list: output is read-only")
        retention = by_name["start"].input_schema["properties"].get("retention_bytes", {})
        check((retention.get("minimum"), retention.get("maximum")) == (8 << 20, 4 << 30), "tools/list: start takes retention_bytes, 8 MiB to 4 GiB", retention)

        # --- start -> output twice -> input -> stop -> wait
        script = 'printf "alpha\\n"; printf "beta\\n"; read line; echo "got:$line"; exec sleep 300'
        started = await server.call("start", {"command": ["sh", "-c", script], "labels": {"test": "mcp"}})
        handle = started["handle"]
        check(HANDLE.match(handle) is not None, "start returns a handle", handle)
        check(started["state"] == "running", "start: the process is running", started["state"])
        check(started["labels"] == {"test": "mcp"}, "start: labels are kept", started["labels"])
        check(started["retention_bytes"] == 64 << 20, "start: the server's default retention is recorded", started)
        state["first"] = handle

        # Wait until both lines are there, so the two pages below are deterministic.
        await server.read_until(handle, 0, "beta\n")
        page1 = await server.call("output", {"handle": handle, "cursor": 0, "max_bytes": 6})
        check(page1["data"] == "alpha\n", "output page 1 is the first line", page1["data"])
        check((page1["cursor"], page1["next_cursor"]) == (0, 6), "output page 1 covers bytes 0..6", page1)
        check(page1["total_bytes"] == 11 and page1["retained_from"] == 0, "output page 1: 11 bytes written, all retained", page1)
        check(page1["gap"] is False and page1["cursor_ahead"] is False, "output page 1: no gap, cursor not ahead", page1)
        check(page1["spans"] == [{"cursor": 0, "len": 6, "stream": "stdout"}], "output page 1: the bytes came from stdout", page1["spans"])
        page2 = await server.call("output", {"handle": handle, "cursor": page1["next_cursor"], "max_bytes": 1024})
        check(page2["data"] == "beta\n", "output page 2 resumes exactly at next_cursor", page2["data"])
        check((page2["cursor"], page2["next_cursor"]) == (6, 11), "output page 2 covers bytes 6..11", page2)
        check(page2["state"] == "running", "output page 2: still running", page2["state"])
        state["resume_cursor"] = page2["cursor"]

        wrote = await server.call("input", {"handle": handle, "text": "hello mcp\n"})
        check(wrote["bytes_written"] == 10 and wrote["closed"] is False, "input writes 10 bytes", wrote)
        echoed, end = await server.read_until(handle, page2["next_cursor"], "got:hello mcp\n")
        check(echoed == "got:hello mcp\n", "the command echoes the input back", echoed)
        check(end == 25, "25 bytes of output in all", end)
        raw = await server.call("output", {"handle": handle, "rendering": "base64"})
        check(base64.b64decode(raw["data"]) == b"alpha\nbeta\ngot:hello mcp\n", "base64 rendering is the exact bytes", raw["data"])
        check(raw["rendering"] == "base64" and raw["next_cursor"] == 25, "base64 page covers everything", raw)

        stopped = await server.call("stop", {"handle": handle, "grace_ms": 3000})
        check(stopped["state"] in ("terminated", "killed"), "stop: terminated or killed", stopped["state"])
        check(stopped["signal"] in (15, 9) and "exit_code" not in stopped, "stop: ended by a signal", stopped)
        waited = await server.call("wait", {"handle": handle, "timeout_ms": 5000})
        check(waited["state"] == stopped["state"], "wait: the same terminal state", waited)
        check(waited["signal"] == stopped["signal"], "wait: the same signal", waited)
        check(waited["total_bytes"] == 25 and waited["capture"] == "complete", "wait: all 25 bytes captured", waited)
        state["first_state"] = waited["state"]
        final = await server.call("output", {"handle": handle, "cursor": 25})
        check(final["data"] == "" and final["next_cursor"] == 25 == final["total_bytes"], "output at the end: nothing more", final)
        check(final["state"] == waited["state"], "output reports the terminal state", final["state"])

        # --- bad input: clear tool errors, nothing on disk changes, the server keeps serving
        before = await quiescent_snapshot(root)
        nobody = "p-" + "0" * 32
        await server.refused("output", {"handle": nobody}, "unknown_handle", "unknown handle", mentions=nobody)
        await server.refused("wait", {"handle": nobody, "timeout_ms": 10}, "unknown_handle", "unknown handle")
        await server.refused("stop", {"handle": nobody}, "unknown_handle", "unknown handle")
        await server.refused("input", {"handle": nobody, "text": "x"}, "unknown_handle", "unknown handle")
        await server.refused("output", {"handle": "p-xyz"}, "bad_args", "malformed handle", mentions="not a process reference")
        await server.refused("output", {}, "bad_args", "missing handle", mentions="handle")
        await server.refused("start", {"command": 7}, "bad_args", "command as a number", mentions="sequence")
        await server.refused("start", {"command": []}, "bad_args", "empty command", mentions="empty")
        await server.refused("start", {"command": ["true"], "colour": "red"}, "bad_args", "unknown field", mentions="colour")
        await server.refused("start", {"command": ["true"], "cwd": "relative/dir"}, "bad_args", "relative cwd", mentions="absolute")
        await server.refused("output", {"handle": handle, "cursor": -1}, "bad_args", "negative cursor")
        await server.refused("output", {"handle": handle, "max_bytes": 10**9}, "bad_args", "huge max_bytes", mentions="out of range")
        await server.refused("output", {"handle": handle, "max_bytes": 0}, "bad_args", "zero max_bytes", mentions="out of range")
        await server.refused("output", {"handle": handle, "rendering": "html"}, "bad_args", "unknown rendering", mentions="html")
        await server.refused("output", {"handle": handle, "wait_ms": 10**7}, "bad_args", "huge wait_ms", mentions="out of range")
        await server.refused("stop", {"handle": handle, "grace_ms": 10**9}, "bad_args", "huge grace", mentions="out of range")
        await server.refused("input", {"handle": handle, "text": "x", "base64": "eA=="}, "bad_args", "text and base64")
        await server.refused("input", {"handle": handle, "base64": "%%%"}, "bad_args", "bad base64")
        await server.refused("input", {"handle": handle, "text": "x" * (2 << 20)}, "too_large", "2 MiB of input", mentions="at most")
        await server.refused("input", {"handle": handle, "text": "late\n"}, "not_running", "input after stop")
        await server.refused("list", {"state": "sleeping"}, "bad_args", "unknown state")
        ahead = await server.call("output", {"handle": handle, "cursor": 10**6})
        check(ahead["cursor_ahead"] is True and ahead["data"] == "", "cursor beyond the end: cursor_ahead, no data", ahead)
        check(ahead["next_cursor"] == 25 == ahead["total_bytes"], "cursor beyond the end: next_cursor is the end", ahead)
        try:
            await s.call_tool("launch", {})
            check(False, "an unknown tool is a protocol error")
        except MCPError as e:
            check("unknown tool" in str(e) and "start" in str(e), "an unknown tool is a protocol error naming the tools", str(e))
        check(await quiescent_snapshot(root) == before, "bad input changed nothing on disk")
        listed = await server.call("list", {})
        check([p["handle"] for p in listed["processes"]] == [handle], "the server still serves after bad input", listed)

        # A program that cannot be spawned is recorded as failed under the handle the error names.
        text = await server.refused("start", {"command": ["/nonexistent/program"]}, "spawn_failed", "missing program", mentions="not found")
        failed = re.search(r"p-[0-9a-f]{32}", text)
        check(failed is not None, "spawn_failed names the handle", text)
        state["failed"] = failed.group(0)

        # --- a live process, then the server dies without a chance to clean up
        live = await server.call("start", {"command": ["sh", "-c", 'echo "pid:$$"; exec sleep 60']})
        text, _ = await server.read_until(live["handle"], 0, "\n")
        state["live"], state["orphan_pid"] = live["handle"], int(text.strip().split(":")[1])
        state["live_text"] = text
        pid = int(Path(work / "server1.pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        print(f"killed server 1 (pid {pid}) with SIGKILL", flush=True)
        # Let the client see the closed pipes before its context exits.
        await anyio.sleep(0.2)


async def second_server(args, root, work, state):
    async with Server(args.binary, root, work / "server2.log") as server:
        await server.session.initialize()
        listed = {p["handle"]: p for p in (await server.call("list", {}))["processes"]}
        check(list(listed) == [state["first"], state["failed"], state["live"]], "restart: the first server's processes are listed, oldest first", list(listed))
        check(listed[state["first"]]["state"] == state["first_state"], "restart: the stopped process kept its state", listed[state["first"]])
        check(listed[state["failed"]]["state"] == "failed", "restart: the unspawnable process is failed", listed[state["failed"]])
        check(listed[state["live"]]["state"] == "lost_on_restore", "restart: the live process is lost_on_restore", listed[state["live"]])

        whole = await server.call("output", {"handle": state["first"]})
        check(whole["data"] == "alpha\nbeta\ngot:hello mcp\n", "restart: the finished process's output is served", whole["data"])
        check(whole["next_cursor"] == whole["total_bytes"] == 25, "restart: read to the end", whole)
        resumed = await server.call("output", {"handle": state["first"], "cursor": state["resume_cursor"]})
        check(resumed["data"] == "beta\ngot:hello mcp\n", "restart: output resumes at a cursor from the first server", resumed["data"])
        lost = await server.call("output", {"handle": state["live"]})
        check(lost["data"] == state["live_text"], "restart: the lost process's output is served", lost["data"])
        check(lost["state"] == "lost_on_restore", "restart: its page says lost_on_restore", lost["state"])
        waited = await server.call("wait", {"handle": state["live"], "timeout_ms": 1000})
        check(waited["state"] == "lost_on_restore", "restart: wait returns at once for a lost process", waited)
        only_lost = await server.call("list", {"state": "lost_on_restore"})
        check([p["handle"] for p in only_lost["processes"]] == [state["live"]], "restart: list filters by state", only_lost)
        labelled = await server.call("list", {"label": "test=mcp"})
        check([p["handle"] for p in labelled["processes"]] == [state["first"]], "restart: list filters by label", labelled)

        # A second server on a root that is in use is refused, naming the lock.
        other = subprocess.run([args.binary, "mcp", "--root", root, "--standalone"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        check(other.returncode != 0, "a second server on the same root fails", other.returncode)
        check("LOCK" in other.stderr and root in other.stderr, "its error names the root and its lock", other.stderr)
        check(other.stdout == "", "its stdout stays clean", other.stdout)

        # A process still running when the client leaves is stopped by the server's shutdown.
        running = await server.call("start", {"command": ["sleep", "300"]})
        state["left_running"] = running["handle"]
    # The client closed the server's stdin here and waited for it to exit.


async def third_server(args, root, work, state):
    async with Server(args.binary, root, work / "server3.log") as server:
        # The newest revision (2026-07-28) has no initialize handshake: server/discover, then
        # every request carries its own protocol metadata.
        await server.session.discover()
        check(server.session.protocol_version == "2026-07-28", "discover: the 2026-07-28 protocol", server.session.protocol_version)
        check(server.session.server_info.name == "procjournal", "discover: the server is procjournal", server.session.server_info)
        listed = {p["handle"]: p for p in (await server.call("list", {}))["processes"]}
        left = listed[state["left_running"]]
        check(left["state"] in ("terminated", "killed"), "closing stdin stopped the server's processes gracefully", left)
        check(len(listed) == 4, "the third server sees all four processes", len(listed))
        started = await server.call("start", {"command": ["sh", "-c", "echo done; exit 3"]})
        ended = await server.call("wait", {"handle": started["handle"], "timeout_ms": 10000})
        check((ended["state"], ended["exit_code"], ended.get("signal")) == ("exited", 3, None), "wait reports the exit code", ended)
        await server.refused("wait", {"handle": state["live"], "timeout_ms": "soon"}, "bad_args", "timeout as a string")
        await restart_session(server, started["handle"])
        await terminal_session(server, started["handle"])
        await capture_session(server)
        await paced_session(server)


async def restart_session(server, finished):
    """`restart`: a finished command again, linked to it; a withheld value asked for."""
    again = await server.call("restart", {"handle": finished})
    check(again["handle"] != finished and again["restart_of"] == finished, "restart links the new process to the old", again)
    ended = await server.call("wait", {"handle": again["handle"], "timeout_ms": 10000})
    check((ended["state"], ended["exit_code"]) == ("exited", 3), "the restarted command runs again", ended)
    secret = await server.call("start", {"command": ["sh", "-c", 'test "$TOKEN" = abc'], "env": {"TOKEN": "abc"}})
    await server.call("wait", {"handle": secret["handle"], "timeout_ms": 10000})
    await server.refused("restart", {"handle": secret["handle"]}, "missing_env", "a restart without the withheld value", mentions="TOKEN")
    again = await server.call("restart", {"handle": secret["handle"], "env": {"TOKEN": "abc"}})
    ended = await server.call("wait", {"handle": again["handle"], "timeout_ms": 10000})
    check((ended["state"], ended["exit_code"]) == ("exited", 0), "the restart with the value supplied sees it", ended)
    await server.refused("restart", {"handle": "p-" + "0" * 32}, "unknown_handle", "a restart of an unknown handle")


async def read_terminal(server, handle, cursor, needle, timeout_s=20.0):
    """Pages a terminal's output from `cursor` (raw bytes: a REPL's line editor writes escape
    sequences, which safe_text would drop) until the text contains `needle`."""
    text = ""
    deadline = time.monotonic() + timeout_s
    while needle not in text:
        check(time.monotonic() < deadline, f"the terminal shows {needle!r} in time", text)
        page = await server.call("output", {"handle": handle, "cursor": cursor, "wait_ms": 1000, "rendering": "base64"})
        assert all(span["stream"] == "terminal" for span in page["spans"]), page["spans"]
        text += base64.b64decode(page["data"]).decode("utf-8", "replace")
        cursor = page["next_cursor"]
    return text, cursor


async def terminal_session(server, piped_handle):
    """A REPL under a terminal: start with `pty`, type into it, resize it."""
    started = await server.call("start", {"command": ["python3", "-i", "-q"], "pty": {"rows": 24, "cols": 80}})
    handle = started["handle"]
    _, cursor = await read_terminal(server, handle, 0, ">>> ")
    ask = "import os; print('size', os.get_terminal_size())\n"
    await server.call("input", {"handle": handle, "text": ask})
    _, cursor = await read_terminal(server, handle, cursor, "columns=80, lines=24")
    check(True, "the REPL sees the terminal size it was started with")
    resized = await server.call("resize", {"handle": handle, "rows": 40, "cols": 120})
    check((resized["rows"], resized["cols"]) == (40, 120), "resize answers with the new size", resized)
    await server.call("input", {"handle": handle, "text": ask})
    _, cursor = await read_terminal(server, handle, cursor, "columns=120, lines=40")
    check(True, "after resize the REPL sees the new size")
    await server.refused("resize", {"handle": piped_handle, "rows": 10, "cols": 10}, "not_running", "resize of an ended process")
    await server.refused("resize", {"handle": handle, "rows": 0, "cols": 10}, "bad_args", "a terminal of 0 rows", mentions="at least one row")
    await server.call("input", {"handle": handle, "text": "exit()\n"})
    ended = await server.call("wait", {"handle": handle, "timeout_ms": 10000})
    check((ended["state"], ended["exit_code"]) == ("exited", 0), "the REPL exits when told", ended)


async def capture_session(server):
    """Run to completion: the whole output with a receipt, and the receipt of a
    stream past `max_bytes`."""
    script = "printf 'out\\n'; printf 'err\\n' >&2; exit 4"
    done = await server.call("capture", {"start": {"command": ["sh", "-c", script]}})
    check(done["complete"] is True and (done["state"], done["exit_code"]) == ("exited", 4), "capture: a finished run is complete with its exit code", done)
    streams = {s["stream"]: s for s in done["streams"]}
    check((streams["stdout"]["prefix"], streams["stderr"]["prefix"]) == ("out\n", "err\n"), "capture: each stream whole", streams)
    check(all(s["end"] == "eof" for s in done["streams"]), "capture: both streams reached end of file", streams)
    big = await server.call("capture", {"start": {"command": ["sh", "-c", "printf 0123456789"]}, "max_bytes": 4})
    out = {s["stream"]: s for s in big["streams"]}["stdout"]
    check(big["complete"] is False and out["prefix"] == "0123", "capture: a stream past max_bytes is an incomplete prefix", big)
    check(out["end"] == "incomplete" and out["reasons"] == [{"why": "limit_exceeded", "limit": 4}] and out["resume_cursor"] == 4, "capture: its receipt says why and where the rest is", out)
    rest = await server.call("output", {"handle": big["handle"], "cursor": out["resume_cursor"]})
    check(rest["data"] == "456789", "capture: the rest is read from the resume cursor", rest)


async def paced_session(server):
    """Paced reads: `start` with `yield_ms` (and `settle_ms`, `max_bytes`), `output` with
    `min_bytes`, `settle_ms` and `tail_lines`, processes named by number. The SDK validates each
    structured result against the output schema tools/list declared (listed here first)."""
    tools = {t.name: t for t in (await server.session.list_tools()).tools}
    check(all(tools[n].output_schema for n in ("start", "output")), "paced: start and output declare output schemas")
    script = "printf 'one\\ntwo\\nthree\\n'; exit 5"
    done = await server.call("start", {"command": script, "yield_ms": 10000})
    check(done["command"] == ["sh", "-c", script], "paced: a string command runs under sh -c", done["command"])
    check((done["state"], done["exit_code"]) == ("exited", 5), "paced: start with yield_ms waits for the end", done)
    page = done["output"]
    check((page["cursor"], page["data"], page["next_cursor"]) == (0, "one\ntwo\nthree\n", 14), "paced: its page from cursor 0 holds all the output", page)
    tail = await server.call("output", {"handle": done["number"], "tail_lines": 2})
    check((tail["cursor"], tail["data"]) == (4, "two\nthree\n"), "paced: tail_lines=2 starts at the second-last line", tail)
    tail1 = await server.call("output", {"handle": f"#{done['number']}", "tail_lines": 1, "cursor": 11})
    check((tail1["cursor"], tail1["data"]) == (11, "ee\n"), "paced: tail_lines never starts before cursor", tail1)

    live = await server.call("start", {"command": "echo ready; read x; echo got:$x; exec sleep 300", "yield_ms": 30000, "settle_ms": 300, "max_bytes": 1024})
    page = live["output"]
    check(live["state"] == "running", "paced: start with settle_ms returns while the process runs", live)
    check("ready\n".startswith(page["data"]) and page["next_cursor"] == len(page["data"]), "paced: its page is what came before the quiet", page)
    ready = await server.call("output", {"handle": live["handle"], "cursor": 0, "wait_ms": 10000, "min_bytes": 6})
    check(ready["data"] == "ready\n", "paced: min_bytes=6 waits for the whole first line", ready)
    await server.call("input", {"handle": live["handle"], "text": "x\n"})
    echoed = await server.call("output", {"handle": live["handle"], "cursor": 6, "wait_ms": 10000, "min_bytes": 1, "settle_ms": 300})
    check(echoed["data"] == "got:x\n" and echoed["state"] == "running", "paced: settle_ms returns the reply once output is quiet", echoed)
    stopped = await server.call("stop", {"handle": live["handle"], "grace_ms": 5000})
    check(stopped["state"] == "terminated", "paced: stopped", stopped)


async def attached_servers(args, root, work, state):
    """The Inspector's pattern with the official client: one server per step, attached."""
    async with Server(args.binary, root, work / "attached1.log", standalone=False) as server:
        init = await server.session.initialize()
        check("keep running when this server exits" in (init.instructions or ""), "attached: the instructions say processes outlive the server", init.instructions)
        started = await server.call("start", {"command": ["sh", "-c", "echo attached; exec sleep 300"]})
        state["attached"] = started["handle"]
    async with Server(args.binary, root, work / "attached2.log", standalone=False) as server:
        await server.session.initialize()
        listed = {p["handle"]: p for p in (await server.call("list", {}))["processes"]}
        check(listed[state["attached"]]["state"] == "running", "attached: the process runs on after its server exited", listed[state["attached"]])
        await server.read_until(state["attached"], 0, "attached\n")
    async with Server(args.binary, root, work / "attached3.log", standalone=False) as server:
        await server.session.initialize()
        stopped = await server.call("stop", {"handle": state["attached"], "grace_ms": 5000})
        check(stopped["state"] == "terminated", "attached: a later server stops it", stopped)
    shutdown = subprocess.run([args.binary, "shutdown", "--root", root], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    check(shutdown.returncode == 0, "attached: the daemon the first server started shuts down", shutdown.stderr)


async def main(args):
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    root = str(work / "root")
    state = {}
    try:
        with anyio.fail_after(150):
            await first_server(args, root, work, state)
            await second_server(args, root, work, state)
            await third_server(args, root, work, state)
            await attached_servers(args, str(work / "attached-root"), work, state)
    finally:
        # The process of the killed server is nobody's child any more: end it here.
        if "orphan_pid" in state:
            try:
                os.kill(state["orphan_pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        if (work / "attached-root" / "procjournal.sock").exists():
            subprocess.run([args.binary, "shutdown", "--root", str(work / "attached-root")], stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        for log in sorted(work.glob("*.log")):
            print(f"--- {log.name}\n{log.read_text()}", end="", flush=True)
    print(f"mcp session: {passed} passed, 0 failed", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", required=True, help="the procjournal binary")
    parser.add_argument("--workdir", required=True, help="an empty directory for the runtime root and logs")
    anyio.run(main, parser.parse_args())
    sys.exit(0)
