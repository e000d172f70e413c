"""`dptrain train --timeline`: every rank writes a Chrome/Perfetto trace that parses, whose spans
nest on each rank's training track (the parts of a step inside the step, the wait for
communication inside backward), and whose gradient buckets, on the communication track, are
launched inside their step's backward and complete before that backward returns. And
`dptrain report`: headless Chromium opens its page and its table holds each rank's mean step; and
what Chromium draws of its charts, in a screenshot, has each series' colour at the position of
every one of the run's metrics (mapped through the chart's axes)."""

import html.parser
import json
import re
import os
import shutil
import tempfile
import unittest

import torch
from PIL import Image

from proc import cannot_run, dptrain, run

STEPS = 4
COMMON = ["--dummy", "-a", "resnet20", "--image-size", "32", "--dummy-train-size", str(STEPS * 2 * 16),
          "--dummy-val-size", "64", "-b", "16", "-j", "1", "--epochs", "1", "-p", "100", "--seed", "1"]
STEP_PARTS = ["data", "copy to device", "forward", "backward", "wait for communication", "synchronize",
              "metrics all-reduce", "optimizer"]
# Spans are written in whole nanoseconds of microsecond timestamps.
EPS = 0.002


def end(span):
    return span["ts"] + span["dur"]


def inside(inner, outer):
    return outer["ts"] - EPS <= inner["ts"] and end(inner) <= end(outer) + EPS


def spans(trace, tid):
    return [e for e in trace if e["ph"] == "X" and e["tid"] == tid]


