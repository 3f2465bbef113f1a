"""The router reached from inside a sandbox that has no network.

A black-box agent that runs its own tools (OpenCode edits files and runs bash itself) must run
inside the episode's sandbox, and a sandbox that denies network has a network namespace of its
own: the host's 127.0.0.1, where the router listens, is not there. A Unix socket is a file, and
files cross: the host end (`HostEnd`) listens on a socket in the tree and relays each connection
to the router's TCP port; inside, `python -m loongsage.agentflow.agents.router_bridge` listens on
the sandbox's own loopback, relays to that socket, and runs the agent. The agent gets a plain
http://127.0.0.1 base URL and reaches the router and nothing else.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

SOCKET_DIR = ".loongsage-router"  # in the tree; removed before the episode's diff is taken
SOCKET_NAME = "router.sock"
SANDBOX_PORT = 18080  # any port: the sandbox's loopback is its own
_CHUNK = 65536


class HostEnd:
    """Listens on `<tree>/SOCKET_DIR/SOCKET_NAME` and relays every connection to `router_address`.
    `socket_path_inside`: where the sandbox sees the socket."""

    def __init__(self, tree: Path, workdir: str, router_address: tuple[str, int], owner: int | None = None):
        self._dir = tree / SOCKET_DIR
        self._dir.mkdir(exist_ok=True)
        path = self._dir / SOCKET_NAME
        self.socket_path_inside = f"{workdir}/{SOCKET_DIR}/{SOCKET_NAME}"
        self._router = router_address
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        os.chmod(path, 0o666)  # the sandbox's commands run as the workspace's own uid
        if owner is not None:
            os.chown(self._dir, owner, owner)
        self._listener.listen(64)
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name="router-bridge-host", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                inside, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                router = socket.create_connection(self._router, timeout=30)
                router.settimeout(None)
            except OSError:
                inside.close()
                continue
            relay(inside, router)

    def close(self) -> None:
        """Stop listening and remove the socket's directory from the tree."""
        self._closed.set()
        self._listener.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def relay(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes; then close both."""
    done = threading.Event()

    def pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(_CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            if not done.is_set():
                done.set()
                for end in (a, b):
                    try:
                        end.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
            source.close()

    threading.Thread(target=pump, args=(a, b), daemon=True).start()
    threading.Thread(target=pump, args=(b, a), daemon=True).start()


def base_url_inside(router_base_url: str) -> str:
    """The agent's base URL as seen inside the sandbox: the same path, on the sandbox's loopback."""
    path = router_base_url.split("://", 1)[-1].split("/", 1)
    return f"http://127.0.0.1:{SANDBOX_PORT}/" + (path[1] if len(path) > 1 else "")


def _serve_inside(socket_path: str, port: int) -> None:
    listener = socket.create_server(("127.0.0.1", port), backlog=64)

    def accept() -> None:
        while True:
            client, _ = listener.accept()
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(socket_path)
            except OSError:
                client.close()
                upstream.close()
                continue
            relay(client, upstream)

    threading.Thread(target=accept, name="router-bridge-inside", daemon=True).start()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="router_bridge", description=__doc__.split("\n")[0])
    parser.add_argument("--socket", required=True, help="the host end's socket, as the sandbox sees it")
    parser.add_argument("--port", type=int, default=SANDBOX_PORT)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the agent's command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("the agent's command is missing (after --)")
    _serve_inside(args.socket, args.port)  # listening before the agent starts: no race
    try:
        return subprocess.call(command)
    except OSError as exc:
        print(f"router_bridge: cannot start {command[0]!r}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
