"""The CUDA local pass of the chunk-parallel backward against float64 and the Gluon pass, on a GPU: the five bf16 and
fp16 cases this record's calls ran (2.7b shapes, two groups with states, packed sequences, fp16, head dimension 128).
The script grew a float32 case in the next record and lives there now; this runs it on these five cases (unless
``--cases`` names others).

    python docs/bench/cuda-local-2026-11-29/check_local.py [--quick] [--cases 0,2]
"""

import os
import runpy
import sys

if __name__ == "__main__":
    if "--cases" not in sys.argv:
        sys.argv += ["--cases", "0,1,2,3,4"]
    here = os.path.dirname(os.path.abspath(__file__))
    runpy.run_path(os.path.join(here, "..", "cuda-mma-2026-11-29", "check_local.py"), run_name="__main__")