class Timeline(unittest.TestCase):
    def check_rank(self, trace, rank, run_dir):
        names = {(e["name"], e.get("tid")): e["args"]["name"] for e in trace if e["ph"] == "M" and "name" in e["args"]}
        self.assertEqual(names[("process_name", None)], f"rank {rank}")
        self.assertEqual(names[("thread_name", 1)], "training")
        self.assertEqual(names[("thread_name", 2)], "communication")
        self.assertTrue(all(e["pid"] == rank for e in trace))

        training = spans(trace, 1)
        # Spans of one track nest: two of them are disjoint or one holds the other.
        for i, a in enumerate(training):
            for b in training[i + 1:]:
                disjoint = end(a) <= b["ts"] + EPS or end(b) <= a["ts"] + EPS
                self.assertTrue(disjoint or inside(a, b) or inside(b, a), (a, b))

        steps = [s for s in training if s["name"] == "step"]
        self.assertEqual([s["args"]["step"] for s in steps], list(range(1, STEPS + 1)))
        buckets = spans(trace, 2)
        bucket_bytes = None
        for step in steps:
            n = step["args"]["step"]
            parts = {s["name"]: s for s in training if s["name"] in STEP_PARTS and s["args"]["step"] == n}
            self.assertEqual(sorted(parts), sorted(STEP_PARTS), f"step {n}")
            for part in parts.values():
                self.assertTrue(inside(part, step), (part, step))
            backward = parts["backward"]
            self.assertTrue(inside(parts["wait for communication"], backward))
            for a, b in zip(["data", "copy to device", "forward", "backward"], ["copy to device", "forward", "backward",
                                                                              "optimizer"]):
                self.assertLessEqual(end(parts[a]), parts[b]["ts"] + EPS, f"{a} before {b}")
            mine = [b for b in buckets if b["args"]["step"] == n]
            self.assertGreater(len(mine), 1, f"step {n}: ResNet-20's gradients fill several buckets")
            self.assertEqual([b["name"] for b in mine], [f"bucket {k}" for k in range(len(mine))])
            for bucket in mine:
                # Launched once backward produced its gradients, complete before backward returns.
                self.assertTrue(inside(bucket, backward), (bucket, backward))
            # The first bucket (the last layers) leaves well before backward ends.
            self.assertLess(mine[0]["ts"], parts["wait for communication"]["ts"])
            sizes = [b["args"]["bytes"] for b in mine]
            self.assertEqual(sizes, bucket_bytes or sizes)
            bucket_bytes = sizes
        # Every float32 parameter of the model the run checkpointed is in some bucket.
        self.assertEqual(sum(bucket_bytes), 4 * parameter_count(os.path.join(run_dir, "checkpoint.pt")))
        validation = [s for s in training if s["name"] == "validation"]
        self.assertEqual([s["args"]["epoch"] for s in validation], [1])
        self.assertLessEqual(end(steps[-1]), validation[0]["ts"] + EPS)
        checkpoints = [s for s in training if s["name"] == "checkpoint"]
        self.assertEqual(len(checkpoints), 1 if rank == 0 else 0)  # rank 0 writes them

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="dpt_timeline_")
        # DDP with a bucket size given keeps one layout all along (without one it tunes the size over
        # its first steps: test_train_buckets).
        sized = {"ddp": ["--bucket-cap-mb", "25"], "hvd": []}
        cls.runs = {mode: train(os.path.join(cls.tmp.name, mode), mode, *sized[mode]) for mode in ["ddp", "hvd"]}
        cls.small_buckets = train(os.path.join(cls.tmp.name, "small_buckets"), "ddp", "--bucket-cap-mb", "0.05",
                                  "--first-bucket-cap-mb", "0.02", "--last-bucket-cap-mb", "0.02")
        cls.powersgd = train(os.path.join(cls.tmp.name, "powersgd"), "ddp", "--comm-hook", "powersgd",
                             "--powersgd-rank", "1", "--powersgd-start-iter", "2")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_every_rank_traces_its_steps_and_buckets(self):
        for mode, (code, out, err, trace) in self.runs.items():
            with self.subTest(mode=mode):
                self.assertEqual(code, 0, out + err)
                self.assertFalse(os.path.exists(trace))
                for rank in range(2):
                    self.check_rank(load_trace(trace, rank), rank, os.path.dirname(os.path.dirname(trace)))

    def test_the_bucket_flags_cut_the_gradients_into_smaller_buckets(self):
        code, out, err, trace = self.small_buckets
        self.assertEqual(code, 0, out + err)
        default = [b for b in spans(load_trace(self.runs["ddp"][3], 0), 2) if b["args"]["step"] == 1]
        small = [b for b in spans(load_trace(trace, 0), 2) if b["args"]["step"] == 1]
        self.assertEqual(sum(b["args"]["bytes"] for b in small), sum(b["args"]["bytes"] for b in default))
        # ResNet-20's 1.1 MB of gradients: 2 buckets under the default caps, many under 0.05 MiB.
        self.assertGreater(len(small), 10)
        self.assertGreater(len(small), 3 * len(default))
        # A bucket closes at the first parameter that reaches its cap (a parameter is never split).
        largest_parameter = 4 * 64 * 64 * 3 * 3
        self.assertTrue(all(b["args"]["bytes"] <= 0.05 * 2**20 + largest_parameter for b in small), small)
        code, out, err = run([dptrain(), "train", *COMMON, "--mode", "hvd", "--bucket-cap-mb", "1"], timeout=60)
        self.assertEqual(code, 2, out + err)
        self.assertIn("--bucket-cap-mb, --first-bucket-cap-mb, --last-bucket-cap-mb and --find-unused-parameters "
                      "belong to --mode ddp and ps", err)

    def test_the_timeline_and_report_show_what_powersgd_reduced(self):
        code, out, err, trace = self.powersgd
        self.assertEqual(code, 0, out + err)
        events = load_trace(trace, 0)
        buckets = spans(events, 2)
        steps = sorted({b["args"]["step"] for b in buckets})
        per_step = {n: [b for b in buckets if b["args"]["step"] == n] for n in steps}
        # Plain allreduce for the first 2 steps, then ResNet-20's convolutions as rank-1 factors.
        for n in steps[:2]:
            self.assertEqual([b["args"]["reduced_bytes"] for b in per_step[n]], [b["args"]["bytes"] for b in per_step[n]])
        for n in steps[2:]:
            gradient = sum(b["args"]["bytes"] for b in per_step[n])
            reduced = sum(b["args"]["reduced_bytes"] for b in per_step[n])
            self.assertGreater(gradient / reduced, 10, n)
        run_dir = os.path.dirname(os.path.dirname(trace))
        code, out, err = run([dptrain(), "report", run_dir, "--timeline", trace], timeout=60)
        self.assertEqual(code, 0, out + err)
        page = read_page(os.path.join(run_dir, "report.html"))
        timed = [e for e in events if e["ph"] == "X" and e["name"] == "step"]
        gradient_mb = sum(b["args"]["bytes"] for b in buckets) / len(timed) / 1e6
        reduced_mb = sum(b["args"]["reduced_bytes"] for b in buckets) / len(timed) / 1e6
        self.assertAlmostEqual(page.cells[("gradient MB", 0)], gradient_mb, delta=1e-3)
        self.assertAlmostEqual(page.cells[("reduced MB", 0)], reduced_mb, delta=1e-3)
        self.assertAlmostEqual(page.cells[("compression", 0)], gradient_mb / reduced_mb, delta=0.05)
        self.assertGreater(page.cells[("compression", 0)], 1.5)

    def test_the_report_page_plots_the_metrics_and_the_mean_step_of_each_rank(self):
        code, out, err, trace = self.runs["ddp"]
        self.assertEqual(code, 0, out + err)
        run_dir = os.path.dirname(os.path.dirname(trace))
        code, out, err = run([dptrain(), "report", run_dir, "--timeline", trace], timeout=60)
        self.assertEqual(code, 0, out + err)
        self.assertIn("2 rank timeline(s)", out)
        page = read_page(os.path.join(run_dir, "report.html"))
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f]

        # Every logged value: at its position on its chart, mapped through the chart's axes, the
        # screenshot shows the series' colour (a point's disc, a line's vertex).
        def logged(phase, key):
            return [(r["global_step"], r[key]) for r in records if r["phase"] == phase]
        expected = {("loss", "train (logged steps)"): logged("train_step", "loss"),
                    ("loss", "validation"): logged("val", "loss"),
                    ("top-1 (%)", "train (epoch)"): logged("train", "acc1"),
                    ("top-1 (%)", "validation"): logged("val", "acc1"),
                    ("learning rate", "learning rate"): logged("train_step", "lr"),
                    ("images/s (all ranks)", "epoch"): logged("train", "img_per_s")}
        drawn = Screenshot(os.path.join(run_dir, "report.html"), page, run_dir)
        for (chart, series), values in expected.items():
            self.assertTrue(values, (chart, series))
            for x, y in values:
                self.assertTrue(drawn.shows(chart, series, x, y), (chart, series, x, y))
            # A control: the same series a fifth of the axis higher is not drawn there.
            c = page.charts[chart]
            x, y = values[-1]
            self.assertFalse(drawn.shows(chart, series, x, y + 0.2 * (c["y-max"] - c["y-min"])), (chart, series))
        self.assertEqual(page.text_of("last-val-acc1"), f"{logged('val', 'acc1')[-1][1]:.2f}%")

        # The breakdown table: each rank's mean of each part over its steps, as the trace has it.
        for rank in range(2):
            events = [e for e in load_trace(trace, rank) if e["ph"] == "X"]
            steps = [e for e in events if e["name"] == "step"]
            mean = lambda name: sum(e["dur"] for e in events if e["name"] == name and e["tid"] == 1) / len(steps) / 1e3
            wait = mean("wait for communication")
            for part, ms in [("step", mean("step")), ("forward", mean("forward")), ("data", mean("data")),
                             ("backward compute", mean("backward") - wait), ("wait for communication", wait),
                             ("optimizer", mean("optimizer")), ("steps", len(steps))]:
                self.assertAlmostEqual(page.cells[(part, rank)], ms, delta=1e-9 + 1e-9 * abs(ms), msg=(rank, part))
            buckets = [e for e in events if e["tid"] == 2]
            self.assertEqual(page.cells[("buckets", rank)], len(buckets) // len(steps))
            self.assertAlmostEqual(page.cells[("bucket", rank)], sum(e["dur"] for e in buckets) / len(buckets) / 1e3)


def train(run_dir, mode, *extra):
    trace = os.path.join(run_dir, "traces", "trace.json")
    code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "train",
                          *COMMON, "--mode", mode, "--output", run_dir, "--timeline", trace, *extra], timeout=240)
    return code, out, err, trace


