"""scripts/bench_train.py with the CUDA local pass built under timing macros (chunked_bwd.CHUNKED_CONFIG's
CUDA_DEFINES, from the variable CUDA_DEFINES), for fine-tuning under a variant before it becomes the default.

    CUDA_DEFINES=W16=1 python docs/bench/w16-2026-11-29/train_defines.py --upgraded 8 --rounds 2 ...
"""

import os
import runpy
import sys
from pathlib import Path

from palimpsa.kernels import chunked_bwd

if __name__ == "__main__":
    chunked_bwd.CHUNKED_CONFIG["CUDA_DEFINES"] = os.environ.get("CUDA_DEFINES", "")
    print(f"CUDA_DEFINES {chunked_bwd.CHUNKED_CONFIG['CUDA_DEFINES']!r}", flush=True)
    script = Path(__file__).resolve().parents[3] / "scripts" / "bench_train.py"
    sys.argv = [str(script), *sys.argv[1:]]
    runpy.run_path(str(script), run_name="__main__")
