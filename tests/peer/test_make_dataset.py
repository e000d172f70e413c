"""`dptrain make-dataset` output read back by torchvision and by plain byte checks."""
import json
import os
import subprocess
import tempfile
import unittest

from torchvision import datasets

DPTRAIN = os.path.join(os.environ.get("DPT_BUILD", "build"), "bin", "dptrain")


def make(out, *flags):
    result = subprocess.run([DPTRAIN, "make-dataset", out, *flags], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise AssertionError(f"make-dataset failed ({result.returncode}): {result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


class MakeDataset(unittest.TestCase):
    def test_image_folder_loads_in_torchvision(self):
        with tempfile.TemporaryDirectory() as out:
            report = make(out, "--train-size", "24", "--val-size", "8", "--classes", "4", "--image-size", "32")
            self.assertEqual(report["train"], 24)
            train = datasets.ImageFolder(os.path.join(out, "train"))
            val = datasets.ImageFolder(os.path.join(out, "val"))
            self.assertEqual(train.classes, ["class_000", "class_001", "class_002", "class_003"])
            self.assertEqual(len(train), 24)
            self.assertEqual(len(val), 8)
            self.assertEqual(sorted(train.targets), sorted([i % 4 for i in range(24)]))
            image, label = train[5]
            self.assertEqual(image.size, (32, 32))

    def test_cifar_files_have_whole_records(self):
        with tempfile.TemporaryDirectory() as out:
            make(out, "--format", "cifar", "--train-size", "12", "--val-size", "3", "--classes", "10")
            sizes = [os.path.getsize(os.path.join(out, f"data_batch_{k}.bin")) for k in range(1, 6)]
            self.assertEqual(sum(sizes), 12 * 3073)
            self.assertTrue(all(s % 3073 == 0 and s > 0 for s in sizes))
            with open(os.path.join(out, "test_batch.bin"), "rb") as f:
                data = f.read()
            self.assertEqual(len(data), 3 * 3073)
            self.assertEqual([data[0], data[3073], data[2 * 3073]], [0, 1, 2])

    def test_bad_flags_exit_2(self):
        with tempfile.TemporaryDirectory() as out:
            result = subprocess.run([DPTRAIN, "make-dataset", out, "--format", "cifar", "--classes", "11"],
                                    capture_output=True, text=True, timeout=60)
            self.assertEqual(result.returncode, 2)
            self.assertIn("--classes must be at most 10", result.stderr)


if __name__ == "__main__":
    unittest.main()