def parameter_count(checkpoint):
    """The trained parameters' elements in a dptrain checkpoint (its state dict less the buffers)."""
    state = torch.load(checkpoint)["state_dict"]
    buffers = ("running_mean", "running_var", "num_batches_tracked")
    return sum(t.numel() for name, t in state.items() if not name.endswith(buffers))


def load_trace(trace, rank):
    root, ext = os.path.splitext(trace)
    with open(f"{root}.rank{rank}{ext}") as f:
        return json.load(f)


class Page(html.parser.HTMLParser):
    """The report as Chromium parsed it (--dump-dom): each chart's axes, and the breakdown table's
    cells by (part, rank)."""

    def __init__(self):
        super().__init__()
        self.charts, self.cells, self.ids = {}, {}, {}
        self.chart = self.part = self.id = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and a.get("class") == "chart":
            self.chart = {k[5:]: float(v) for k, v in a.items() if k.startswith("data-") and k != "data-title"}
            self.charts[a["data-title"]] = self.chart
        elif tag == "tr" and "data-part" in a:
            self.part = a["data-part"]
        elif tag == "td" and "data-rank" in a:
            self.cells[(self.part, int(a["data-rank"]))] = float(a["data-value"])
        self.id = a.get("id")

    def handle_endtag(self, tag):
        if tag == "svg":
            self.chart = None
        self.id = None

    def handle_data(self, data):
        if self.id:
            self.ids[self.id] = self.ids.get(self.id, "") + data

    def text_of(self, element_id):
        return self.ids[element_id]

    def position(self, title, x, y):
        """Where the value (x, y) lies on chart `title`, in its own pixels."""
        c = self.charts[title]
        return (c["left"] + (x - c["x-min"]) / (c["x-max"] - c["x-min"]) * (c["right"] - c["left"]),
                c["bottom"] - (y - c["y-min"]) / (c["y-max"] - c["y-min"]) * (c["bottom"] - c["top"]))


