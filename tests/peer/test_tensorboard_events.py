"""The log files dptrain writes, read back by parsers written here: TensorBoard event files (TFRecord
framing, CRC-32C, protobuf wire format, decoded without TensorFlow or protobuf), metrics.jsonl
(json) and the plain console lines. The reports come from this test, go through
make_observers() in $DPT_BUILD/bin/dptrain_log_writer, and must come back unchanged."""
import glob
import json
import os
import re
import socket
import struct
import subprocess
import tempfile
import time
import unittest

WRITER = os.path.join(os.environ.get("DPT_BUILD", "build"), "bin", "dptrain_log_writer")


def crc32c(data):
    """Bitwise CRC-32C (reflected Castagnoli polynomial): slow, obviously right."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path):
    """The payloads of a TFRecord file, every length and CRC checked."""
    with open(path, "rb") as f:
        data = f.read()
    records, pos = [], 0
    while pos < len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if length_crc != masked(crc32c(header)):
            raise AssertionError(f"bad length CRC at byte {pos}")
        payload = data[pos + 12:pos + 12 + length]
        (data_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if len(payload) != length or data_crc != masked(crc32c(payload)):
            raise AssertionError(f"bad or truncated record at byte {pos}")
        records.append(payload)
        pos += 16 + length
    return records


def varint(data, pos):
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def fields(message):
    """{field number: [raw values]} of one protobuf message (wire types 0, 1, 2, 5)."""
    out, pos = {}, 0
    while pos < len(message):
        key, pos = varint(message, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(message, pos)
        elif wire == 1:
            value, pos = message[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = varint(message, pos)
            value, pos = message[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = message[pos:pos + 4], pos + 4
        else:
            raise AssertionError(f"unexpected wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def decode_event(payload):
    """tensorflow.Event -> dict with wall_time, step, and file_version or scalars [(tag, value)]."""
    f = fields(payload)
    event = {"wall_time": struct.unpack("<d", f[1][0])[0], "step": f.get(2, [0])[0]}
    if 3 in f:
        event["file_version"] = f[3][0].decode()
    if 5 in f:
        event["scalars"] = []
        for value in fields(f[5][0]).get(1, []):
            v = fields(value)
            event["scalars"].append((v[1][0].decode(), struct.unpack("<f", v[2][0])[0]))
    return event


def float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


STEPS, EPOCHS, PRINT_FREQ = 5, 2, 2


def reports():
    """Two epochs of five steps, then a train and a val summary per epoch."""
    out = []
    for epoch in range(EPOCHS):
        for s in range(1, STEPS + 1):
            g = epoch * STEPS + s
            out.append({"step": {"epoch": epoch, "step_in_epoch": s, "steps_per_epoch": STEPS, "global_step": g,
                                 "loss": 2.3 / g, "acc1": 100.0 * g / 11, "acc5": 50 + g * 0.7, "lr": 0.1 * g / 10,
                                 "images_per_s": 1000.0 + g / 3, "eta_s": 0.25 * (STEPS - s)}})
        g = (epoch + 1) * STEPS
        for phase, loss in (("train", 1.1 / (epoch + 1)), ("val", 1.3 / (epoch + 1))):
            out.append({"epoch": {"phase": phase, "epoch": epoch, "global_step": g, "loss": loss,
                                  "acc1": 60.0 + epoch / 3, "acc5": 90.5 + epoch, "samples": 1000 + epoch,
                                  "images_per_s": 2000.0 / 3, "seconds": 1.5 + epoch,
                                  "skipped_images": epoch}})
    return out


class LogFiles(unittest.TestCase):
    maxDiff = None
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.out = os.path.join(cls.tmp.name, "run")
        cls.reports = reports()
        cls.before = time.time()
        result = subprocess.run([WRITER, cls.out, str(PRINT_FREQ)], capture_output=True, text=True, timeout=60,
                                input="".join(json.dumps(r) + "\n" for r in cls.reports))
        cls.after = time.time()
        if result.returncode != 0:
            raise AssertionError(f"dptrain_log_writer failed ({result.returncode}): {result.stderr}")
        cls.stdout = result.stdout

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def logged_steps(self):
        return [r["step"] for r in self.reports if "step" in r and (r["step"]["step_in_epoch"] - 1) % PRINT_FREQ == 0]

    def epochs(self):
        return [r["epoch"] for r in self.reports if "epoch" in r]

    def test_event_file(self):
        files = glob.glob(os.path.join(self.out, "events.out.tfevents.*"))
        self.assertEqual(len(files), 1, files)
        name = re.fullmatch(r"events\.out\.tfevents\.(\d{10})\.(.+)", os.path.basename(files[0]))
        self.assertIsNotNone(name, files[0])
        self.assertTrue(int(self.before) <= int(name.group(1)) <= self.after)
        self.assertEqual(name.group(2), socket.gethostname())

        events = [decode_event(p) for p in read_records(files[0])]
        self.assertEqual(events[0]["file_version"], "brain.Event:2")
        self.assertEqual(events[0]["step"], 0)
        for e in events:
            self.assertTrue(self.before <= e["wall_time"] <= self.after, e)

        expected = []  # in the order of the reports
        for r in self.reports:
            if "step" in r and (r["step"]["step_in_epoch"] - 1) % PRINT_FREQ == 0:
                s = r["step"]
                for tag, key in (("loss", "loss"), ("acc1", "acc1"), ("acc5", "acc5"), ("lr", "lr"),
                                 ("img_per_s", "images_per_s")):
                    expected.append((s["global_step"], "train/" + tag, float32(s[key])))
            if "epoch" in r:
                e = r["epoch"]
                section = "train_epoch/" if e["phase"] == "train" else "val/"
                for tag, key in (("loss", "loss"), ("acc1", "acc1"), ("acc5", "acc5"), ("img_per_s", "images_per_s")):
                    expected.append((e["global_step"], section + tag, float32(e[key])))
        got = []
        for e in events[1:]:
            self.assertEqual(len(e["scalars"]), 1, e)
            got.append((e["step"], *e["scalars"][0]))
        self.assertEqual(got, expected)
        self.assertEqual([g[0] for g in got[:5]], [1] * 5)  # steps 1, 3, 5 of each epoch
        self.assertEqual(sorted({g[0] for g in got}), [1, 3, 5, 6, 8, 10])

    def test_metrics_jsonl(self):
        with open(os.path.join(self.out, "metrics.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        steps = self.logged_steps()
        self.assertEqual(len(lines), len(steps) + len(self.epochs()))
        step_lines = [line for line in lines if line["phase"] == "train_step"]
        self.assertEqual([(l["epoch"], l["step"], l["steps"], l["global_step"]) for l in step_lines],
                         [(s["epoch"], s["step_in_epoch"], s["steps_per_epoch"], s["global_step"]) for s in steps])
        for line, s in zip(step_lines, steps):
            self.assertEqual((line["loss"], line["acc1"], line["acc5"], line["lr"], line["img_per_s"], line["eta_s"]),
                             (s["loss"], s["acc1"], s["acc5"], s["lr"], s["images_per_s"], s["eta_s"]))
        epoch_lines = [line for line in lines if line["phase"] != "train_step"]
        for line, e in zip(epoch_lines, self.epochs()):
            self.assertEqual({k: line[k] for k in ("phase", "epoch", "global_step", "loss", "acc1", "acc5", "samples",
                                                   "seconds", "skipped_images")},
                             {k: e[k] for k in ("phase", "epoch", "global_step", "loss", "acc1", "acc5", "samples",
                                                "seconds", "skipped_images")})
            self.assertEqual(line["img_per_s"], e["images_per_s"])
        for line in lines:
            self.assertTrue(self.before <= line["time"] <= self.after, line)

    def test_console_lines(self):
        lines = self.stdout.splitlines()
        self.assertEqual(len(lines), len(self.logged_steps()) + len(self.epochs()))
        self.assertEqual(lines[0], "Epoch: [0][1/5]  Loss 2.3000  Acc@1 9.09  Acc@5 50.70  lr 0.01000  "
                                   "img/s 1000.3  ETA 0:00:01")
        self.assertEqual(lines[-1], "Epoch: [1] val    Loss 0.6500  Acc@1 60.33  Acc@5 91.50  samples 1001  "
                                    "img/s 666.7  time 2.5s  bad images 1")


if __name__ == "__main__":
    unittest.main()
