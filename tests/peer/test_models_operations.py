"""dptrain's training step runs the same computing operations as torchvision's (`bench/models
--op-counts`: each side's ATen operations of one step, by name): no extra copy, cast, out-of-place
activation or unfused addition on dptrain's side, and none missing, for ResNet-50 (the GPU
benchmark's model, bottlenecks and residual joints), MobileNet V2 (depthwise blocks, ReLU6) and
DenseNet-121 (concatenations), float32 channels_last as a GPU step runs them (the bf16 CPU step
fuses batch norm and ReLU by design).

Only operations that compute or move tensor data are compared. Bookkeeping that launches nothing
differs by API and is left out: LibTorch's Module::zero_grad detaches each gradient, its `+= 1` on
batch norm's counter dispatches add_ twice, its Linear calls addmm without aten::linear.
"""
import json
import os
import sys
import unittest

from proc import run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARCHS = ["resnet50", "mobilenet_v2", "densenet121"]
# What an extra or missing one of costs a step memory traffic or compute.
COMPUTING = {
    "aten::convolution", "aten::convolution_backward", "aten::native_batch_norm", "aten::native_batch_norm_backward",
    "aten::relu", "aten::relu_", "aten::hardtanh", "aten::hardtanh_", "aten::threshold_backward",
    "aten::hardtanh_backward", "aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward",
    "aten::adaptive_avg_pool2d", "aten::mean", "aten::addmm", "aten::mm", "aten::add", "aten::mul", "aten::sum",
    "aten::copy_", "aten::_to_copy", "aten::clone", "aten::contiguous", "aten::cat", "aten::_log_softmax",
    "aten::nll_loss_forward", "aten::_log_softmax_backward_data", "aten::nll_loss_backward",
}


class TrainingStepOperations(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        command = [sys.executable, os.path.join(ROOT, "bench", "models"), "--archs", ",".join(ARCHS), "--rounds", "1",
                   "--steps", "1", "--warmup", "1", "--batch", "2", "--channels-last", "--op-counts"]
        code, out, err = run(command, timeout=280)
        if code != 0:
            raise AssertionError(f"bench/models failed ({code}):\n{out}\n{err}")
        cls.rows = {row["arch"]: row for row in json.loads(out.strip().splitlines()[-1])["models"]}

    def test_the_same_computing_operations_as_torchvision(self):
        for arch in ARCHS:
            with self.subTest(arch=arch):
                differences = self.rows[arch]["op_differences"]
                computing = {name: counts for name, counts in differences.items() if name in COMPUTING}
                self.assertEqual(computing, {}, f"{arch}: operations run a different number of times "
                                                "([dptrain, torchvision]): " + json.dumps(computing))

    def test_the_comparison_sees_what_both_sides_ran(self):
        # The differences are few beside the step's operations: both sides were counted (a side
        # that counted nothing would differ in every operation).
        for arch in ARCHS:
            with self.subTest(arch=arch):
                differences = self.rows[arch]["op_differences"]
                self.assertNotIn("aten::convolution", differences)
                self.assertLess(len(differences), 12, json.dumps(differences))


if __name__ == "__main__":
    unittest.main()
