"""Shard sets from real servers on loopback: nginx over HTTP, and s3rver, an S3-compatible store
(it checks the access key and S3's headers, not the Signature V4 itself). Training from either
equals training from the same shards on disk bit for bit; the ranks of a machine fetch each shard
once into their shared cache; a small cache stays within its bound; 404, 403 and an unreachable
server are named with what to do."""

import http.server
import json
import os
import subprocess
import tempfile
import threading
import time
import unittest
from collections import Counter

from http_server import Server, nginx_command
from proc import dptrain, env_with, free_port, installed_for_test, run
from train_runs import compare_checkpoints, last_json

RUN = ["-a", "resnet20", "--image-size", "24", "-b", "8", "-j", "2", "--lr", "0.2", "--seed", "3",
       "--deterministic", "-p", "100", "--epochs", "2"]
S3_KEY = "S3RVER"  # s3rver's own credentials


def launch(*args):
    return [dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "train", *args]


class RemoteShards(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tools = {tool: installed_for_test(tool) for tool in ("nginx", "s3rver", "curl")}
        cls.tmp = tempfile.TemporaryDirectory(prefix="dpt_remote_shards_")
        cls.servers = []
        try:
            cls.set_up_servers()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def set_up_servers(cls):
        tmp = cls.tmp.name
        folder, cls.shards = os.path.join(tmp, "folder"), os.path.join(tmp, "www", "sets", "shards")
        code, out, err = run([dptrain(), "make-dataset", folder, "--train-size", "96", "--val-size", "40",
                              "--classes", "4", "--image-size", "32"], timeout=60)
        assert code == 0, out + err
        code, out, err = run([dptrain(), "make-shards", folder, cls.shards, "--shard-size", "0.04"], timeout=60)
        assert code == 0, out + err
        cls.train_shards = json.loads(out.strip().splitlines()[-1])["train"]["shards"]
        cls.http_port, cls.s3_port = free_port(), free_port()
        nginx_dir = os.path.join(tmp, "nginx")
        cls.access_log = os.path.join(nginx_dir, "access.log")
        cls.servers.append(Server(nginx_command(cls.tools["nginx"], os.path.join(tmp, "www"), cls.http_port, nginx_dir,
                                                cls.access_log), cls.http_port, os.path.join(tmp, "nginx.out")))
        cls.servers.append(Server([cls.tools["s3rver"], "-d", os.path.join(tmp, "s3"), "-a", "127.0.0.1",
                                   "-p", str(cls.s3_port), "--configure-bucket", "datasets", "--silent"], cls.s3_port,
                                  os.path.join(tmp, "s3rver.out")))
        endpoint = f"http://127.0.0.1:{cls.s3_port}"
        for split in ("train", "val"):
            for name in sorted(os.listdir(os.path.join(cls.shards, split))):
                subprocess.run([cls.tools["curl"], "-sSf", "--aws-sigv4", "aws:amz:us-east-1:s3",
                                "--user", f"{S3_KEY}:{S3_KEY}", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                                "-T", os.path.join(cls.shards, split, name),
                                f"{endpoint}/datasets/shards/{split}/{name}"], check=True, timeout=60)
        cls.s3_env = env_with(AWS_ACCESS_KEY_ID=S3_KEY, AWS_SECRET_ACCESS_KEY=S3_KEY, AWS_REGION="us-east-1",
                              AWS_ENDPOINT_URL=endpoint)

    @classmethod
    def tearDownClass(cls):
        for server in cls.servers:
            server.close()
        cls.tmp.cleanup()

    def path(self, *parts):
        return os.path.join(self.tmp.name, *parts)

    def train(self, data, name, *flags, env=None):
        code, out, err = run(launch(data, *RUN, "--output", self.path(name), *flags), timeout=240, env=env)
        self.assertEqual(code, 0, out + err)
        return last_json(out), self.path(name, "checkpoint.pt"), out

    def test_http_and_s3_train_as_the_same_shards_on_disk(self):
        log_start = os.path.getsize(self.access_log)  # the other tests' requests come before
        local = self.train(self.shards, "local")
        over_http = self.train(f"http://127.0.0.1:{self.http_port}/sets/shards", "http",
                               "--data-cache", self.path("http_cache"))
        over_s3 = self.train("s3://datasets/shards", "s3", "--data-cache", self.path("s3_cache"), "--fetch-streams",
                             "3", env=self.s3_env)
        # The banner says where the shards go and how many are fetched at once (--fetch-streams).
        self.assertIn(f"; fetched 2 shard(s) at once into {self.path('http_cache')}, at most 20 GiB\n", over_http[2])
        self.assertIn(f"; fetched 3 shard(s) at once into {self.path('s3_cache')}, at most 20 GiB; S3 at "
                      f"http://127.0.0.1:{self.s3_port} (region us-east-1), signed with the key from AWS_ACCESS_KEY_ID\n",
                      over_s3[2])
        self.assertNotIn("fetched", local[2])
        self.assertNotIn("S3 at", over_http[2])
        for remote in (over_http, over_s3):
            self.assertEqual(remote[0]["val"], local[0]["val"])
            comparison = compare_checkpoints(local[1], remote[1])
            self.assertTrue(comparison.bitwise and comparison.optimizer_bitwise, comparison)
        # Two ranks, two epochs, one cache: each shard crossed the network once.
        with open(self.access_log) as f:
            f.seek(log_start)
            fetched = Counter(line.split('"')[1].split()[1] for line in f if '.tar HTTP' in line)
        self.assertEqual(len([url for url in fetched if "/train/" in url]), self.train_shards)
        self.assertEqual(set(fetched.values()), {1}, fetched)

    def test_a_small_cache_stays_within_its_bound(self):
        limit = 0.0002  # GiB: about 210 KB, some five of the shards
        # What a process killed mid-fetch leaves: its room (as large as the whole cache here) and
        # its partial file. No lock is held for them, so the first fetch removes both.
        os.makedirs(self.path("small"))
        leftovers = [self.path("small", "0123456789abcdef-train-000000.tar.reserved"),
                     self.path("small", "0123456789abcdef-train-000000.tar.part.4194303.0")]
        with open(leftovers[0], "wb") as f:
            f.truncate(int(limit * 2**30))
        with open(leftovers[1], "wb") as f:
            f.write(b"x" * 1000)
        self.train(f"http://127.0.0.1:{self.http_port}/sets/shards", "small", "--data-cache", self.path("small"),
                   "--data-cache-size", str(limit))
        held = sum(os.path.getsize(self.path("small", name)) for name in os.listdir(self.path("small"))
                   if name.endswith(".tar"))
        whole = sum(os.path.getsize(os.path.join(self.shards, split, name)) for split in ("train", "val")
                    for name in os.listdir(os.path.join(self.shards, split)) if name.endswith(".tar"))
        self.assertGreater(whole, 1.5 * limit * 2**30)  # the bound binds: the set does not fit
        self.assertGreater(held, 0)
        self.assertLessEqual(held, limit * 2**30)
        self.assertEqual([path for path in leftovers if os.path.exists(path)], [])

    def test_failures_name_the_url_and_what_to_do(self):
        missing = f"http://127.0.0.1:{self.http_port}/sets/nothing"
        code, out, err = run(launch(missing, *RUN, "--data-cache", self.path("c1")), timeout=120)
        self.assertNotEqual(code, 0)
        self.assertIn(f"cannot fetch {missing}/train/manifest.json: HTTP 404; nothing is there", err)
        wrong = env_with(AWS_ACCESS_KEY_ID="NOBODY", AWS_SECRET_ACCESS_KEY="wrong", AWS_REGION="us-east-1",
                         AWS_ENDPOINT_URL=f"http://127.0.0.1:{self.s3_port}")
        code, out, err = run(launch("s3://datasets/shards", *RUN, "--data-cache", self.path("c2")), timeout=120,
                             env=wrong)
        self.assertNotEqual(code, 0)
        self.assertIn("cannot fetch s3://datasets/shards/train/manifest.json: HTTP 403; the store refused this "
                      "request: check the credentials (from AWS_ACCESS_KEY_ID), the region (us-east-1)", err)
        closed = f"http://127.0.0.1:{free_port()}/sets/shards"
        started = time.monotonic()
        code, out, err = run(launch(closed, *RUN, "--data-cache", self.path("c3")), timeout=120)
        self.assertNotEqual(code, 0)
        self.assertRegex(err, r"cannot fetch .*/train/manifest.json: .* after 6 attempts; check that the server is up")
        self.assertLess(time.monotonic() - started, 60)

    def test_s3_settings_from_an_aws_profile(self):
        """A machine set up for the AWS command line: key, region and endpoint in ~/.aws, the profile
        named by AWS_PROFILE, no AWS_* keys in the environment."""
        home = self.path("home")
        os.makedirs(os.path.join(home, ".aws"))
        with open(os.path.join(home, ".aws", "credentials"), "w") as f:
            f.write(f"[default]\naws_access_key_id = NOBODY\naws_secret_access_key = x\n\n"
                    f"[datasets]\naws_access_key_id = {S3_KEY}\naws_secret_access_key = {S3_KEY}\n")
        with open(os.path.join(home, ".aws", "config"), "w") as f:
            f.write(f"[profile datasets]\nregion = us-east-1\nendpoint_url = http://127.0.0.1:{self.s3_port}\n"
                    f"[default]\nendpoint_url = http://127.0.0.1:{self.s3_port}\n")
        unset = {name: None for name in os.environ if name.startswith("AWS_")}

        def bench_loader(cache, **env):
            return run([dptrain(), "bench-loader", "s3://datasets/shards/train", "--size", "24", "--batch-size", "8",
                        "--epochs", "1", "--data-cache", self.path(cache)], timeout=120,
                       env=env_with(**unset, HOME=home, **env))

        code, out, err = bench_loader("profile_cache", AWS_PROFILE="datasets")
        self.assertEqual(code, 0, out + err)
        self.assertEqual(last_json(out)["images"], 96)  # the one timed pass over the training shards
        # The default profile's key is refused, and the message says where it came from.
        code, out, err = bench_loader("default_cache")
        self.assertNotEqual(code, 0)
        self.assertIn(f"HTTP 403; the store refused this request: check the credentials (from "
                      f"{home}/.aws/credentials [default]), the region (us-east-1)", err)
        code, out, err = bench_loader("missing_cache", AWS_PROFILE="nightly")
        self.assertNotEqual(code, 0)
        self.assertIn("the AWS profile 'nightly' (AWS_PROFILE) is in neither", err)

    def test_s3_key_from_a_credential_process(self):
        """A profile whose key comes from a credential_process (as `aws configure export-credentials`
        serves single sign-on): run once for a key that does not expire, and again before each
        request for one that expires within the renewal window (10 minutes)."""
        home = self.path("process_home")
        os.makedirs(os.path.join(home, ".aws"))
        runs = os.path.join(home, "runs.txt")
        script = os.path.join(home, "get key")
        with open(script, "w") as f:
            f.write(f'#!/bin/sh\necho "$1" >> "{runs}"\n'
                    f'printf \'{{"Version": 1, "AccessKeyId": "{S3_KEY}", "SecretAccessKey": "{S3_KEY}"%s}}\' "$2"\n')
        os.chmod(script, 0o755)
        soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 60))
        with open(os.path.join(home, ".aws", "config"), "w") as f:
            f.write(f"[profile lasting]\nendpoint_url = http://127.0.0.1:{self.s3_port}\n"
                    f"credential_process = '{script}' lasting\n"
                    f"[profile brief]\nendpoint_url = http://127.0.0.1:{self.s3_port}\n"
                    f"credential_process = '{script}' brief ', \"Expiration\": \"{soon}\"'\n")
        unset = {name: None for name in os.environ if name.startswith("AWS_")}
        for profile in ("lasting", "brief"):
            code, out, err = run([dptrain(), "bench-loader", "s3://datasets/shards/train", "--size", "24",
                                  "--batch-size", "8", "--epochs", "1", "--data-cache", self.path(f"{profile}_cache")],
                                 timeout=120, env=env_with(**unset, HOME=home, AWS_PROFILE=profile))
            self.assertEqual(code, 0, out + err)
            self.assertEqual(last_json(out)["images"], 96)
        with open(runs) as f:
            asked = f.read().split()
        # One store opens the set and fetches its shards: one run for the lasting key. The brief one is
        # renewed for each request: the manifest, then each shard's index and archive.
        self.assertEqual(asked.count("lasting"), 1, asked)
        self.assertEqual(asked.count("brief"), 1 + 2 * self.train_shards, asked)

    def test_s3_key_from_the_role_of_an_instance_or_a_container(self):
        """A machine that holds a role, with no key written anywhere: an EC2 instance (its metadata
        service, IMDSv2: a session token, the role's name, its key) and an ECS task or EKS pod (its
        agent's URL, with the token file's Authorization). The real endpoints exist only on AWS, so
        a stand-in on loopback answers as AWS documents them. A key that expires within the renewal
        window is fetched again for each request; one that lasts, once."""
        token_file = self.path("pod_token")
        with open(token_file, "w") as f:
            f.write("pod-secret\n")
        soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 60))
        later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 6 * 3600))
        asked = []

        class RoleEndpoints(http.server.BaseHTTPRequestHandler):
            def answer(self, status, body):
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def key(self, expiration, **extra):
                return json.dumps({**extra, "AccessKeyId": S3_KEY, "SecretAccessKey": S3_KEY,
                                   "Token": "session-token", "Expiration": expiration})

            def do_PUT(self):
                asked.append(("PUT", self.path, self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")))
                if self.path == "/latest/api/token":
                    self.answer(200, "imds-session")
                else:
                    self.answer(404, "")

            def do_GET(self):
                asked.append(("GET", self.path, self.headers.get("X-aws-ec2-metadata-token") or
                              self.headers.get("Authorization")))
                roles = "/latest/meta-data/iam/security-credentials/"
                if self.path.startswith(roles) and self.headers.get("X-aws-ec2-metadata-token") != "imds-session":
                    self.answer(401, "")
                elif self.path == roles:
                    self.answer(200, "dptrain-reader")
                elif self.path == roles + "dptrain-reader":
                    self.answer(200, self.key(soon, Code="Success", Type="AWS-HMAC"))
                elif self.path == "/pod/credentials" and self.headers.get("Authorization") == "pod-secret":
                    self.answer(200, self.key(later))
                else:
                    self.answer(403 if self.path == "/pod/credentials" else 404, "")

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RoleEndpoints)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        stand_in = f"http://127.0.0.1:{server.server_address[1]}"
        unset = {name: None for name in os.environ if name.startswith("AWS_")}
        empty_home = self.path("role_home")
        os.makedirs(empty_home)

        def bench_loader(cache, **env):
            return run([dptrain(), "bench-loader", "s3://datasets/shards/train", "--size", "24", "--batch-size", "8",
                        "--epochs", "1", "--data-cache", self.path(cache)], timeout=120,
                       env=env_with(**unset, HOME=empty_home, AWS_ENDPOINT_URL=f"http://127.0.0.1:{self.s3_port}",
                                    **env))

        code, out, err = bench_loader("instance_cache", AWS_EC2_METADATA_SERVICE_ENDPOINT=stand_in)
        self.assertEqual(code, 0, out + err)
        self.assertEqual(last_json(out)["images"], 96)
        # Renewed for each request (the manifest, each shard's index and archive), each time the
        # whole way: a session token (asked for 6 hours), the role's name, its key, with the token.
        requests = 1 + 2 * self.train_shards
        self.assertEqual(asked.count(("PUT", "/latest/api/token", "21600")), requests, asked)
        self.assertEqual(asked.count(("GET", "/latest/meta-data/iam/security-credentials/dptrain-reader",
                                      "imds-session")), requests, asked)
        self.assertEqual(len(asked), 3 * requests, asked)
        asked.clear()
        code, out, err = bench_loader("container_cache", AWS_CONTAINER_CREDENTIALS_FULL_URI=f"{stand_in}/pod/credentials",
                                      AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=token_file)
        self.assertEqual(code, 0, out + err)
        self.assertEqual(last_json(out)["images"], 96)
        self.assertEqual(asked, [("GET", "/pod/credentials", "pod-secret")])  # a key for 6 hours: asked once
        # The wrong token: the endpoint's refusal, named.
        with open(token_file, "w") as f:
            f.write("stale")
        code, out, err = bench_loader("refused_cache", AWS_CONTAINER_CREDENTIALS_FULL_URI=f"{stand_in}/pod/credentials",
                                      AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=token_file)
        self.assertNotEqual(code, 0)
        self.assertIn(f"the container's role (AWS_CONTAINER_CREDENTIALS_FULL_URI {stand_in}/pod/credentials) gave no "
                      f"key: HTTP 403", err)


if __name__ == "__main__":
    unittest.main()
