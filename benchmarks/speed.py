"""Speed benchmark of the edit stages: ``python benchmarks/speed.py [options]``.

The same as ``zerounlearn bench-speed [options]`` (see ``--help``); the implementation is
:mod:`zerounlearn_editor.harness.speed_bench`. Example (CPU, SmolLM2, both pipelines)::

    OMP_NUM_THREADS=1 python benchmarks/speed.py --n 10,50 --out results/speed/smollm2_cpu.json
"""
from __future__ import annotations

import sys

from zerounlearn_editor.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench-speed", *sys.argv[1:]]))
