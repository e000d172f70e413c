"""Prints the launcher's environment contract as one JSON line."""
import json
import os

keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
        "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES"]
print("ENV " + json.dumps({k: os.environ.get(k) for k in keys}), flush=True)
