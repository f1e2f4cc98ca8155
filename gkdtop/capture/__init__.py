"""Reading a process from outside: /proc, py-spy, faulthandler and probe dumps, Flight Recorder, NCCL RAS.

Collectors (the sampler) and actions (`s`, `c`, the bundle) both read processes through this layer;
neither imports the other. No Textual, no store: each function takes processes and returns model data.
"""
