"""Two "nodes" on one machine (network namespaces, see netns.py), one `dptrain launch`
in each (--nnodes 2 --node-rank 0/1), the master in the first, collectives across the link.
Needs root and iproute2; skips, saying why, where namespaces cannot be made."""

import unittest

from netns import Nodes
from proc import Started, dptrain


class TwoNodes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.nodes = Nodes(2)
        cls.addr, cls.dev = cls.nodes.addr, cls.nodes.dev

    @classmethod
    def tearDownClass(cls):
        cls.nodes.close()

    def node(self, index):
        return Started(self.nodes.run_in(index, [dptrain(), "launch", "--nnodes", "2", "--node-rank",
                        str(index), "--nproc-per-node", "2", "--master-addr", self.addr[0], "--master-port", "29400",
                        "--", dptrain(), "check", "--timeout", "60", "--interface", self.dev[index]]))

    def test_collectives_across_the_link(self):
        nodes = [self.node(0), self.node(1)]
        try:
            results = [n.wait(timeout=120) for n in nodes]
        finally:
            for n in nodes:
                n.close()
        for index, (code, out, err) in enumerate(results):
            self.assertEqual(code, 0, f"node {index}:\n{out}\n{err}")
            for rank in (2 * index, 2 * index + 1):
                # Ranks on two nodes: Gloo alone, no shared memory.
                self.assertIn(f"[rank {rank}] rank {rank}/4: 11 collectives correct on gloo (", out)
                self.assertIn(f"(local {rank % 2}/2, node {index})", out)
        self.assertIn(f"master {self.addr[0]}:29400", results[1][1])


if __name__ == "__main__":
    unittest.main()
