"""An engine server command for the Slurm test: says which devices it was given, then runs the
embedded engine with the launch flags it got (as `python -m loongsage.inference.embedded`)."""

import os
import runpy
import sys

print(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}", flush=True)
sys.argv = ["loongsage.inference.embedded", *sys.argv[1:]]
runpy.run_module("loongsage.inference.embedded", run_name="__main__")
