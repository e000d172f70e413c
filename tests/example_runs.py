"""Finding the example programs and reading the epoch lines they print."""

import os
import re

from proc import dptrain


def example(name):
    """An example program, from the build directory."""
    return os.path.join(os.path.dirname(dptrain()), name)


def epochs_in(out, prefix=""):
    """(train loss, val top-1, val images) of each epoch line."""
    return [(float(loss), float(top1), int(images)) for loss, top1, images in
            re.findall(rf"{re.escape(prefix)}epoch \d/\d: train loss ([\d.]+), val loss [\d.]+, "
                       r"val top-1 ([\d.]+)% \((\d+) images\)", out)]