class Screenshot:
    """The report's charts as headless Chromium draws them: each chart's markup on a page of its
    own at a known offset, one screenshot of them all."""

    HEIGHT = 260  # each chart's slot; a chart is 250 px high

    def __init__(self, report, page, work_dir):
        with open(report) as f:
            markup = f.read()
        style = re.search(r"<style>(.*?)</style>", markup, re.S).group(1)
        self.charts = re.findall(r'(<svg class="chart".*?</svg>)', markup, re.S)
        self.titles = [re.search(r'data-title="([^"]*)"', svg).group(1).replace("&amp;", "&") for svg in self.charts]
        self.colors = {}
        for title, svg in zip(self.titles, self.charts):
            for name, color in re.findall(r'<polyline class="series" data-series="([^"]*)" points="[^"]*" '
                                          r'stroke="(#[0-9a-f]{6})"', svg):
                self.colors[(title, name)] = tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))
        slots = "".join(f'<div style="position:absolute;left:0;top:{k * self.HEIGHT}px">{svg}</div>'
                        for k, svg in enumerate(self.charts))
        single = os.path.join(work_dir, "charts.html")
        with open(single, "w") as f:
            f.write(f"<!DOCTYPE html><html><head><style>{style} body{{margin:0}}</style></head><body>{slots}</body>"
                    "</html>")
        png = os.path.join(work_dir, "charts.png")
        chromium(["--hide-scrollbars", "--force-device-scale-factor=1",
                  f"--window-size=600,{self.HEIGHT * len(self.charts)}", f"--screenshot={png}", "file://" + single])
        self.image = Image.open(png).convert("RGB")
        self.page = page

    def shows(self, title, series, x, y):
        """Whether a pixel within 2 px of (x, y)'s position has the series' colour."""
        px, py = self.page.position(title, x, y)
        top = self.titles.index(title) * self.HEIGHT
        want = self.colors[(title, series)]
        for dx in range(-2, 3):
            for dy in range(-2, 3):
                u, v = round(px) + dx, round(py) + top + dy
                if 0 <= u < self.image.width and 0 <= v < self.image.height:
                    if sum(abs(a - b) for a, b in zip(self.image.getpixel((u, v)), want)) < 60:
                        return True
        return False


def chromium(args):
    browser = shutil.which("chromium")
    if browser is None:
        cannot_run("chromium is not installed (scripts/install-deps installs it)")
    with tempfile.TemporaryDirectory(prefix="dpt_chromium_") as profile:
        code, out, err = run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                              f"--user-data-dir={profile}", *args], timeout=120)
    if code != 0:
        raise AssertionError(f"chromium failed (exit {code}):\n{err[-2000:]}")
    return out


def read_page(path):
    """The page's DOM as headless Chromium has it after loading the file."""
    out = chromium(["--dump-dom", "file://" + os.path.abspath(path)])
    if "<svg" not in out:
        raise AssertionError(f"chromium could not open the report:\n{out[-2000:]}")
    page = Page()
    page.feed(out)
    return page


if __name__ == "__main__":
    unittest.main()
