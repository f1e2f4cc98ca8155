#!/bin/bash
# On a machine with an NVIDIA GPU (the `device` tool): the gpu-marked tests, and gkdtop's NVML collector beside
# nvidia-smi, idle and under a torch matmul load. Run from the repository root: `bash bench/gpu_check.sh`.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,utilization.gpu,driver_version --format=csv
python3 -c "import pynvml, psutil, yaml; print('pynvml', pynvml.__file__)"
python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_nccl_ras.py -rA 2>&1 | tail -25
python3 - <<'PY'
import subprocess, threading, time, torch
from gkdtop.collectors.gpu import GpuCollector, NvmlBackend
def smi():
    out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout.strip()
    return out
c = GpuCollector(NvmlBackend())
s = c.collect()
d = s.devices[0]
print("driver", s.driver, "status", s.status, "| idle gkdtop: util", d.utilization, "mem MiB", d.memory_used // 2**20, "temp", d.temperature, "power", d.power, "/", d.power_limit, "| smi:", smi())
stop = False
def load():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while not stop:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()
t = threading.Thread(target=load); t.start(); time.sleep(3)
for i in range(4):
    s = c.collect(); d = s.devices[0]
    print(f"busy{i} gkdtop: util {d.utilization} mem MiB {d.memory_used // 2**20} power {d.power} | smi: {smi()}", "procs", d.processes)
    time.sleep(1)
stop = True; t.join()
import os; print("this pid", os.getpid())
c.close()
PY
