"""A job admits only the processes that hold its token (dist/admission.h, docs/security.md), on
loopback with `dptrain check` as the workers: a one-node launch makes a token and gives it to its
workers; a job of two launchers shares one through --job-token FILE, turns away a process with
another token or none (each told why, and rank 0 logs them), and still trains with its own; a token
file others may read is refused. No output shows the token."""

import json
import os
import re
import stat
import tempfile
import unittest

from proc import Started, dptrain, env_with, free_port, run

TOKEN_LIKE = re.compile(r"[0-9a-f]{64}")


def check_report(out):
    """The JSON line rank 0 of `dptrain check` ends with, under the launcher's "[rank 0] " prefix."""
    lines = [line for line in out.splitlines() if line.startswith("[rank 0] {")]
    return json.loads(lines[-1][len("[rank 0] "):])


class JobToken(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="dpt_job_token_")
        self.addCleanup(self.dir.cleanup)
        self.token_file = os.path.join(self.dir.name, "job.token")
        with open(self.token_file, "w") as f:
            f.write("correct horse battery staple\n")
        os.chmod(self.token_file, stat.S_IRUSR | stat.S_IWUSR)

    def node(self, rank, port):
        return Started([dptrain(), "launch", "--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "1",
                        "--master-port", str(port), "--rendezvous-timeout", "60", "--job-token", self.token_file,
                        "--", dptrain(), "check", "--timeout", "60"], env=env_with(DPTRAIN_JOB_TOKEN=None))

    def stranger(self, port, token):
        """A lone `dptrain check` that takes itself for rank 1 of the job at `port`."""
        return run([dptrain(), "check", "--timeout", "30"], timeout=60,
                   env=env_with(RANK=1, WORLD_SIZE=2, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, MASTER_ADDR="127.0.0.1",
                                MASTER_PORT=port, DPTRAIN_RENDEZVOUS_TIMEOUT=30, DPTRAIN_JOB_TOKEN=token))

    def test_strangers_are_turned_away_and_the_job_goes_on(self):
        port = free_port()
        node0 = self.node(0, port)
        try:
            code, out, err = self.stranger(port, "another job's token")
            self.assertNotEqual(code, 0, out)
            self.assertIn(f"rank 1: not admitted to the job at 127.0.0.1:{port}: this process holds a different job "
                          "token.", err)
            code, out, err = self.stranger(port, None)
            self.assertNotEqual(code, 0, out)
            self.assertIn("the job requires a job token and this process has none", err)
            node1 = self.node(1, port)
            try:
                results = [node0.wait(timeout=120), node1.wait(timeout=120)]
            finally:
                node1.close()
        finally:
            node0.close()
        for index, (code, out, err) in enumerate(results):
            self.assertEqual(code, 0, f"node {index}:\n{out}\n{err}")
            self.assertIn(f"rank {index}/2: 11 collectives correct", out)
            self.assertIsNone(TOKEN_LIKE.search(out + err))
            self.assertNotIn("correct horse", out + err)
        out, err = results[0][1], results[0][2]
        self.assertIn(f"rank 0: refused a process that tried to join 127.0.0.1:{port} (rank 1: this process holds a "
                      "different job token); the job goes on", err)
        self.assertIn("(rank 1: the job requires a job token and this process has none)", err)
        self.assertTrue(check_report(out)["job_token"])

    def test_a_one_node_launch_gives_its_workers_a_token_of_its_own(self):
        code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "check",
                              "--timeout", "60"], timeout=120, env=env_with(DPTRAIN_JOB_TOKEN=None))
        self.assertEqual(code, 0, f"{out}\n{err}")
        self.assertIn("rank 0: admission: only processes that hold this job's token (DPTRAIN_JOB_TOKEN) may join", out)
        self.assertTrue(check_report(out)["job_token"])
        self.assertIsNone(TOKEN_LIKE.search(out + err))

    def test_a_token_file_others_may_read_is_refused(self):
        os.chmod(self.token_file, 0o644)
        code, out, err = run([dptrain(), "launch", "--nnodes", "2", "--nproc-per-node", "1", "--job-token",
                              self.token_file, "--", dptrain(), "check"], timeout=60)
        self.assertEqual(code, 2, f"{out}\n{err}")
        self.assertIn(f"the job token file '{self.token_file}' may be read or written by others than its owner "
                      f"(mode 644): a token others can read keeps no one out. Run: chmod 600 {self.token_file}", err)


if __name__ == "__main__":
    unittest.main()
