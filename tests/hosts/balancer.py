"""nginx in front of the hosts, configured as docker-compose.yml's load balancer is, plus what a
balancer needs once a host can vanish: a short connect timeout, `max_fails`, and passing a request
that could not be sent on to the next host.

POST is not idempotent, so nginx passes it on only when it never reached a host (a failed or
timed-out connect): a request a host has taken is never sent twice, and is metered once. The
access log names the host (`$upstream_addr`) and the gateway's request id of every request.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.children import die_with_parent, stop
from tests.support.gateway import free_port

CONNECT_TIMEOUT_S = 1  # a cut-off host answers no SYN: the next host gets the request after this
FAIL_TIMEOUT_S = 5  # a host that failed is left out this long before nginx tries it again


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (path for path in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if Path(path).is_file()), None
    )


def render_config(root: Path, port: int, hosts: list[str]) -> str:
    servers = "\n".join(
        f"        server {address} max_fails=1 fail_timeout={FAIL_TIMEOUT_S}s;" for address in hosts
    )
    temp = root / "tmp"
    return f"""
worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
user root root;  # its files live in a private temporary folder
events {{ worker_connections 4096; }}
http {{
    log_format hosts '$status $upstream_http_x_request_id $request_method $uri $upstream_addr';
    access_log {root}/access.log hosts;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    upstream gateways {{
{servers}
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 32m;
        large_client_header_buffers 4 16k;
        client_header_timeout 10s;
        client_body_timeout 30s;
        location / {{
            proxy_pass http://gateways;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 900s;
            proxy_connect_timeout {CONNECT_TIMEOUT_S}s;
            proxy_next_upstream error timeout;
            proxy_next_upstream_tries 3;
        }}
    }}
}}
"""


@dataclass
class Balancer:
    """One nginx on a free loopback port of the root namespace."""

    root: Path
    hosts: list[str]  # address:port of each gateway host
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, binary: str) -> Balancer:
        self.port = self.port or free_port()
        (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        conf = self.root / "nginx.conf"
        conf.write_text(render_config(self.root, self.port, self.hosts))
        self.process = subprocess.Popen(
            [binary, "-c", str(conf), "-p", str(self.root)],
            stdout=subprocess.DEVNULL,
            stderr=(self.root / "stderr.log").open("wb"),
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited: {(self.root / 'stderr.log').read_text()}")
            try:
                httpx.get(self.base_url + "/healthz", timeout=2).raise_for_status()
                return self
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("nginx did not answer through to a gateway")

    def served_by(self) -> dict[str, str]:
        """Request id -> the host address that answered it, from the access log."""
        served: dict[str, str] = {}
        for line in (self.root / "access.log").read_text().splitlines():
            status, request_id, _, _, upstreams = line.split(maxsplit=4)
            if status == "200" and request_id != "-":
                # after a failed connect nginx lists each host it tried ("a:p, b:p"): the last answered
                served[request_id] = upstreams.split(",")[-1].strip().rsplit(":", 1)[0]
        return served

    def abandoned(self, address: str | None = None) -> int:
        """Requests nginx sent to `address` (any host: None) that the client gave up on before an
        answer (499)."""
        return sum(
            1
            for line in (self.root / "access.log").read_text().splitlines()
            if line.startswith("499 ") and address in (None, line.rsplit(maxsplit=1)[-1].rsplit(":", 1)[0])
        )

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)
            self.process = None
