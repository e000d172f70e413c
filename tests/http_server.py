"""A server process for a test or a benchmark (nginx, s3rver), and nginx's command line for
serving a folder: one process in the foreground, its configuration and temporary files in a
folder of its own."""

import os
import signal
import socket
import subprocess
import time


class Server:
    """A server process in a session of its own, its output in a file, killed with its group."""

    def __init__(self, args, port, log):
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{args[0]} exited with {self.proc.returncode}: {open(log).read()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.05)
        self.close()
        raise AssertionError(f"{args[0]} did not listen on port {port} within 30 s: {open(log).read()}")

    def close(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def nginx_command(nginx, root, port, prefix, access_log="off", server="", host="127.0.0.1"):
    """The command line of `nginx` (its path) serving `root` on `host`:`port`, its configuration
    and files written under `prefix`; `server`: more directives for the server block (limit_rate
    4m;)."""
    os.makedirs(prefix, exist_ok=True)
    config = os.path.join(prefix, "nginx.conf")
    with open(config, "w") as f:
        f.write(f"""daemon off; master_process off; worker_processes 1; pid {prefix}/nginx.pid; error_log stderr;
events {{ worker_connections 64; }}
http {{
    access_log {access_log}; sendfile on; tcp_nopush on;
    client_body_temp_path {prefix}/body; proxy_temp_path {prefix}/proxy; fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi; scgi_temp_path {prefix}/scgi;
    server {{ listen {host}:{port}; root {root}; {server}}}
}}
""")
    return [nginx, "-p", prefix, "-c", config]
